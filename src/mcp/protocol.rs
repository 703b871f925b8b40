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
use crate::content::{Audio, Blob, Document, Image, Part};

/// The session-era revisions this client speaks (an `initialize` handshake), the newest
/// first: it asks for the first one and accepts any of them in the server's answer.
pub(crate) const LEGACY_VERSIONS: [&str; 4] =
    ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The stateless revisions this client speaks (the version in every request's `_meta`), the
/// newest first.
pub(crate) const MODERN_VERSIONS: [&str; 1] = ["2026-07-28"];

/// The `_meta` keys of a stateless request.
pub(crate) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub(crate) const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The error codes of the stateless revision that mark a server of that era (its errors
/// say so, where any other error of a probe marks a session-era server).
pub(crate) mod codes {
    /// The HTTP headers do not match the body.
    pub(crate) const HEADER_MISMATCH: i64 = -32020;
    /// A capability the request needs was not declared.
    pub(crate) const MISSING_CAPABILITY: i64 = -32021;
    /// The version asked for is not one the server speaks; `data.supported` lists them.
    pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;
    /// The session-era code a 2025 server used for the same (`-32602` with `supported`).
    pub(crate) const INVALID_PARAMS: i64 = -32602;
}

/// The client's name and version, as MCP's `Implementation`.
pub(crate) fn client_info() -> Value {
    json!({"name": "pagent", "version": env!("CARGO_PKG_VERSION")})
}

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
pub(crate) fn initialize_params(version: &str, capabilities: &Value) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "clientInfo": client_info(),
    })
}

/// Which era of the protocol a server speaks, as [`ServerInfo::era`] tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Era {
    /// Revision 2026-07-28 and later: stateless. No handshake: the version, the client's
    /// identity and its capabilities go in every request's `_meta`; the server asks its
    /// questions in its results (`input_required`), and change notifications come on a
    /// `subscriptions/listen` stream.
    Stateless,
    /// Revisions up to 2025-11-25: an `initialize` handshake opens a session (over HTTP an
    /// `Mcp-Session-Id`), and the server sends its own requests on the connection.
    Session,
}

/// The protocol as agreed with one server: its era and revision, and what the client
/// declares of itself in every request (stateless) or in `initialize` (session).
#[derive(Clone, Debug)]
pub(crate) struct Agreed {
    pub(crate) era: Era,
    pub(crate) version: String,
    pub(crate) capabilities: Value,
}

impl Agreed {
    /// `params` as sent to the server: for the stateless era with the version, the client's
    /// identity and capabilities in `_meta`; with `progressToken` when `progress` is set;
    /// and with the trace context where the `tracing` feature puts it. Every request goes
    /// through here, so this is the one place `_meta` is written.
    pub(crate) fn stamp(&self, params: Option<Value>, progress: Option<u64>) -> Option<Value> {
        let params = crate::trace::inject_current(params);
        let stateless = self.era == Era::Stateless;
        if !stateless && progress.is_none() {
            return params;
        }
        let mut map = match params {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(meta) = meta {
            if let Some(token) = progress {
                meta.insert("progressToken".into(), token.into());
            }
            if stateless {
                meta.insert(META_VERSION.into(), self.version.clone().into());
                meta.insert(META_CLIENT_INFO.into(), client_info());
                meta.insert(META_CAPABILITIES.into(), self.capabilities.clone());
            }
        }
        Some(Value::Object(map))
    }
}

/// What a `server/discover` answer says: the revisions the server speaks, and about itself.
pub(crate) struct Discovered {
    pub(crate) supported: Vec<String>,
    pub(crate) info: ServerInfo,
}

/// Reads an answer to `server/discover`; `None` when it is not one (a session-era server
/// that answers any request with an empty result).
pub(crate) fn discovered(result: &Value) -> Option<Discovered> {
    let supported: Vec<String> = result
        .get("supportedVersions")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let identity = result
        .get("_meta")
        .and_then(|m| m.get(META_SERVER_INFO))
        .or_else(|| result.get("serverInfo"));
    let text = |key: &str| {
        identity
            .and_then(|i| i.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(Discovered {
        info: ServerInfo {
            name: text("name"),
            version: text("version"),
            protocol_version: String::new(),
            era: Era::Stateless,
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        supported,
    })
}

/// The revisions an error says the server speaks (`data.supported` of
/// `UnsupportedProtocolVersionError`), if it is one.
pub(crate) fn supported_versions(code: i64, data: Option<&Value>) -> Option<Vec<String>> {
    if code != codes::UNSUPPORTED_VERSION && code != codes::INVALID_PARAMS {
        return None;
    }
    let list = data?.get("supported")?.as_array()?;
    Some(
        list.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

/// Whether the result is an interim one that asks for input (`resultType: input_required`).
/// A result without `resultType` is complete (a session-era server's).
///
/// # Errors
/// [`McpError::Protocol`] for a `resultType` this client does not know.
pub(crate) fn needs_input(method: &str, result: &Value) -> Result<bool, McpError> {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(false),
        Some("input_required") => Ok(true),
        Some(other) => Err(McpError::Protocol(format!(
            "the server answered {method} with the result type {other:?}, which this client does not know"
        ))),
    }
}

/// What the server said about itself in its answer to `initialize`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The server's name (`serverInfo.name`).
    pub name: String,
    /// The server's version (`serverInfo.version`).
    pub version: String,
    /// The protocol revision both sides agreed on, such as `2026-07-28` or `2025-11-25`.
    pub protocol_version: String,
    /// The era of that revision: stateless, or with a session.
    pub era: Era,
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
    if !LEGACY_VERSIONS.contains(&result.protocol_version.as_str()) {
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
        era: Era::Session,
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
    /// The JSON Schema of its structured result, if it declares one. A result's
    /// `structuredContent` is checked against it ([`CallResult::structured`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Icons for a user interface, as the server lists them (2025-11-25 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
    /// Hints about the tool's behaviour (`readOnlyHint`, `destructiveHint`, ...), as the
    /// server sent them. Hints only: a server is not trusted by them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// The tool's `_meta`, as the server sent it.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// An icon of a tool, resource, prompt or server (`Icon`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Icon {
    /// Where the image is: an `https:` URL or a `data:` URI.
    pub src: String,
    /// Its MIME type, if the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its sizes (`48x48`, `any`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    /// The theme it is drawn for (`light`, `dark`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
}

impl ToolInfo {
    /// The arguments the tool mirrors into HTTP headers (`x-mcp-header` on a property of its
    /// input schema, 2026-07-28): each header's name part and the property's name.
    ///
    /// # Errors
    /// The reason the annotations are invalid (an empty or non-token name, a name given
    /// twice, one on a property that is not a string, integer or boolean): such a tool must
    /// not be called, so the client leaves it out of the list.
    pub(crate) fn header_params(&self) -> Result<Vec<(String, String)>, String> {
        let mut found: Vec<(String, String)> = Vec::new();
        let Some(properties) = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
        else {
            return Ok(found);
        };
        for (property, schema) in properties {
            let Some(header) = schema.get("x-mcp-header") else {
                continue;
            };
            let Some(header) = header.as_str() else {
                return Err(format!("x-mcp-header of {property:?} is not a string"));
            };
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if header.is_empty() || !header.bytes().all(token) {
                return Err(format!(
                    "x-mcp-header {header:?} of {property:?} is not a header name"
                ));
            }
            let primitive = match schema.get("type") {
                Some(Value::String(t)) => matches!(t.as_str(), "string" | "integer" | "boolean"),
                _ => false,
            };
            if !primitive {
                return Err(format!(
                    "x-mcp-header {header:?} is on {property:?}, which is not a string, integer or boolean"
                ));
            }
            if found.iter().any(|(h, _)| h.eq_ignore_ascii_case(header)) {
                return Err(format!("x-mcp-header {header:?} is given twice"));
            }
            found.push((header.to_owned(), property.clone()));
        }
        Ok(found)
    }
}

fn empty_object_schema() -> Value {
    json!({"type": "object"})
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

/// How the model reads one piece of content (see [`Content`]).
pub(crate) fn describe(content: &Content) -> String {
    content.describe()
}

impl Content {
    pub(crate) fn from_value(value: Value) -> Content {
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

    /// The piece as a part of the output, for images, audio and embedded binary resources
    /// whose bytes decode: the bytes move out of `raw` (the piece in the result as sent).
    fn to_part(&self, raw: Option<&mut Value>) -> Option<Part> {
        let take = |raw: Option<&mut Value>, path: &[&str]| -> Option<Blob> {
            let (last, within) = path.split_last()?;
            let mut at = raw?;
            for key in within {
                at = at.get_mut(*key)?;
            }
            let map = at.as_object_mut()?;
            let blob = Blob::from_base64(map.get(*last)?.as_str()?).ok()?;
            map.remove(*last);
            Some(blob)
        };
        match self {
            Content::Image { mime_type, .. } => {
                Some(Image::new(mime_type.clone(), take(raw, &["data"])?).into())
            }
            Content::Audio { mime_type, .. } => {
                Some(Audio::new(mime_type.clone(), take(raw, &["data"])?).into())
            }
            Content::Resource {
                uri,
                mime_type,
                text: None,
            } => {
                let data = take(raw, &["resource", "blob"])?;
                let mime_type = mime_type.as_deref().unwrap_or("application/octet-stream");
                Some(if mime_type.starts_with("image/") {
                    Image::new(mime_type, data).into()
                } else {
                    let name = uri.rsplit('/').find(|s| !s.is_empty()).unwrap_or(uri);
                    Document::new(mime_type, data).with_name(name).into()
                })
            }
            _ => None,
        }
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

    /// The result as a tool's output the model sees whole: text as text, images and audio
    /// as [`Image`] and [`Audio`] parts, an embedded text resource as its text, an embedded
    /// binary resource as an image (an `image/*` one) or a [`Document`] named by its URI, a
    /// link as the note `[resource link: name <uri>]`, an unknown kind as its JSON. Data that
    /// is not valid base64 stays a note (`[image: image/png, 4 bytes base64]`). Details: the
    /// result as the server sent it, without the bytes that became parts (their `data` or
    /// `blob` left out, so the bytes are held and sent once); with no content, the
    /// structured result as JSON text.
    pub fn to_output(&self) -> ToolOutput {
        let mut details = self.raw.clone();
        if self.content.is_empty() {
            return ToolOutput::text(self.text()).with_details(details);
        }
        let items = details.get_mut("content").and_then(Value::as_array_mut);
        let mut items: Vec<Option<&mut Value>> = match items {
            Some(items) => items.iter_mut().map(Some).collect(),
            None => Vec::new(),
        };
        let mut parts: Vec<Part> = Vec::with_capacity(self.content.len());
        for (i, piece) in self.content.iter().enumerate() {
            let raw = items.get_mut(i).and_then(Option::take);
            let part = piece
                .to_part(raw)
                .unwrap_or_else(|| Part::text(piece.describe()));
            // Pieces of text run on a line each, as [`CallResult::text`] joins them.
            match (parts.last_mut(), part) {
                (Some(Part::Text { text }), Part::Text { text: more }) => {
                    text.push('\n');
                    text.push_str(&more);
                }
                (_, part) => parts.push(part),
            }
        }
        ToolOutput::from_parts(parts).with_details(details)
    }
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
        let output = result.to_output();
        assert_eq!(
            output.content,
            vec![
                Part::text("hello"),
                Image::new("image/png", vec![0u8; 3]).into(),
                Part::text("[resource link: a <file:///a>]\nbee\n{\"type\":\"new-kind\",\"x\":1}"),
            ]
        );
        // The bytes that became a part are not kept twice.
        let mut without = raw.clone();
        without["content"][1]
            .as_object_mut()
            .unwrap()
            .remove("data");
        assert_eq!(output.details, Some(without));
        let binary = CallResult::from_value(json!({"content": [
            {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
            {"type": "resource", "resource": {"uri": "file:///r/report.pdf", "mimeType": "application/pdf", "blob": "JVBERi0="}},
            {"type": "resource", "resource": {"uri": "file:///r/shot", "mimeType": "image/png", "blob": "iVBORw0KGgo="}},
            {"type": "image", "mimeType": "image/png", "data": "not base64!"},
        ]}))
        .unwrap();
        assert_eq!(
            binary.to_output().content,
            vec![
                Audio::new("audio/wav", b"RIFF".to_vec()).into(),
                Document::pdf(b"%PDF-".to_vec())
                    .with_name("report.pdf")
                    .into(),
                Image::new("image/png", b"\x89PNG\r\n\x1a\n".to_vec()).into(),
                Part::text("[image: image/png, 11 bytes base64]"),
            ]
        );
        let structured =
            CallResult::from_value(json!({"content": [], "structuredContent": {"t": 1}})).unwrap();
        assert_eq!(structured.text(), r#"{"t":1}"#);
    }

    #[test]
    fn meta_is_stamped_on_every_stateless_request_and_progress_on_either_era() {
        let stateless = Agreed {
            era: Era::Stateless,
            version: "2026-07-28".into(),
            capabilities: json!({"elicitation": {}}),
        };
        let params = stateless
            .stamp(Some(json!({"name": "x", "_meta": {"k": 1}})), Some(7))
            .unwrap();
        assert_eq!(
            params,
            json!({"name": "x", "_meta": {
                "k": 1,
                "progressToken": 7,
                META_VERSION: "2026-07-28",
                META_CLIENT_INFO: client_info(),
                META_CAPABILITIES: {"elicitation": {}},
            }})
        );
        let session = Agreed {
            era: Era::Session,
            version: "2025-11-25".into(),
            capabilities: json!({}),
        };
        assert_eq!(session.stamp(None, None), None);
        assert_eq!(
            session.stamp(None, Some(1)),
            Some(json!({"_meta": {"progressToken": 1}}))
        );
    }

    #[test]
    fn result_types_and_discover_answers_are_read() {
        assert!(!needs_input("tools/call", &json!({"content": []})).unwrap());
        assert!(needs_input("tools/call", &json!({"resultType": "input_required"})).unwrap());
        assert!(needs_input("tools/call", &json!({"resultType": "later"})).is_err());
        let found = discovered(&json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "_meta": {META_SERVER_INFO: {"name": "s", "version": "2"}},
        }))
        .unwrap();
        assert_eq!(found.supported, ["2026-07-28"]);
        assert_eq!(
            (found.info.name.as_str(), found.info.version.as_str()),
            ("s", "2")
        );
        assert!(discovered(&json!({})).is_none());
        assert_eq!(
            supported_versions(-32022, Some(&json!({"supported": ["2026-07-28"]}))),
            Some(vec!["2026-07-28".to_owned()])
        );
        assert_eq!(supported_versions(-32601, None), None);
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
