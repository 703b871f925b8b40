//! Counting tokens: the [`TokenCounter`] trait (a tokenizer of the model, or a server that
//! counts), the servers' own counts, and the context window a server reports.
//!
//! | server | exact count of a request | context window |
//! |---|---|---|
//! | llama.cpp `llama-server` ([`OpenAiCompat`]) | `POST /apply-template` then `POST /tokenize`: the prompt as the chat template renders it, tools included | `GET /props` (`default_generation_settings.n_ctx`, the context of one slot) |
//! | vLLM, LM Studio, OpenRouter ([`OpenAiCompat`]) | none | `GET /v1/models` (`max_model_len`, `max_context_length`, `context_length`, llama.cpp's `meta.n_ctx`) |
//! | OpenAI Responses ([`OpenAiResponses`]) | `POST /responses/input_tokens` (the request's `input_tokens`) | as [`OpenAiCompat`] (llama.cpp's `/props`, else `/v1/models`) |
//! | Anthropic ([`Anthropic`]) | `POST /v1/messages/count_tokens` | none: the table of known models |
//!
//! A server without the endpoint (404, 405, 501) is not asked again by that counter.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use serde_json::value::RawValue;

use super::http::Endpoint;
use super::{Anthropic, OpenAiCompat, OpenAiResponses, Request};
use crate::Error;
use crate::cancel::CancelToken;

/// Counts tokens for the agent's context figures and its context policy: a tokenizer of the
/// model on this machine, or a server that counts a whole request.
///
/// Both methods have a default that counts nothing, so a counter implements what it can: a
/// tokenizer [`text_tokens`](TokenCounter::text_tokens), a server
/// [`request_tokens`](TokenCounter::request_tokens). Set one with
/// [`AgentBuilder::token_counter`](crate::AgentBuilder::token_counter); by default the agent
/// uses its provider's ([`Provider::token_counter`](super::Provider::token_counter)).
///
/// # Contract
/// - `text_tokens` is called on the run thread once per message of the transcript (the agent
///   keeps each message's count), and for the system prompt and the tool definitions when
///   they change. It must be cheap: `None` falls back to the built-in estimate
///   ([`context::estimate_text`](crate::context::estimate_text)).
/// - `request_tokens` is called on the run thread only when a decision of the context policy
///   is near (the context within 10% of its threshold or budget), at most once per model
///   call, with the request as it would be sent. It may block on the network and must honour
///   `cancel`. `Ok(None)` or an error leaves the estimate in place; the run goes on.
/// - A panic in either is caught: the agent uses its estimate.
///
/// ```
/// use pagent::llm::TokenCounter;
///
/// /// A stand-in for a real tokenizer (tiktoken, a Hugging Face tokenizer): one token a word.
/// struct Words;
///
/// impl TokenCounter for Words {
///     fn text_tokens(&self, text: &str) -> Option<u64> {
///         Some(text.split_whitespace().count() as u64)
///     }
/// }
///
/// assert_eq!(Words.text_tokens("one two three"), Some(3));
/// ```
pub trait TokenCounter: Send + Sync {
    /// The tokens of `text` as the model's tokenizer splits it; `None` to use the built-in
    /// estimate. Defaults to `None`.
    fn text_tokens(&self, text: &str) -> Option<u64> {
        let _ = text;
        None
    }

    /// The tokens of `request` as the model reads it: system prompt, tools, messages and the
    /// chat template's framing; `Ok(None)` when this counter cannot count a request. Defaults
    /// to `Ok(None)`.
    ///
    /// # Errors
    /// Whatever asking the server failed with; the agent then keeps its estimate.
    fn request_tokens(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        let _ = (request, cancel);
        Ok(None)
    }

    /// A short name for `Debug` output. Defaults to `"token counter"`.
    fn name(&self) -> &str {
        "token counter"
    }
}

impl<T: TokenCounter + ?Sized> TokenCounter for Arc<T> {
    fn text_tokens(&self, text: &str) -> Option<u64> {
        (**self).text_tokens(text)
    }

    fn request_tokens(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        (**self).request_tokens(request, cancel)
    }

    fn name(&self) -> &str {
        (**self).name()
    }
}

/// The body `write` writes, with only the top-level fields `keep` keeps: the fields are read
/// back as raw JSON (`RawValue`), never as a tree of values, and written out as they are. The
/// messages' JSON in it comes from the request's body cache where the cache has it, as for a
/// model call; the body is read once more, not built again.
fn body_with(
    write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    write(&mut body).map_err(|e| Error::Provider(format!("the count's body: {e}")))?;
    let fields: BTreeMap<String, &RawValue> = serde_json::from_slice(&body)
        .map_err(|e| Error::Provider(format!("the count's body: {e}")))?;
    let kept: BTreeMap<&str, &RawValue> = fields
        .iter()
        .filter(|(key, _)| keep(key))
        .map(|(key, value)| (key.as_str(), *value))
        .collect();
    // OK because strings and raw JSON always serialize.
    Ok(serde_json::to_vec(&kept).expect("raw JSON serializes"))
}

/// Remembers that a server lacks an endpoint, so it is asked once.
#[derive(Debug, Default)]
struct Missing(AtomicBool);

impl Missing {
    fn is(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `value`, remembering a missing endpoint (`Ok(None)`).
    fn note<T>(&self, value: Result<Option<T>, Error>) -> Result<Option<T>, Error> {
        if let Ok(None) = value {
            self.0.store(true, Ordering::Relaxed);
        }
        value
    }
}

/// The exact count of an OpenAI-compatible server that is llama.cpp's `llama-server`: the
/// request's messages and tools rendered by the server's chat template (`/apply-template`),
/// then tokenized (`/tokenize`). [`OpenAiCompat::token_counter`] makes one.
#[derive(Debug)]
pub(crate) struct LlamaCppCounter {
    provider: OpenAiCompat,
    endpoint: Endpoint,
    missing: Missing,
}

impl LlamaCppCounter {
    pub(crate) fn new(provider: OpenAiCompat, endpoint: Endpoint) -> LlamaCppCounter {
        LlamaCppCounter {
            provider,
            endpoint,
            missing: Missing::default(),
        }
    }
}

/// The headers of a request with a bearer key.
fn bearer(endpoint: &Endpoint) -> Vec<(&'static str, String)> {
    endpoint
        .api_key
        .as_ref()
        .map(|key| ("authorization", format!("Bearer {key}")))
        .into_iter()
        .collect()
}

impl TokenCounter for LlamaCppCounter {
    fn request_tokens(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        if self.missing.is() {
            return Ok(None);
        }
        // The model call's body as it is: its messages' JSON from the body cache.
        let mut body = Vec::new();
        self.provider
            .write_body(request, &mut body)
            .map_err(|e| Error::Provider(format!("the count's body: {e}")))?;
        let rendered = self.missing.note(self.endpoint.json(
            "/apply-template",
            true,
            bearer(&self.endpoint),
            Some(body),
            cancel,
        ))?;
        let Some(prompt) = rendered.as_ref().and_then(|r| r.get("prompt")?.as_str()) else {
            return Ok(None);
        };
        let tokens = self.missing.note(
            self.endpoint.json(
                "/tokenize",
                true,
                bearer(&self.endpoint),
                Some(
                    serde_json::json!({ "content": prompt })
                        .to_string()
                        .into_bytes(),
                ),
                cancel,
            ),
        )?;
        Ok(tokens
            .as_ref()
            .and_then(|t| t.get("tokens")?.as_array().map(|a| a.len() as u64)))
    }

    fn name(&self) -> &str {
        "llama.cpp /tokenize"
    }
}

/// The exact count of Anthropic's `/v1/messages/count_tokens`: the request's body without
/// what only a model call takes (`max_tokens`, `stream`, `temperature`).
/// [`Anthropic::token_counter`] makes one.
#[derive(Debug)]
pub(crate) struct AnthropicCounter {
    provider: Anthropic,
    endpoint: Endpoint,
    version: &'static str,
    missing: Missing,
}

impl AnthropicCounter {
    pub(crate) fn new(provider: Anthropic, endpoint: Endpoint, version: &'static str) -> Self {
        AnthropicCounter {
            provider,
            endpoint,
            version,
            missing: Missing::default(),
        }
    }
}

impl TokenCounter for AnthropicCounter {
    fn request_tokens(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        if self.missing.is() {
            return Ok(None);
        }
        let body = body_with(
            |out| self.provider.write_body(request, out),
            |key| !["max_tokens", "stream", "temperature"].contains(&key),
        )?;
        let mut headers = vec![("anthropic-version", self.version.to_owned())];
        if let Some(key) = &self.endpoint.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        let counted = self.missing.note(self.endpoint.json(
            "/v1/messages/count_tokens",
            false,
            headers,
            Some(body),
            cancel,
        ))?;
        Ok(counted.and_then(|c| c.get("input_tokens")?.as_u64()))
    }

    fn name(&self) -> &str {
        "anthropic count_tokens"
    }
}

/// The exact count of the Responses API's `POST /responses/input_tokens`: the fields of the
/// request body that make its input (model, instructions, input items, tools, reasoning,
/// text format), without those only a model call takes (`stream`, `store`, `include`,
/// sampling, output limits, cache routing). [`OpenAiResponses::token_counter`] makes one.
#[derive(Debug)]
pub(crate) struct ResponsesCounter {
    provider: OpenAiResponses,
    endpoint: Endpoint,
    missing: Missing,
}

/// The body fields `/responses/input_tokens` takes, of those a Responses request writes.
const INPUT_TOKENS_FIELDS: &[&str] = &[
    "model",
    "instructions",
    "input",
    "previous_response_id",
    "conversation",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
];

impl ResponsesCounter {
    pub(crate) fn new(provider: OpenAiResponses, endpoint: Endpoint) -> ResponsesCounter {
        ResponsesCounter {
            provider,
            endpoint,
            missing: Missing::default(),
        }
    }
}

impl TokenCounter for ResponsesCounter {
    fn request_tokens(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        if self.missing.is() {
            return Ok(None);
        }
        let body = body_with(
            |out| self.provider.write_body(request, out),
            |key| INPUT_TOKENS_FIELDS.contains(&key),
        )?;
        let counted = self.missing.note(self.endpoint.json(
            "/responses/input_tokens",
            false,
            bearer(&self.endpoint),
            Some(body),
            cancel,
        ))?;
        Ok(counted.and_then(|c| c.get("input_tokens")?.as_u64()))
    }

    fn name(&self) -> &str {
        "openai responses input_tokens"
    }
}

/// The context window an OpenAI-compatible server reports for `model`: llama.cpp's `/props`
/// (the context of one slot, what one request may fill), else the model's entry in
/// `/v1/models` (vLLM's `max_model_len`, LM Studio's `max_context_length`, OpenRouter's
/// `context_length`, llama.cpp's `meta.n_ctx`). `None` when the server says nothing, or
/// asking failed.
pub(crate) fn openai_window(endpoint: &Endpoint, model: &str, cancel: &CancelToken) -> Option<u64> {
    let headers = || bearer(endpoint);
    if let Ok(Some(props)) = endpoint.json("/props", true, headers(), None, cancel)
        && let Some(n) = props
            .pointer("/default_generation_settings/n_ctx")
            .and_then(Value::as_u64)
            .filter(|n| *n > 0)
    {
        return Some(n);
    }
    let models = endpoint
        .json("/models", false, headers(), None, cancel)
        .ok()??;
    let list = models.get("data")?.as_array()?;
    let entry = list
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or(match list.as_slice() {
            [only] => Some(only),
            _ => None,
        })?;
    [
        "/max_model_len",
        "/max_context_length",
        "/context_length",
        "/meta/n_ctx",
        "/meta/n_ctx_train",
    ]
    .iter()
    .find_map(|p| entry.pointer(p).and_then(Value::as_u64).filter(|n| *n > 0))
}
