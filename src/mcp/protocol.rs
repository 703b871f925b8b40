//! The part of the Model Context Protocol this client speaks, as our own serde types:
//! `initialize`, `tools/list`, `tools/call` and its content, progress. JSON-RPC itself
//! (framing, classification, ids) is the crate's one peer's ([`crate::jsonrpc`]).
//!
//! Our own types rather than a schema crate. `rust-mcp-schema` 2.0.0 would fit (serde and
//! serde_json only, no async runtime), but it is 12,000 generated lines for one revision
//! (11 s to build on a busy 2-core machine) where the client reads eight shapes; it types one
//! revision per feature, where the client accepts three; and its types would be foreign types
//! in our public API. Unknown fields are ignored, and kept where a program may want them
//! (`raw`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::McpError;
use crate::ToolOutput;

/// The protocol revisions this client speaks, the newest first: it asks for the first one and
/// accepts any of them in the server's answer.
pub(crate) const PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The start of a bad message, for an error text.
pub(crate) fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(120)]);
    let more = if bytes.len() > 120 { "..." } else { "" };
    format!("{:?}{more}", text.trim_end())
}

/// The length of `value` as compact JSON, without writing it anywhere.
pub(crate) fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // OK because a `Value` always serializes, and counting never fails.
    serde_json::to_writer(&mut count, value).expect("a JSON value serializes");
    count.0
}

/// A notification, serialized.
pub(crate) fn notification(method: &str, params: Option<Value>) -> Vec<u8> {
    let mut msg = json!({"jsonrpc": "2.0", "method": method});
    if let Some(params) = params {
        msg["params"] = params;
    }
    serde_json::to_vec(&msg).expect("a JSON value serializes")
}

/// The `initialize` request's parameters.
pub(crate) fn initialize_params(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "pagent", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// What the server said about itself in its answer to `initialize`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The server's name (`serverInfo.name`).
    pub name: String,
    /// The server's version (`serverInfo.version`).
    pub version: String,
    /// The protocol revision both sides agreed on, such as `2025-06-18`.
    pub protocol_version: String,
    /// The server's capabilities, as it sent them.
    pub capabilities: Value,
    /// The server's instructions for the model, if it gave any.
    pub instructions: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: String,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    server_info: Option<Implementation>,
    #[serde(default)]
    instructions: Option<String>,
}

#[derive(Deserialize)]
struct Implementation {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

/// Reads the answer to `initialize`.
///
/// # Errors
/// [`McpError::Protocol`] for a malformed answer, [`McpError::UnsupportedVersion`] for a
/// protocol revision this client does not speak.
pub(crate) fn server_info(result: Value) -> Result<ServerInfo, McpError> {
    let result: InitializeResult = serde_json::from_value(result).map_err(|e| {
        McpError::Protocol(format!(
            "the server's answer to initialize is malformed ({e})"
        ))
    })?;
    if !PROTOCOL_VERSIONS.contains(&result.protocol_version.as_str()) {
        return Err(McpError::UnsupportedVersion(result.protocol_version));
    }
    let (name, version) = result
        .server_info
        .map(|i| (i.name, i.version))
        .unwrap_or_default();
    Ok(ServerInfo {
        name,
        version,
        protocol_version: result.protocol_version,
        capabilities: result.capabilities,
        instructions: result.instructions,
    })
}

/// A tool as the server lists it (`tools/list`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolInfo {
    /// The tool's name on the server (without any prefix).
    pub name: String,
    /// A human-readable title, if the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does, written for the model.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments, as the server sent it.
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    /// The JSON Schema of its structured result, if it declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

fn empty_object_schema() -> Value {
    json!({"type": "object"})
}

/// One page of `tools/list`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolsPage {
    pub(crate) tools: Vec<ToolInfo>,
    #[serde(default)]
    pub(crate) next_cursor: Option<String>,
}

/// A progress notification of a running request (`notifications/progress`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Progress {
    /// How far along the request is; grows with each notification.
    pub progress: f64,
    /// The total, when the server knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A message for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Progress {
    /// The progress as a tool update: text such as `3/10: step 3` and the progress as details.
    pub fn to_output(&self) -> ToolOutput {
        let mut text = match self.total {
            Some(total) => format!("{}/{}", self.progress, total),
            None => self.progress.to_string(),
        };
        if let Some(message) = &self.message {
            text.push_str(": ");
            text.push_str(message);
        }
        // OK because the struct has only numbers and strings.
        let details = serde_json::to_value(self).expect("progress serializes");
        ToolOutput::text(text).with_details(details)
    }
}

/// One piece of a tool's result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Content {
    /// Text.
    Text(String),
    /// An image, base64-encoded.
    Image {
        /// The image's MIME type.
        mime_type: String,
        /// The image, base64.
        data: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// The audio's MIME type.
        mime_type: String,
        /// The audio, base64.
        data: String,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
        /// Its MIME type, if given.
        mime_type: Option<String>,
    },
    /// A resource embedded in the result: its text, or base64 `blob` for binary data.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its MIME type, if given.
        mime_type: Option<String>,
        /// Its text, for a text resource.
        text: Option<String>,
    },
    /// A kind of content this client does not know, as the server sent it.
    Other(Value),
}

impl Content {
    fn from_value(value: Value) -> Content {
        let s = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        let known = match kind {
            "text" => s(&value, "text").map(Content::Text),
            "image" | "audio" => match (s(&value, "mimeType"), s(&value, "data")) {
                (Some(mime_type), Some(data)) if kind == "image" => {
                    Some(Content::Image { mime_type, data })
                }
                (Some(mime_type), Some(data)) => Some(Content::Audio { mime_type, data }),
                _ => None,
            },
            "resource_link" => s(&value, "uri").map(|uri| Content::ResourceLink {
                name: s(&value, "name").unwrap_or_else(|| uri.clone()),
                mime_type: s(&value, "mimeType"),
                uri,
            }),
            "resource" => value.get("resource").and_then(|r| {
                s(r, "uri").map(|uri| Content::Resource {
                    uri,
                    mime_type: s(r, "mimeType"),
                    text: s(r, "text"),
                })
            }),
            _ => None,
        };
        known.unwrap_or(Content::Other(value))
    }

    /// How the model sees it: the text itself, or a short note for what is not text.
    fn describe(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Image { mime_type, data } => {
                format!("[image: {mime_type}, {} bytes base64]", data.len())
            }
            Content::Audio { mime_type, data } => {
                format!("[audio: {mime_type}, {} bytes base64]", data.len())
            }
            Content::ResourceLink { uri, name, .. } => format!("[resource link: {name} <{uri}>]"),
            Content::Resource {
                text: Some(text), ..
            } => text.clone(),
            Content::Resource { uri, mime_type, .. } => format!(
                "[resource: {uri}, {}]",
                mime_type.as_deref().unwrap_or("binary")
            ),
            Content::Other(value) => value.to_string(),
        }
    }
}

/// The result of `tools/call`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CallResult {
    /// The pieces of the result, in order.
    pub content: Vec<Content>,
    /// The structured result, if the tool gave one.
    pub structured: Option<Value>,
    /// True when the tool reports that it failed (`isError`): the text says why.
    pub is_error: bool,
    /// The result as the server sent it.
    pub raw: Value,
}

impl CallResult {
    pub(crate) fn from_value(raw: Value) -> Result<CallResult, String> {
        let Value::Object(map) = &raw else {
            return Err(format!("the result of tools/call is not an object: {raw}"));
        };
        let content = match map.get("content") {
            Some(Value::Array(items)) => items.iter().cloned().map(Content::from_value).collect(),
            None | Some(Value::Null) => Vec::new(),
            Some(other) => {
                return Err(format!(
                    "the content of a tools/call result is not a list: {other}"
                ));
            }
        };
        Ok(CallResult {
            content,
            structured: map.get("structuredContent").cloned(),
            is_error: map.get("isError").and_then(Value::as_bool).unwrap_or(false),
            raw,
        })
    }

    /// The text the model sees: each piece of content on its own line (a note for images,
    /// audio, links and binary resources); the structured result as JSON when there is no
    /// content.
    pub fn text(&self) -> String {
        if self.content.is_empty() {
            return self
                .structured
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default();
        }
        let parts: Vec<String> = self.content.iter().map(Content::describe).collect();
        parts.join("\n")
    }

    /// The result as a tool's output: [`CallResult::text`] for the model, and the result as
    /// the server sent it as details (images and structured content for programs).
    pub fn to_output(&self) -> ToolOutput {
        ToolOutput::text(self.text()).with_details(self.raw.clone())
    }
}

/// `params` with `_meta.progressToken` set to `token`.
pub(crate) fn with_progress_token(params: Option<Value>, token: u64) -> Value {
    let mut map = match params {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let meta = map
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert("progressToken".into(), token.into());
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_maps_to_text_and_details() {
        let raw = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "bee"}},
            {"type": "new-kind", "x": 1}
        ], "isError": true});
        let result = CallResult::from_value(raw.clone()).unwrap();
        assert!(result.is_error);
        assert_eq!(
            result.text(),
            "hello\n[image: image/png, 4 bytes base64]\n[resource link: a <file:///a>]\nbee\n{\"type\":\"new-kind\",\"x\":1}"
        );
        assert_eq!(result.to_output().details, Some(raw));
        let structured =
            CallResult::from_value(json!({"content": [], "structuredContent": {"t": 1}})).unwrap();
        assert_eq!(structured.text(), r#"{"t":1}"#);
    }

    #[test]
    fn a_progress_token_joins_the_params() {
        let params = with_progress_token(Some(json!({"name": "x", "_meta": {"k": 1}})), 7);
        assert_eq!(
            params,
            json!({"name": "x", "_meta": {"k": 1, "progressToken": 7}})
        );
        assert_eq!(
            with_progress_token(None, 1),
            json!({"_meta": {"progressToken": 1}})
        );
    }

    #[test]
    fn an_unknown_protocol_version_is_refused() {
        let ok = server_info(
            json!({"protocolVersion": "2025-03-26", "serverInfo": {"name": "s", "version": "1"}}),
        )
        .unwrap();
        assert_eq!(
            (ok.name.as_str(), ok.protocol_version.as_str()),
            ("s", "2025-03-26")
        );
        assert_eq!(
            server_info(json!({"protocolVersion": "1999-01-01"})).unwrap_err(),
            McpError::UnsupportedVersion("1999-01-01".into())
        );
    }
}
