//! The span a server (ACP, the wire) serves a client's request in: the request's `SERVER`
//! span of the JSON-RPC conventions, whose parent is the trace context the client sent in
//! `params._meta` (through the program's propagator), else the span current where the
//! request was read.

use serde_json::Value;
use tracing::field::Empty;
use tracing::{Dispatch, Span};

use super::propagate;
use super::spans::{TARGET, record_error};

/// The span of one request being served, carried to the thread that serves it.
pub(crate) struct Served {
    span: Span,
    dispatch: Dispatch,
}

impl Served {
    /// The span of the request `method` with `id` and `params`, opened on the thread that
    /// read it.
    pub(crate) fn open(method: &str, id: Option<&Value>, params: Option<&Value>) -> Served {
        let id = id.and_then(request_id);
        let span = tracing::info_span!(
            target: TARGET,
            "serve",
            otel.name = method,
            otel.kind = "server",
            rpc.system.name = "jsonrpc",
            rpc.method = method,
            jsonrpc.request.id = id.as_deref(),
            rpc.response.status_code = Empty,
            error.type = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        propagate::extract(params, &span);
        Served {
            span,
            dispatch: tracing::dispatcher::get_default(Dispatch::clone),
        }
    }

    /// Runs `f` inside the span, on whatever thread serves the request, with the
    /// subscriber of the thread that read it; the span ends with it.
    pub(crate) fn run<R>(self, f: impl FnOnce(&Served) -> R) -> R {
        let dispatch = self.dispatch.clone();
        // The span is let go of inside the subscriber (see `Scope::in_scope`).
        tracing::dispatcher::with_default(&dispatch, move || {
            let r = self.span.in_scope(|| f(&self));
            drop(self);
            r
        })
    }

    /// The request was answered with the JSON-RPC error `code` (only the ACP server
    /// answers a prompt with one).
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    pub(crate) fn failed(&self, code: i64, message: &str) {
        let code = code.to_string();
        self.span.record("rpc.response.status_code", code.as_str());
        record_error(&self.span, &code, Some(message));
    }
}

/// `jsonrpc.request.id`: the id as text; none for a notification or a `null` id.
fn request_id(id: &Value) -> Option<String> {
    match id {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}
