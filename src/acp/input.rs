//! What a client sends that is more than an id: a prompt's content blocks and the MCP servers
//! of a session.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::codes;
use super::map::Refusal;
use crate::content::{Audio, Blob, Document, Image, Part};

/// An MCP server the client asks a session to connect, as `session/new` and `session/load`
/// list them.
#[derive(Clone, Debug, PartialEq)]
// Without the `mcp` feature the servers are only counted (see `connect_mcp_servers`).
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) enum McpServer {
    /// A program to start, speaking MCP on its stdio.
    Stdio {
        name: String,
        command: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A server over HTTP (`"type": "http"`) or server-sent events (`"type": "sse"`).
    Http {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
        sse: bool,
    },
}

#[derive(Deserialize)]
struct NameValue {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StdioShape {
    name: String,
    command: PathBuf,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<NameValue>,
}

#[derive(Deserialize)]
struct HttpShape {
    name: String,
    url: String,
    #[serde(default)]
    headers: Vec<NameValue>,
}

fn pairs(v: Vec<NameValue>) -> Vec<(String, String)> {
    v.into_iter().map(|p| (p.name, p.value)).collect()
}

impl McpServer {
    /// The name the client gave the server.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn name(&self) -> &str {
        match self {
            McpServer::Stdio { name, .. } | McpServer::Http { name, .. } => name,
        }
    }

    pub(crate) fn parse(v: &Value) -> Result<McpServer, String> {
        let kind = v.get("type").and_then(Value::as_str);
        let shape = |e: serde_json::Error| format!("an MCP server entry is malformed: {e}");
        match kind {
            Some(k @ ("http" | "sse")) => {
                let s = HttpShape::deserialize(v).map_err(shape)?;
                Ok(McpServer::Http {
                    name: s.name,
                    url: s.url,
                    headers: pairs(s.headers),
                    sse: k == "sse",
                })
            }
            None | Some("stdio") => {
                let s = StdioShape::deserialize(v).map_err(shape)?;
                Ok(McpServer::Stdio {
                    name: s.name,
                    command: s.command,
                    args: s.args,
                    env: pairs(s.env),
                })
            }
            Some(other) => Err(format!("MCP server type `{other}` is unknown")),
        }
    }
}

/// The parts of a prompt's content blocks, in order: `text` as it is, a `resource_link` as a
/// markdown link, an embedded text `resource` as its text under its URI (consecutive pieces
/// of text joined by a blank line into one text part, so a text prompt is one text part as
/// it always was); an `image` (inline, or by its `uri` when it has no data), `audio`, and an
/// embedded `blob` resource (an image, else a document named by its URI) as parts of their
/// own, their bytes decoded once.
pub(crate) fn prompt_parts(blocks: &Value) -> Result<Vec<Part>, Refusal> {
    let bad = |why: String| (codes::INVALID_PARAMS, why);
    let Some(blocks) = blocks.as_array() else {
        return Err(bad(
            "session/prompt needs `prompt`, a list of content blocks".into(),
        ));
    };
    let mut parts: Vec<Part> = Vec::new();
    for block in blocks {
        let field = |name: &str| block.get(name).and_then(Value::as_str);
        let malformed = || bad(format!("a prompt content block is malformed: {block}"));
        let piece = match field("type") {
            Some("text") => field("text").map(Part::text),
            Some("resource_link") => field("uri").map(|uri| {
                let name = field("name").unwrap_or(uri);
                Part::text(format!("[{name}]({uri})"))
            }),
            Some("resource") => {
                let r = block.get("resource");
                let get = |n: &str| r.and_then(|r| r.get(n)).and_then(Value::as_str);
                match (get("uri"), get("text"), get("blob")) {
                    (Some(uri), Some(t), _) => Some(Part::text(format!(
                        "<context uri=\"{uri}\">\n{t}\n</context>"
                    ))),
                    (Some(uri), None, Some(blob)) => {
                        Some(embedded(uri, get("mimeType"), decoded(blob)?)?)
                    }
                    _ => return Err(malformed()),
                }
            }
            Some("image") => match (field("data"), field("mimeType"), field("uri")) {
                (Some("") | None, _, Some(uri)) => Some(Image::url(uri).into()),
                (Some(data), Some(mime), _) if !data.is_empty() => {
                    Some(Image::new(mime, decoded(data)?).into())
                }
                _ => None,
            },
            Some("audio") => match (field("data"), field("mimeType")) {
                (Some(data), Some(mime)) => Some(Audio::new(mime, decoded(data)?).into()),
                _ => None,
            },
            _ => None,
        };
        let Some(piece) = piece else {
            return Err(malformed());
        };
        match (parts.last_mut(), piece) {
            (Some(Part::Text { text }), Part::Text { text: more }) => {
                text.push_str("\n\n");
                text.push_str(&more);
            }
            (_, piece) => parts.push(piece),
        }
    }
    if parts.is_empty() {
        return Err(bad("the prompt is empty".into()));
    }
    Ok(parts)
}

/// Base64 content bytes, or the refusal that says they are not.
fn decoded(data: &str) -> Result<Blob, Refusal> {
    Blob::from_base64(data)
        .map_err(|e| (codes::INVALID_PARAMS, format!("a prompt block's data: {e}")))
}

/// An embedded binary resource as a part: an image when its media type (or, without one, its
/// first bytes) says so, else a document named by the last segment of its URI.
fn embedded(uri: &str, mime: Option<&str>, data: Blob) -> Result<Part, Refusal> {
    let name = uri.rsplit('/').find(|s| !s.is_empty()).unwrap_or(uri);
    let document = |mime: &str, data: Blob| Part::from(Document::new(mime, data).with_name(name));
    match mime {
        Some(mime) if mime.starts_with("image/") => Ok(Image::new(mime, data).into()),
        Some(mime) => Ok(document(mime, data)),
        None => match Image::from_bytes(data.clone()) {
            Ok(image) => Ok(image.into()),
            Err(_) if data.starts_with(b"%PDF-") => Ok(document("application/pdf", data)),
            Err(_) if std::str::from_utf8(&data).is_ok() => Ok(document("text/plain", data)),
            Err(_) => Err((
                codes::INVALID_PARAMS,
                format!("the embedded resource {uri} needs a `mimeType`"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn prompt_blocks_become_parts_and_malformed_ones_are_refused() {
        let blocks = json!([
            {"type": "text", "text": "Look at"},
            {"type": "resource_link", "uri": "file:///a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///b.rs", "text": "fn b() {}"}},
        ]);
        assert_eq!(
            prompt_parts(&blocks),
            Ok(vec![Part::text(
                "Look at\n\n[a.rs](file:///a.rs)\n\n<context uri=\"file:///b.rs\">\nfn b() {}\n</context>"
            )])
        );
        let media = json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "image", "data": "", "mimeType": "image/png", "uri": "https://example.com/a.png"},
            {"type": "text", "text": "And these:"},
            {"type": "resource", "resource": {"uri": "file:///docs/r.pdf", "blob": "JVBERi0=", "mimeType": "application/pdf"}},
            {"type": "resource", "resource": {"uri": "file:///shot", "blob": "iVBORw0KGgo="}},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        ]);
        let png = b"\x89PNG\r\n\x1a\n".to_vec();
        assert_eq!(
            prompt_parts(&media),
            Ok(vec![
                Part::text("What is this?"),
                Image::new("image/png", png.clone()).into(),
                Image::url("https://example.com/a.png").into(),
                Part::text("And these:"),
                Document::pdf(b"%PDF-".to_vec()).with_name("r.pdf").into(),
                Image::new("image/png", png).into(),
                Audio::new("audio/wav", b"RIFF".to_vec()).into(),
            ])
        );
        for bad in [
            json!([]),
            json!("text"),
            json!([{"type": "image", "data": "not base64!", "mimeType": "image/png"}]),
            json!([{"type": "image", "data": "AA=="}]),
            json!([{"type": "image", "data": "", "mimeType": "image/png"}]),
            json!([{"type": "resource", "resource": {"uri": "file:///c", "blob": "/w=="}}]),
            json!([{"type": "resource", "resource": {"blob": "AA=="}}]),
            json!([{"type": "text"}]),
            json!([{"type": "video"}]),
        ] {
            assert_eq!(
                prompt_parts(&bad).map_err(|e| e.0),
                Err(codes::INVALID_PARAMS),
                "{bad}"
            );
        }
    }

    #[test]
    fn mcp_server_entries_parse_as_the_protocol_lists_them() {
        let stdio = json!({"name": "fs", "command": "/bin/mcp", "args": ["-v"], "env": [{"name": "A", "value": "1"}]});
        assert_eq!(
            McpServer::parse(&stdio),
            Ok(McpServer::Stdio {
                name: "fs".into(),
                command: "/bin/mcp".into(),
                args: vec!["-v".into()],
                env: vec![("A".into(), "1".into())],
            })
        );
        let http =
            json!({"type": "sse", "name": "web", "url": "http://127.0.0.1:1", "headers": []});
        assert!(matches!(
            McpServer::parse(&http),
            Ok(McpServer::Http { sse: true, .. })
        ));
        assert!(McpServer::parse(&json!({"type": "carrier-pigeon", "name": "x"})).is_err());
        assert!(McpServer::parse(&json!({"name": "no command"})).is_err());
    }
}
