//! Trace context across processes: what the program's [`Propagator`] writes of a span goes
//! into `params._meta` of the requests pagent sends (MCP), and what a client sends there
//! becomes the remote parent of the span pagent serves its request in (ACP, the wire).

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::{Map, Value};
use tracing::Span;

/// How a program's tracing carries a span's context to another process and back: for
/// OpenTelemetry, its text-map propagator over `tracing-opentelemetry`'s span context (see
/// the [module docs](super#propagation) and `examples/otlp`).
///
/// pagent depends on `tracing` only, which knows nothing of trace ids: the context of a
/// span lives in the program's subscriber, so the program reads and writes it. Set one with
/// [`set_propagator`]; without one, nothing is sent and what comes is ignored.
///
/// # Contract
/// Both methods are called on the thread that sends or serves the request, with the span
/// that stands for it; they must return quickly. A panic is caught and costs only the
/// propagation (nothing sent, no remote parent).
pub trait Propagator: Send + Sync + 'static {
    /// Writes the context of `span` into `carrier`: with OpenTelemetry's W3C propagator,
    /// `traceparent` and `tracestate` (and `baggage` with the baggage propagator). Called
    /// for each request and notification the MCP client sends, with the span of the
    /// request (see the [module docs](super#mcp-requests)).
    fn inject(&self, span: &Span, carrier: &mut Carrier);

    /// Makes the context in `carrier` (what a client sent in `params._meta`) the parent of
    /// `span`, the span pagent serves the request in, not entered yet: with
    /// `tracing-opentelemetry`, `span.set_parent(context)`. Called only when the client sent
    /// string fields in `_meta`.
    fn extract(&self, carrier: &Carrier, span: &Span);
}

/// The fields of a trace context on their way between processes: string keys and values,
/// as `params._meta` carries them (`traceparent`, `tracestate`, `baggage`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Carrier {
    fields: Vec<(String, String)>,
}

impl Carrier {
    /// An empty carrier.
    pub fn new() -> Carrier {
        Carrier::default()
    }

    /// The value of `key` (compared without ASCII case, as header names are).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value`, replacing a value it had.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self
            .fields
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(&key))
        {
            Some(field) => field.1 = value,
            None => self.fields.push((key, value)),
        }
    }

    /// The keys, in the order they were set.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(k, _)| k.as_str())
    }

    /// Whether it holds no field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

static PROPAGATOR: RwLock<Option<Arc<dyn Propagator>>> = RwLock::new(None);

/// Sets the propagator of the whole program, replacing the one set before.
///
/// One for the program, not one per agent, as OpenTelemetry's own propagator is
/// (`opentelemetry::global::set_text_map_propagator`): the context it reads belongs to the
/// program's subscriber, and the places it is used (the MCP clients, which agents share,
/// the ACP and wire servers) are not any one agent's.
pub fn set_propagator(propagator: impl Propagator) {
    *PROPAGATOR.write() = Some(Arc::new(propagator));
}

fn propagator() -> Option<Arc<dyn Propagator>> {
    PROPAGATOR.read().clone()
}

/// `params` with the context of `span` in its `_meta`, when a propagator is set and the
/// span is recorded: the fields the propagator wrote are added, never replacing a key the
/// caller put there. Params that are not an object (or whose `_meta` is not one) are left
/// as they are.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn inject(span: &Span, params: Option<Value>) -> Option<Value> {
    if span.is_disabled() {
        return params;
    }
    let Some(propagator) = propagator() else {
        return params;
    };
    let mut carrier = Carrier::new();
    // The program's code: a panic costs the propagation, not the request.
    if crate::agent::guard::catch(|| propagator.inject(span, &mut carrier)).is_err()
        || carrier.is_empty()
    {
        return params;
    }
    let mut map = match params {
        None => Map::new(),
        Some(Value::Object(map)) => map,
        other => return other,
    };
    // A `_meta` of the caller's that is not an object is theirs, left alone.
    if let Value::Object(meta) = map
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()))
    {
        for (key, value) in carrier.fields {
            meta.entry(key).or_insert(Value::String(value));
        }
    }
    Some(Value::Object(map))
}

/// `params` with the context of the current span in its `_meta` (see [`inject`]): every
/// request and notification the MCP client sends goes through here.
// Only the MCP client sends requests that carry a context.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn inject_current(params: Option<Value>) -> Option<Value> {
    inject(&Span::current(), params)
}

/// Hands the string fields of `params._meta` to the propagator, to make the context they
/// carry the parent of `span` (not entered yet).
pub(crate) fn extract(params: Option<&Value>, span: &Span) {
    if span.is_disabled() {
        return;
    }
    let Some(propagator) = propagator() else {
        return;
    };
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return;
    };
    let mut carrier = Carrier::new();
    for (key, value) in meta {
        if let Value::String(value) = value {
            carrier.set(key.as_str(), value.as_str());
        }
    }
    if !carrier.is_empty() {
        // The program's code: a panic costs the remote parent, not the request.
        let _ = crate::agent::guard::catch(|| propagator.extract(&carrier, span));
    }
}
