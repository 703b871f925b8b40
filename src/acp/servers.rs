//! THE place where the MCP servers a client lists for a session become tools of its agent.
//!
//! Without the `mcp` feature there is no MCP client, so a list with any server is refused,
//! as the protocol lets an agent do; an empty list gives no tools.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
#[cfg(feature = "mcp")]
use std::time::Instant;

use super::Options;
use super::codes;
use super::input::McpServer;
use super::map::Refusal;
use crate::cancel::CancelToken;
use crate::tool::Tool;

/// The MCP connections of one session. Dropping it (when the session ends: replaced by a
/// `session/load` of the same id, dropped for the cap on sessions, or at the end of
/// `serve`) drops the session's last handles to them, which ends the servers, once.
#[derive(Default)]
pub(super) struct McpConnections {
    #[cfg(feature = "mcp")]
    clients: Vec<crate::mcp::Client>,
}

/// What the listed servers give a session.
#[derive(Default)]
pub(super) struct Connected {
    pub(super) tools: Vec<Arc<dyn Tool>>,
    /// The names of those tools, as the model sees them: their results are the servers',
    /// never the agent's own plan.
    pub(super) names: HashSet<String>,
    pub(super) connections: McpConnections,
}

#[cfg(not(feature = "mcp"))]
pub(super) fn connect(
    servers: &[McpServer],
    _cwd: &Path,
    _options: &Options,
    _setup: &CancelToken,
    _elicit: Option<&super::elicit::Completions>,
) -> Result<Connected, Refusal> {
    if servers.is_empty() {
        return Ok(Connected::default());
    }
    Err((
        codes::INVALID_PARAMS,
        format!(
            "MCP servers are not supported by this agent ({} listed): it was built without an MCP client",
            servers.len()
        ),
    ))
}

/// Connects each server through [`crate::mcp`] in list order (a stdio server started in the
/// session's working directory when that is a directory, with the environment the client
/// lists plus the variables [`Options::pass_env`] lets through) and lists its tools, each
/// server within [`Options::mcp_timeout`]. A server over SSE only is refused before anything
/// starts; a server that fails to start, initialize or list its tools in time refuses the
/// session, naming the server and the [`crate::mcp::McpError`], and the servers already
/// connected are ended (dropped). `setup` gives the whole setup up (the end of `serve`).
///
/// Tool names: a server's tools get its prefix ([`Options::mcp_prefix`]) when the program
/// set one; otherwise, when a name of one server's tools is a name of another's, every tool
/// of each server involved gets the server's name as its prefix (`<name>_`, the name's
/// characters other than letters, digits, `_` and `-` made `_`). Names that still collide
/// refuse the session.
///
/// With `elicit` (the client shows elicitations), the servers' questions go through the
/// session's agent ([`crate::mcp::ClientBuilder::elicit_through_agent`]), to be relayed to
/// the client (see `super::elicit`), and their completions of URL questions go to it.
#[cfg(feature = "mcp")]
pub(super) fn connect(
    servers: &[McpServer],
    cwd: &Path,
    options: &Options,
    setup: &CancelToken,
    elicit: Option<&super::elicit::Completions>,
) -> Result<Connected, Refusal> {
    if let Some(McpServer::Http { name, .. }) = servers
        .iter()
        .find(|s| matches!(s, McpServer::Http { sse: true, .. }))
    {
        return Err((
            codes::INVALID_PARAMS,
            format!(
                "MCP server `{name}`: the SSE transport is not supported by this agent (stdio and http are)"
            ),
        ));
    }
    // Dropping what is connected so far ends those servers when a later one fails.
    let mut connected = Connected::default();
    let mut listed = Vec::new();
    for server in servers {
        let name = server.name();
        let prefix = options.mcp_prefixes.get(name);
        let failed = |e: crate::mcp::McpError| {
            (
                codes::INTERNAL_ERROR,
                format!("MCP server `{name}` could not be connected: {e}"),
            )
        };
        let deadline = CancelToken::with_deadline(Instant::now() + options.mcp_timeout);
        let hook = {
            let deadline = deadline.clone();
            setup.on_cancel(move || deadline.cancel())
        };
        let builder = client_builder(server, cwd, options).init_timeout(options.mcp_timeout);
        let builder = match prefix {
            Some(prefix) => builder.prefix(prefix.clone()),
            None => builder,
        };
        let builder = match elicit {
            Some(completions) => {
                let completions = completions.clone();
                builder
                    .elicit_through_agent()
                    .on_notification(move |method, params| {
                        if method == "notifications/elicitation/complete"
                            && let Some(id) = params["elicitationId"].as_str()
                        {
                            completions.complete(id);
                        }
                    })
            }
            None => builder,
        };
        let tools = builder.connect().and_then(|client| {
            connected.connections.clients.push(client.clone());
            client.tools_with(&deadline)
        });
        if let Some(hook) = hook {
            setup.remove_hook(hook);
        }
        let tools = match tools {
            Ok(tools) => tools,
            Err(_) if deadline.is_timed_out() => {
                return Err((
                    codes::INTERNAL_ERROR,
                    format!(
                        "MCP server `{name}` could not be connected: it did not list its tools within {:?}",
                        options.mcp_timeout
                    ),
                ));
            }
            Err(e) => return Err(failed(e)),
        };
        listed.push(Listed {
            server: name,
            explicit: prefix.is_some(),
            tools,
        });
    }
    for tools in prefixed(listed)? {
        connected
            .names
            .extend(tools.iter().map(|t| t.name().to_owned()));
        connected.tools.extend(tools);
    }
    Ok(connected)
}

/// The builder of one listed server.
#[cfg(feature = "mcp")]
fn client_builder(server: &McpServer, cwd: &Path, options: &Options) -> crate::mcp::ClientBuilder {
    use crate::mcp::Client;
    match server {
        McpServer::Stdio {
            command, args, env, ..
        } => {
            // Not our environment (API keys!): the client's variables and the allowed few.
            let mut builder = Client::stdio(command.to_string_lossy())
                .args(args.iter().cloned())
                .env_clear();
            for name in &options.passed_env {
                if let Some(value) = std::env::var_os(name) {
                    builder = builder.env(name.clone(), value.to_string_lossy());
                }
            }
            for (key, value) in env {
                builder = builder.env(key.clone(), value.clone());
            }
            if cwd.is_dir() {
                builder = builder.current_dir(cwd);
            }
            builder
        }
        McpServer::Http { url, headers, .. } => {
            let mut builder = Client::http(url.clone());
            for (key, value) in headers {
                builder = builder.header(key.clone(), value.clone());
            }
            builder
        }
    }
}

/// One server's tools as listed.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
struct Listed<'a> {
    server: &'a str,
    /// Named with the program's prefix for this server.
    explicit: bool,
    tools: Vec<Arc<dyn Tool>>,
}

/// The tools of each server, in order, renamed where two servers' names collide (see
/// [`connect`]).
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
fn prefixed(listed: Vec<Listed<'_>>) -> Result<Vec<Vec<Arc<dyn Tool>>>, Refusal> {
    let servers_of = |tool: &str| {
        listed
            .iter()
            .filter(|l| l.tools.iter().any(|t| t.name() == tool))
            .count()
    };
    let clashes: Vec<bool> = listed
        .iter()
        .map(|l| !l.explicit && l.tools.iter().any(|t| servers_of(t.name()) > 1))
        .collect();
    let servers: Vec<&str> = listed.iter().map(|l| l.server).collect();
    let renamed: Vec<Vec<Arc<dyn Tool>>> = listed
        .into_iter()
        .zip(clashes)
        .map(|(l, clash)| {
            if !clash {
                return l.tools;
            }
            let prefix = format!("{}_", plain_name(l.server));
            l.tools
                .into_iter()
                .map(|t| Arc::new(Prefixed::new(&prefix, t)) as Arc<dyn Tool>)
                .collect()
        })
        .collect();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (server, tools) in servers.iter().zip(&renamed) {
        for tool in tools {
            if let Some((other, _)) = seen.iter().find(|(_, t)| *t == tool.name()) {
                return Err((
                    codes::INVALID_PARAMS,
                    format!(
                        "MCP servers `{other}` and `{server}` both give a tool named `{}`, also with \
                         their names as prefixes",
                        tool.name()
                    ),
                ));
            }
            seen.push((server, tool.name()));
        }
    }
    Ok(renamed)
}

/// A server's name as a tool-name prefix: letters, digits, `_` and `-`, the rest `_`.
fn plain_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A tool under another name: everything else is the tool's own.
struct Prefixed {
    name: String,
    tool: Arc<dyn Tool>,
}

impl Prefixed {
    fn new(prefix: &str, tool: Arc<dyn Tool>) -> Prefixed {
        Prefixed {
            name: format!("{prefix}{}", tool.name()),
            tool,
        }
    }
}

impl Tool for Prefixed {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn parameters(&self) -> serde_json::Value {
        self.tool.parameters()
    }

    fn execute(
        &self,
        args: serde_json::Value,
        ctx: &crate::ToolContext,
    ) -> Result<crate::ToolOutput, crate::ToolError> {
        self.tool.execute(args, ctx)
    }

    fn sequential(&self) -> bool {
        self.tool.sequential()
    }

    fn validate(&self, args: &serde_json::Value) -> Result<(), String> {
        self.tool.validate(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool;

    fn named(name: &str) -> Arc<dyn Tool> {
        Arc::new(tool::typed(
            name,
            "A tool.",
            |_: serde_json::Map<String, serde_json::Value>, _| Ok(crate::ToolOutput::text("ok")),
        ))
    }

    fn names(renamed: &[Vec<Arc<dyn Tool>>]) -> Vec<Vec<String>> {
        renamed
            .iter()
            .map(|tools| tools.iter().map(|t| t.name().to_owned()).collect())
            .collect()
    }

    fn server<'a>(server: &'a str, explicit: bool, tools: &[&str]) -> Listed<'a> {
        Listed {
            server,
            explicit,
            tools: tools.iter().map(|t| named(t)).collect(),
        }
    }

    #[test]
    fn colliding_servers_get_their_names_as_prefixes_and_the_others_keep_theirs() {
        let servers = vec![
            server("fs", false, &["read", "write"]),
            server("git hub", false, &["read", "log"]),
            server("web", false, &["fetch"]),
        ];
        assert_eq!(
            names(&prefixed(servers).unwrap()),
            [
                vec!["fs_read", "fs_write"],
                vec!["git_hub_read", "git_hub_log"],
                vec!["fetch"]
            ]
        );
        // A program's prefix is kept; the other server of the clash gets its name.
        let servers = vec![
            server("fs", true, &["files_read"]),
            server("files", false, &["read"]),
            server("other", false, &["files_read"]),
        ];
        assert_eq!(
            names(&prefixed(servers).unwrap()),
            [vec!["files_read"], vec!["read"], vec!["other_files_read"]]
        );
        // Two servers of one name: no prefix can part them.
        let servers = vec![
            server("fs", false, &["read"]),
            server("fs", false, &["read"]),
        ];
        assert_eq!(
            prefixed(servers).map(|_| ()).unwrap_err().0,
            codes::INVALID_PARAMS
        );
    }
}
