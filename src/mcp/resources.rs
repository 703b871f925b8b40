//! Resources and prompts of a server: listed (every page), read, fetched, and made into
//! messages for an agent.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::protocol::Icon;
use super::{Client, McpError};
use crate::cancel::CancelToken;
use crate::message::{AssistantMessage, ContentBlock, Message, StopReason, UserMessage};

/// A resource as the server lists it (`resources/list`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceInfo {
    /// Its URI, which [`Client::read_resource`] reads.
    pub uri: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// A title for people, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its MIME type, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its size in bytes, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Its icons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
    /// Its annotations (`audience`, `priority`, `lastModified`), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// A template of resource URIs (`resources/templates/list`), such as `file:///{path}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceTemplate {
    /// The URI template (RFC 6570).
    pub uri_template: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// A title for people, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The MIME type of what it makes, if the same for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its icons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
}

/// What reading a resource gives: one of its parts, text or binary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ResourceContents {
    /// The URI of this part.
    pub uri: String,
    /// Its MIME type, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its text, for a text resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its bytes in base64, for a binary one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ResourceContents {
    /// The part as the model reads it: its text under a line naming the URI, or a note for
    /// binary data (`[resource: uri, image/png, 1234 bytes base64]`).
    pub fn to_text(&self) -> String {
        match (&self.text, &self.blob) {
            (Some(text), _) => format!("[resource: {}]\n{text}", self.uri),
            (None, blob) => format!(
                "[resource: {}, {}, {} bytes base64]",
                self.uri,
                self.mime_type.as_deref().unwrap_or("binary"),
                blob.as_ref().map_or(0, String::len)
            ),
        }
    }
}

/// A prompt as the server lists it (`prompts/list`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PromptInfo {
    /// Its name, which [`Client::get_prompt`] takes.
    pub name: String,
    /// A title for people, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<PromptArgument>,
    /// Its icons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
}

/// An argument of a prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// A title for people, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it must be given.
    #[serde(default)]
    pub required: bool,
}

/// A prompt as the server made it from its arguments (`prompts/get`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PromptResult {
    /// What the prompt is, if the server says.
    pub description: Option<String>,
    /// Its messages, in order.
    pub messages: Vec<PromptMessage>,
}

/// One message of a prompt.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PromptMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// Its content, one piece (text, an image, a resource...).
    pub content: super::Content,
}

impl PromptResult {
    /// The prompt as an agent's messages, to put into its transcript
    /// (`agent.replace_messages(..)`, or a prompt of its own): each `user` message a
    /// [`UserMessage`], each `assistant` one an assistant message, with the text the model
    /// reads of its content (images and binary resources as a short note).
    pub fn to_messages(&self) -> Vec<Message> {
        self.messages
            .iter()
            .map(|m| {
                let text = super::protocol::describe(&m.content);
                if m.role == "assistant" {
                    Message::Assistant(AssistantMessage::new(
                        vec![ContentBlock::text(text)],
                        StopReason::Stop,
                    ))
                } else {
                    Message::User(UserMessage::new(text))
                }
            })
            .collect()
    }
}

impl Client {
    /// Lists every resource of the server, following `nextCursor` through every page.
    ///
    /// Blocks as [`Client::list_tools`] does, within the same limits.
    ///
    /// # Errors
    /// As [`Client::list_tools`].
    pub fn list_resources(&self) -> Result<Vec<ResourceInfo>, McpError> {
        self.list_typed("resources/list", "resources")
    }

    /// Lists every resource template of the server, following `nextCursor`.
    ///
    /// Blocks as [`Client::list_tools`] does, within the same limits.
    ///
    /// # Errors
    /// As [`Client::list_tools`].
    pub fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, McpError> {
        self.list_typed("resources/templates/list", "resourceTemplates")
    }

    /// Lists every prompt of the server, following `nextCursor`.
    ///
    /// Blocks as [`Client::list_tools`] does, within the same limits.
    ///
    /// # Errors
    /// As [`Client::list_tools`].
    pub fn list_prompts(&self) -> Result<Vec<PromptInfo>, McpError> {
        self.list_typed("prompts/list", "prompts")
    }

    fn list_typed<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        key: &str,
    ) -> Result<Vec<T>, McpError> {
        self.list(method, key, &CancelToken::new())?
            .into_iter()
            .map(|item| {
                serde_json::from_value(item)
                    .map_err(|e| McpError::Protocol(format!("a malformed item in {method} ({e})")))
            })
            .collect()
    }

    /// Reads the resource `uri`: its parts, text or binary. A server of the stateless era
    /// may ask questions first (`input_required`): they are answered as a tool call's are.
    ///
    /// Blocks until the server answered, `cancel` is cancelled, or
    /// [`ClientBuilder::call_timeout`](super::ClientBuilder::call_timeout) passes.
    ///
    /// # Errors
    /// Any error of the request; [`McpError::Protocol`] for a malformed answer.
    pub fn read_resource(
        &self,
        uri: &str,
        cancel: &CancelToken,
    ) -> Result<Vec<ResourceContents>, McpError> {
        let result = self.request("resources/read", Some(json!({"uri": uri})), cancel, None)?;
        serde_json::from_value(result.get("contents").cloned().unwrap_or(Value::Null))
            .map_err(|e| McpError::Protocol(format!("a malformed answer to resources/read ({e})")))
    }

    /// The resource `uri` as a user message for an agent: each part's text under a line
    /// naming its URI (binary parts as a short note), so a program can hand the model a
    /// document before it asks (`agent.prompt(..)` takes a message).
    ///
    /// Blocks as [`Client::read_resource`] does.
    ///
    /// # Errors
    /// As [`Client::read_resource`].
    pub fn resource_message(&self, uri: &str, cancel: &CancelToken) -> Result<Message, McpError> {
        let parts = self.read_resource(uri, cancel)?;
        let text: Vec<String> = parts.iter().map(ResourceContents::to_text).collect();
        Ok(Message::User(UserMessage::new(text.join("\n\n"))))
    }

    /// Gets the prompt `name` made from `arguments` (names to values, as the prompt's
    /// [`PromptArgument`]s say). A server of the stateless era may ask questions first.
    ///
    /// Blocks until the server answered, `cancel` is cancelled, or the call timeout passes.
    ///
    /// # Errors
    /// Any error of the request; [`McpError::Protocol`] for a malformed answer.
    pub fn get_prompt(
        &self,
        name: &str,
        arguments: &[(&str, &str)],
        cancel: &CancelToken,
    ) -> Result<PromptResult, McpError> {
        let arguments: Map<String, Value> = arguments
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
            .collect();
        let result = self.request(
            "prompts/get",
            Some(json!({"name": name, "arguments": arguments})),
            cancel,
            None,
        )?;
        let malformed =
            |why: &str| McpError::Protocol(format!("a malformed answer to prompts/get ({why})"));
        let messages = result
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("no messages"))?
            .iter()
            .map(|m| {
                Ok(PromptMessage {
                    role: m
                        .get("role")
                        .and_then(Value::as_str)
                        .ok_or_else(|| malformed("a message without a role"))?
                        .to_owned(),
                    content: super::Content::from_value(
                        m.get("content").cloned().unwrap_or(Value::Null),
                    ),
                })
            })
            .collect::<Result<Vec<_>, McpError>>()?;
        Ok(PromptResult {
            description: result
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            messages,
        })
    }
}
