//! What a client sends that is more than an id: a prompt's content blocks and the MCP servers
//! of a session.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::codes;
use super::map::Refusal;

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

/// The text of a prompt's content blocks, in order: `text` as it is, a `resource_link` as a
/// markdown link, an embedded text `resource` as its text under its URI. Images, audio and
/// binary resources are refused (the agent's capabilities say so).
pub(crate) fn prompt_text(blocks: &Value) -> Result<String, Refusal> {
    let bad = |why: String| (codes::INVALID_PARAMS, why);
    let Some(blocks) = blocks.as_array() else {
        return Err(bad(
            "session/prompt needs `prompt`, a list of content blocks".into(),
        ));
    };
    let mut out = String::new();
    for block in blocks {
        let field = |name: &str| block.get(name).and_then(Value::as_str);
        let piece = match field("type") {
            Some("text") => field("text").map(str::to_owned),
            Some("resource_link") => field("uri").map(|uri| {
                let name = field("name").unwrap_or(uri);
                format!("[{name}]({uri})")
            }),
            Some("resource") => {
                let r = block.get("resource");
                let get = |n: &str| r.and_then(|r| r.get(n)).and_then(Value::as_str);
                match (get("uri"), get("text")) {
                    (Some(uri), Some(t)) => {
                        Some(format!("<context uri=\"{uri}\">\n{t}\n</context>"))
                    }
                    _ => return Err(bad("only text resources can be embedded".into())),
                }
            }
            Some(other @ ("image" | "audio")) => {
                return Err(bad(format!(
                    "{other} content is not supported by this agent"
                )));
            }
            _ => None,
        };
        let Some(piece) = piece else {
            return Err(bad(format!("a prompt content block is malformed: {block}")));
        };
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&piece);
    }
    if out.is_empty() {
        return Err(bad("the prompt is empty".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn prompt_blocks_become_text_and_unsupported_ones_are_refused() {
        let blocks = json!([
            {"type": "text", "text": "Look at"},
            {"type": "resource_link", "uri": "file:///a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///b.rs", "text": "fn b() {}"}},
        ]);
        assert_eq!(
            prompt_text(&blocks),
            Ok("Look at\n\n[a.rs](file:///a.rs)\n\n<context uri=\"file:///b.rs\">\nfn b() {}\n</context>".to_owned())
        );
        for bad in [
            json!([]),
            json!("text"),
            json!([{"type": "image", "data": "", "mimeType": "image/png"}]),
            json!([{"type": "resource", "resource": {"uri": "file:///c", "blob": "AA=="}}]),
            json!([{"type": "text"}]),
            json!([{"type": "video"}]),
        ] {
            assert_eq!(
                prompt_text(&bad).map_err(|e| e.0),
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
