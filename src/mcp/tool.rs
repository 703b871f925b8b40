//! One tool of an MCP server as a pagent [`Tool`].

use std::fmt;

use serde_json::Value;

use super::{Client, ToolInfo};
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};

/// A tool of an MCP server, made by [`Client::tools`]: its name (with the server's prefix),
/// description and input schema as the server lists them, and calls that go to the server.
///
/// # Contract
/// [`Tool::execute`] sends `tools/call` and blocks its thread until the result comes, the
/// run is aborted (the server is sent `notifications/cancelled` and the call returns at once
/// with an error result), or the client's call timeout passes. Each progress notification
/// of the call becomes a `ToolUpdate` (see [`Progress::to_output`](super::Progress::to_output)),
/// in the order the server sent them. A result with `isError` becomes an error result with
/// its text; any other result becomes [`CallResult::to_output`](super::CallResult::to_output).
/// Tools of one server may run in parallel: their calls share the connection.
pub struct McpTool {
    client: Client,
    name: String,
    info: ToolInfo,
}

impl McpTool {
    pub(crate) fn new(client: Client, info: ToolInfo) -> McpTool {
        McpTool {
            name: format!("{}{}", client.prefix(), info.name),
            client,
            info,
        }
    }

    /// The tool as the server listed it (its name there, without the prefix).
    pub fn info(&self) -> &ToolInfo {
        &self.info
    }

    /// The connection the tool's calls go to.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.name)
            .field("server", &self.client.server_info().name)
            .finish()
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn parameters(&self) -> Value {
        self.info.input_schema.clone()
    }

    fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // The call adds to this tool call's `execute_tool` span (feature `tracing`).
        // The server's questions during the call are the call's (events of the run).
        let result = crate::tool::ask::within(ctx, || {
            crate::trace::in_tool(|| {
                self.client
                    .call_tool(&self.info.name, args, ctx.cancel(), &mut |progress| {
                        ctx.update(progress.to_output());
                    })
            })
        })?;
        if result.is_error {
            return Err(ToolError(result.text()));
        }
        Ok(result.to_output())
    }
}
