//! What a server asks of the client: elicitation (a question for the user, in a form or at a
//! URL) and the list of roots, answered by the program's hook; and the checks of an answer
//! against the schema the server asked with.
//!
//! The same questions come two ways: as a request of the server's own (`elicitation/create`,
//! `roots/list`) in the session era, and inside an `input_required` result (MRTR) in the
//! stateless era. Both go through [`Answers::answer`], so the hook sees one kind of
//! question whichever era the server speaks.

use std::fmt;

use serde_json::{Map, Value, json};

use crate::cancel::CancelToken;
use crate::elicit::ElicitationHook;
pub use crate::elicit::{Elicitation, ElicitationAnswer, ElicitationMode};
use crate::jsonrpc::{RpcError, codes};

/// A root: a directory or file the server may work in (`roots/list`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Root {
    pub(crate) uri: String,
    pub(crate) name: Option<String>,
}

/// Who answers the server's elicitations.
#[derive(Clone)]
pub(crate) enum Answerer {
    /// The program's hook ([`ClientBuilder::on_elicitation`](super::ClientBuilder::on_elicitation)).
    Hook(ElicitationHook),
    /// The agent whose tool call asks
    /// ([`ClientBuilder::elicit_through_agent`](super::ClientBuilder::elicit_through_agent)).
    Agent,
}

/// Everything the client answers the server with.
#[derive(Clone, Default)]
pub(crate) struct Answers {
    pub(crate) elicitation: Option<Answerer>,
    pub(crate) roots: Option<Vec<Root>>,
    pub(crate) sampling: Option<super::sampling::Sampler>,
}

impl fmt::Debug for Answers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answers")
            .field("elicitation", &self.elicitation.is_some())
            .field("roots", &self.roots)
            .field("sampling", &self.sampling)
            .finish()
    }
}

impl Answers {
    /// What the client declares: elicitation (form and URL) when a hook answers it, roots
    /// when a list was given, sampling when a hook or a provider answers it.
    pub(crate) fn capabilities(&self) -> Value {
        let mut caps = Map::new();
        if self.elicitation.is_some() {
            caps.insert("elicitation".into(), json!({"form": {}, "url": {}}));
        }
        if self.roots.is_some() {
            caps.insert("roots".into(), json!({"listChanged": false}));
        }
        if self.sampling.is_some() {
            caps.insert("sampling".into(), json!({"tools": {}}));
        }
        Value::Object(caps)
    }

    /// Whether `method` is a question this client answers.
    pub(crate) fn answers(&self, method: &str) -> bool {
        match method {
            "elicitation/create" => self.elicitation.is_some(),
            "roots/list" => self.roots.is_some(),
            "sampling/createMessage" => self.sampling.is_some(),
            _ => false,
        }
    }

    /// Answers one question of the server `server` (a request of its own, or an input
    /// request of an `input_required` result).
    ///
    /// Blocks while the hook does (a user answering).
    ///
    /// # Errors
    /// `-32601` for a question the client does not answer; `-32602` for a malformed one.
    pub(crate) fn answer(
        &self,
        server: &str,
        method: &str,
        params: Option<&Value>,
        cancel: &CancelToken,
    ) -> Result<Value, RpcError> {
        let not_supported = || {
            RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("{method} is not supported by the client"),
            )
        };
        match method {
            "elicitation/create" => {
                let answerer = self.elicitation.as_ref().ok_or_else(not_supported)?;
                let question = elicitation(server, params)?;
                let hook = match answerer {
                    Answerer::Hook(hook) => Some(hook),
                    Answerer::Agent => None,
                };
                // Inside a run's tool call, the question is an event of the run (and the
                // agent answers it, unless the hook does), also when it is given up at
                // once: every question that reached the run is seen. Elsewhere only a
                // hook can answer.
                let answer = if let Some(asker) = crate::tool::ask::current() {
                    asker.ask(question, hook, cancel)
                } else if cancel.is_cancelled() {
                    ElicitationAnswer::Cancel
                } else if let Some(hook) = hook {
                    let mode = question.mode.clone();
                    hook(&question, cancel)
                        .fitted(&mode)
                        .unwrap_or(ElicitationAnswer::Cancel)
                } else {
                    ElicitationAnswer::Cancel
                };
                Ok(answer.to_json())
            }
            "roots/list" => {
                let roots = self.roots.as_ref().ok_or_else(not_supported)?;
                let roots: Vec<Value> = roots
                    .iter()
                    .map(|r| match &r.name {
                        Some(name) => json!({"uri": r.uri, "name": name}),
                        None => json!({"uri": r.uri}),
                    })
                    .collect();
                Ok(json!({"roots": roots}))
            }
            "sampling/createMessage" => self
                .sampling
                .as_ref()
                .ok_or_else(not_supported)?
                .answer(server, params, cancel),
            _ => Err(not_supported()),
        }
    }
}

/// Reads an `elicitation/create`.
fn elicitation(server: &str, params: Option<&Value>) -> Result<Elicitation, RpcError> {
    let bad =
        |why: &str| RpcError::new(codes::INVALID_PARAMS, format!("elicitation/create: {why}"));
    let params = params.ok_or_else(|| bad("no params"))?;
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no message"))?
        .to_owned();
    let mode = match params.get("mode").and_then(Value::as_str) {
        Some("url") => ElicitationMode::Url {
            url: params
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a url-mode question without its url"))?
                .to_owned(),
            id: params
                .get("elicitationId")
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        None | Some("form") => {
            let schema = params
                .get("requestedSchema")
                .cloned()
                .ok_or_else(|| bad("a form without its requestedSchema"))?;
            crate::elicit::check_form(&schema)
                .map_err(|why| bad(&format!("the requestedSchema is not a form: {why}")))?;
            ElicitationMode::Form { schema }
        }
        Some(other) => return Err(bad(&format!("the mode {other:?} is not known"))),
    };
    Ok(Elicitation {
        server: server.to_owned(),
        message,
        mode,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::elicit::tests::form;

    #[test]
    fn an_answer_that_does_not_fit_is_sent_as_cancel() {
        let answers = Answers {
            elicitation: Some(Answerer::Hook(Arc::new(
                |q: &Elicitation, _: &CancelToken| {
                    assert_eq!(q.server, "s");
                    ElicitationAnswer::Accept(json!({"age": "old"}))
                },
            ))),
            roots: None,
            sampling: None,
        };
        let params = json!({"message": "How old?", "requestedSchema": form()});
        let got = answers
            .answer(
                "s",
                "elicitation/create",
                Some(&params),
                &CancelToken::new(),
            )
            .unwrap();
        assert_eq!(got, json!({"action": "cancel"}));
        let url = json!({"mode": "url", "message": "Sign in", "url": "https://x/y", "elicitationId": "e1"});
        let answers = Answers {
            elicitation: Some(Answerer::Hook(Arc::new(
                |q: &Elicitation, _: &CancelToken| {
                    assert!(
                        matches!(&q.mode, ElicitationMode::Url { url, id: Some(id) } if url == "https://x/y" && id == "e1")
                    );
                    ElicitationAnswer::Accept(Value::Null)
                },
            ))),
            roots: None,
            sampling: None,
        };
        assert_eq!(
            answers
                .answer("s", "elicitation/create", Some(&url), &CancelToken::new())
                .unwrap(),
            json!({"action": "accept"})
        );
        assert_eq!(
            answers.capabilities(),
            json!({"elicitation": {"form": {}, "url": {}}})
        );
        assert_eq!(
            Answers::default()
                .answer("s", "sampling/createMessage", None, &CancelToken::new())
                .unwrap_err()
                .code,
            codes::METHOD_NOT_FOUND
        );
    }
}
