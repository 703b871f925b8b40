//! The examples of the repository, built as modules of a user's crate: they may use only
//! what a user's crate has (pagent, serde, serde_json). Their own unit tests run here too.

#[allow(dead_code)]
#[path = "../../../examples/chat.rs"]
mod chat;

#[allow(dead_code)]
#[path = "../../../examples/offload.rs"]
mod offload;

#[allow(dead_code)]
#[path = "../../../examples/typed_tool.rs"]
mod typed_tool;

#[allow(dead_code)]
#[path = "../../../examples/wire_server.rs"]
mod wire_server;

#[allow(dead_code)]
#[path = "../../../examples/pagent_mirror.rs"]
mod pagent_mirror;

#[allow(dead_code)]
#[path = "../../../examples/acp_agent.rs"]
mod acp_agent;

#[allow(dead_code)]
#[path = "../../../examples/mcp.rs"]
mod mcp;
