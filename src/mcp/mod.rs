//! A blocking client for the [Model Context Protocol](https://modelcontextprotocol.io): the
//! tools of any MCP server as pagent tools ([`crate::Tool`]). Behind the `mcp` feature.
//!
//! ```no_run
//! use pagent::mcp::Client;
//! use pagent::Agent;
//! # use pagent::llm::Faux;
//!
//! // A stdio server: a child process speaking JSON-RPC on its stdin and stdout.
//! let files = Client::stdio("npx")
//!     .args(["-y", "@modelcontextprotocol/server-filesystem", "/tmp/work"])
//!     .prefix("fs_")
//!     .connect()?;
//! let mut builder = Agent::builder();
//! # builder = builder.provider(Faux::default());
//! for tool in files.tools()? {
//!     builder = builder.tool_arc(tool);
//! }
//! let agent = builder.build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Transports
//! - **stdio** ([`Client::stdio`]): starts the program with its arguments, environment and
//!   working directory, and speaks newline-delimited JSON-RPC on its stdin and stdout. Its
//!   stderr is kept, the last [`ClientBuilder::stderr_limit`] bytes of it, for the error
//!   that says why it exited ([`Client::stderr`]).
//! - **Streamable HTTP** ([`Client::http`]): each message is a POST to the endpoint over
//!   `ureq`, answered with JSON or an event stream. In the stateless era that is all (see
//!   [Eras](#eras)). In the session era the session id and the protocol version go with
//!   every request after `initialize`, and shutdown ends the session with a DELETE.
//!   After `initialize` a thread of the client's own opens the server's optional GET stream
//!   (`Accept: text/event-stream`), on which the server sends what it says unasked (a
//!   changed tool list, its own requests, which are answered); `connect` returns once the
//!   server answered that GET, so nothing it sends right after is lost. A server that
//!   offers none answers `405`, and then speaks only in its replies. The stream is opened
//!   again, once, after the server's `retry` delay and with `Last-Event-ID` if it drops
//!   while the client is open, and `close()` or drop shuts its socket down at once. A
//!   request's event stream that ends before its response, after events with ids, is
//!   resumed the same way (a GET with `Last-Event-ID` after `retry`), as the spec's
//!   resumability has it. A `307` or `308` to the same origin is followed with the same
//!   method, body and headers (the Python SDK answers `POST /mcp/` with a `307` to `/mcp`);
//!   any other redirect, and one to another host, is [`McpError::Redirected`], and that
//!   host is sent nothing. An error response with a `null` id in the reply to a request is
//!   that request's error ([`McpError::Rpc`]); the connection goes on.
//!
//! # Eras
//! MCP has two eras, and the client speaks both, choosing per server as the 2026-07-28
//! revision's compatibility section says ([`ClientBuilder::era`] forces one):
//!
//! - **Stateless** ([`Era::Stateless`], revision 2026-07-28): no handshake and no session.
//!   [`ClientBuilder::connect`] sends `server/discover` with the revision, the client's
//!   identity and capabilities in its `_meta`, as every later request carries them (over
//!   HTTP also in the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers, and the
//!   `Mcp-Param-*` headers of the arguments a tool marks with `x-mcp-header`). A server
//!   that needs something of the client answers `input_required` (MRTR): its questions are
//!   answered ([`ClientBuilder::on_elicitation`], [`ClientBuilder::root`],
//!   [`ClientBuilder::sample_with`]) and the request
//!   sent again with a new id, the answers and the server's `requestState` exactly as it
//!   came. Change notifications come on a `subscriptions/listen` request the client keeps
//!   open on a thread of its own, for what the server's capabilities announce and the
//!   resources subscribed to. Over HTTP a request is cancelled by closing its stream.
//! - **Session** ([`Era::Session`], revisions 2024-11-05 to 2025-11-25): `initialize` asks
//!   for 2025-11-25 and accepts any of the four in the answer; then
//!   `notifications/initialized`; over HTTP a session id and the server's GET stream. The
//!   server sends its questions as requests of its own, answered by the same hooks.
//!
//! The choice: a `server/discover` result, or an error only a stateless server gives (an
//! unsupported version with the ones it speaks: the client asks again with one of them),
//! makes the server stateless; any other answer (an error, an HTTP 4xx without such an
//! error, a result that is not a discover result, silence for up to 10 s or half the init
//! timeout) makes it a session-era server, greeted with `initialize`. Whichever it is, the
//! client's API is the same: [`ServerInfo::era`] and [`ServerInfo::protocol_version`] say
//! what was agreed.
//!
//! # Conformance
//! `.ci/conformance.sh` runs every client scenario of the official conformance suite
//! (`@modelcontextprotocol/conformance`), both its stable release 0.1.16 and 0.2.0-alpha.12,
//! the newest with the 2026-07-28 scenarios, against this client through
//! `examples/mcp_conformance.rs`. `tests/mcp/conformance/scenarios.txt` and
//! `tests/mcp/conformance/next/scenarios.txt` list each scenario, and why for each one that
//! fails.
//!
//! OAuth against a real protected server: `tests/mcp/oauth.rs` runs the official TypeScript
//! SDK's example server with its own authorization server (`simpleStreamableHttp.js --oauth
//! --oauth-strict`, from the npm package `@modelcontextprotocol/sdk`) through the whole
//! authorization code flow with [`OAuth::authorize_in_browser`], the test playing the
//! browser, and asserts every request both servers answered.
//!
//! # Features by revision
//! | Feature | Revisions | Here |
//! |---|---|---|
//! | tools: list (paginated), call, progress, cancellation, `list_changed` | 2024-11-05 on | [`Client::tools`], [`Client::call_tool`], [`Client::sync_tools`] |
//! | tool `title`, `outputSchema`, `structuredContent` (checked against the schema) | 2025-06-18 on | [`ToolInfo`], [`CallResult::structured`], [`McpError::BadResult`] |
//! | tool `icons`, annotations, `_meta` kept | 2025-11-25 on (annotations 2025-03-26) | [`ToolInfo::icons`], [`ToolInfo::annotations`] |
//! | resources: list, templates, read, subscribe | 2024-11-05 on | [`Client::list_resources`], [`Client::read_resource`], [`Client::subscribe_resource`] |
//! | prompts: list, get, into an agent's messages | 2024-11-05 on | [`Client::get_prompt`], [`PromptResult::to_messages`] |
//! | elicitation, form mode (defaults filled in) | 2025-06-18 on (defaults 2025-11-25) | [`ClientBuilder::on_elicitation`] |
//! | elicitation, URL mode | 2025-11-25 on | [`ElicitationMode::Url`] |
//! | elicitation as events of the run, answered through the agent (a UI, the wire server's `elicitation/answer`, an ACP client's `elicitation/create`) | both eras (a request of the server, or an `input_required` result) | [`ClientBuilder::elicit_through_agent`], [`AgentEvent::ElicitationStart`](crate::AgentEvent::ElicitationStart), [`AgentHandle::answer_elicitation`](crate::AgentHandle::answer_elicitation) |
//! | URL mode's completion (`notifications/elicitation/complete`) and `URLElicitationRequiredError` (-32042): the URLs shown, the completion waited for, the request sent again | 2025-11-25 on | [`Client::elicitation_completed`], see [Elicitation](#elicitation); relayed to an ACP client as `elicitation/complete` |
//! | roots | 2024-11-05 on (deprecated in 2026-07-28) | [`ClientBuilder::root`] |
//! | sampling (`sampling/createMessage`: text and image messages, `systemPrompt`, `stopSequences`; `maxTokens`, `temperature`, `modelPreferences` to the hook, hints advisory; `includeContext` adds nothing) | 2024-11-05 on (deprecated in 2026-07-28: an `input_required` request then) | [`ClientBuilder::sample_with`] (a provider), [`ClientBuilder::on_sampling`] (the program's hook, which may refuse), [`SamplingRequest`], [`SamplingReply`]; declared only when configured |
//! | sampling with tools (`tools`, `toolChoice`, `tool_use` / `tool_result` content) | 2025-11-25 on | `sampling.tools` declared with sampling; [`SamplingRequest::tools`], [`SamplingReply::tool_calls`]; `toolChoice: none` sends no tools, `required` is advice |
//! | logging, completion, tasks | | not implemented (log messages reach [`ClientBuilder::on_notification`]) |
//! | Streamable HTTP: session, GET stream, resumption | 2025-03-26 to 2025-11-25 | see [Transports](#transports) |
//! | stateless requests: `server/discover`, `_meta`, `resultType`, MRTR, `subscriptions/listen`, standard and `x-mcp-header` headers | 2026-07-28 | see [Eras](#eras) |
//! | OAuth 2.1: protected resource and authorization server metadata, PKCE, resource indicators, dynamic registration, Client ID Metadata Documents, refresh, step-up on `insufficient_scope`, `iss` checks, client credentials (secret or `private_key_jwt`) | 2025-03-26 on (metadata discovery 2025-06-18, CIMD and step-up 2025-11-25) | [`ClientBuilder::oauth`], [`OAuth`]; without it a refusal is [`McpError::Unauthorized`] with its [`Challenge`] |
//! | OAuth: a new authorization server named by the resource (SEP-2352: discovered and registered with, nothing of the old one's reused) | 2026-07-28 | [`OAuth`] |
//! | OAuth: DPoP-bound tokens (RFC 9449, ES256; the servers' nonces) | extension `io.modelcontextprotocol/auth/dpop` | [`OAuth::dpop`], [`Tokens::dpop_bound`] |
//! | OAuth: enterprise-managed authorization (SEP-990: the ID token exchanged at the identity provider, RFC 8693, then the JWT bearer grant) | extension `io.modelcontextprotocol/enterprise-managed-authorization` | [`OAuth::enterprise_managed`] |
//! | OAuth: workload identity federation (SEP-1933: the JWT bearer grant, RFC 7523, with the workload's token) | extension `io.modelcontextprotocol/auth/wif` | [`OAuth::workload_identity`] |
//! | HTTP+SSE (the 2024-11-05 transport) | 2024-11-05 (deprecated) | not implemented |
//!
//! # Elicitation
//! A server's question for the user (`elicitation/create`, or an `input_required` result's
//! input request) goes to the hook of [`ClientBuilder::on_elicitation`], or, with
//! [`ClientBuilder::elicit_through_agent`], to whoever answers the run's
//! [`AgentEvent::ElicitationStart`](crate::AgentEvent::ElicitationStart); inside a run's tool
//! call it is an event of the run either way. In URL mode the user's `accept` means they
//! agreed to go to the URL; the interaction itself happens there, and the server may say
//! when it is over with `notifications/elicitation/complete`, which the client remembers by
//! its `elicitationId` ([`Client::elicitation_completed`], for a UI that still shows the URL;
//! the notification reaches [`ClientBuilder::on_notification`] too); one for an id no
//! question had is kept the same way and wakes nothing. A request the server refuses with a `URLElicitationRequiredError` (code
//! -32042, the URLs in its `data.elicitations`) is, when the client answers elicitations,
//! not failed at once: each URL is asked as a URL-mode elicitation (the same events inside a
//! tool call), and when the user accepted every one and the server said each is complete
//! (waited for at most [`ClientBuilder::call_timeout`], or until an abort), the request is
//! sent again, as the spec suggests. A URL declined or cancelled, or no completion in time,
//! leaves the request with the server's error ([`McpError::Rpc`]); an abort ends it with
//! [`McpError::Aborted`]. Completions that come before the error are kept, so their order
//! does not matter.
//!
//! # Lifecycle
//! [`ClientBuilder::connect`] starts the server and agrees on the protocol with it (see
//! [Eras](#eras)). [`Client::ping`] checks that the server answers (`ping`, or in the
//! stateless era, which has none, `server/discover`).
//! [`Client::close`], or dropping the last handle (the client and every tool it made),
//! ends the connection: for stdio it closes the child's stdin, waits up to
//! [`ClientBuilder::shutdown_grace`] for it to exit, then ends its process group and reaps
//! it. On unix the child starts in a process group of its own, so a server started through a
//! wrapper (`npx`, a shell script) ends with the wrapper: when anything of the group still
//! runs, the group gets `SIGTERM`, then, after up to a second more, `SIGKILL`. (Being in its
//! own group, the server does not get the terminal's Ctrl-C either: the client ends it.)
//! Elsewhere the child is killed by its own handle, and a wrapper's children may be left
//! running: start the server's program itself there.
//!
//! The group is signalled only while the child is not reaped: until then its pid, and so the
//! group's id, cannot belong to any other process, where after the reap the kernel may give
//! it to a stranger that leads a group of its own. Whether the child exited is asked without
//! reaping it, the reap happens once (when the shutdown is over, or as soon as the child
//! exited with nothing of its group left running), and nothing is signalled after it. The
//! shutdown runs once: [`Client::close`] and then dropping the last handle end the server
//! once, and a second `close` returns at once.
//!
//! # On the crate's JSON-RPC peer
//! Ids, the requests waiting for their answers, classification of what the server sends,
//! and the stdio writer are those of `jsonrpc`, the one peer under the wire server, the ACP
//! server and this client; the client adds what MCP means (its requests answered, progress
//! and tool-list changes used, cancellations) and the transports.
//!
//! # Never a hang
//! Every request waits for its answer, the caller's [`CancelToken`](crate::CancelToken), its timeout and the end
//! of the connection at once. A server that exits or closes its output wakes every waiting
//! request with [`McpError::Exited`] (its exit status and the end of its stderr); a server
//! that writes something that is not a JSON-RPC message, answers a request never sent, or
//! sends a message over [`ClientBuilder::max_message_bytes`] ends the connection with
//! [`McpError::Protocol`] or [`McpError::TooLarge`]; a server that stays silent runs into
//! the timeout ([`McpError::Timeout`]). The server's own requests are answered (`ping`;
//! elicitation, roots and sampling by their hooks, on the thread of the request they came with or a
//! pool of four, never on a reading thread; an error for the others), its notifications of
//! progress and tool-list changes are used, and the rest go to
//! [`ClientBuilder::on_notification`].
//!
//! # Bounded
//! Nothing a server sends makes the client hold more than a bound. Each message is at most
//! [`ClientBuilder::max_message_bytes`]; the pages of one list together at most
//! [`ClientBuilder::max_list_bytes`] ([`McpError::ListTooLarge`]). A stdio server's
//! messages are written to it through one bounded queue (1 MiB, the crate's JSON-RPC
//! peer's line output): a sender that finds it full waits for room, at most 10 s, so a
//! server that sends requests without reading what it is sent fills its pipe, then the
//! queue with our answers, and the connection ends with [`McpError::NotReading`]. Over HTTP the server's requests
//! are answered one at a time by the thread that read them, never on a thread each, and the
//! cancellations a caller sends without waiting go through one thread and a queue of 64.
//!
//! # Tools
//! [`Client::tools`] lists the server's tools (every page of `tools/list`) and makes each
//! a pagent tool: its name (after the optional [`ClientBuilder::prefix`]), its description,
//! and its input schema passed through unchanged. A call sends `tools/call` and maps the
//! result to a [`ToolOutput`](crate::ToolOutput) ([`CallResult::to_output`]): its
//! `content` is what the model sees, the result's pieces as [`Part`](crate::Part)s in order
//! (images and documents reach a vision model as the images and documents they are), and
//! its `details` is the result as the server sent it, for programs and UIs, without the bytes
//! that became parts:
//!
//! | In the result | What the model sees | In `details` |
//! |---|---|---|
//! | `text` | the text (pieces of text in a row joined by line breaks) | yes |
//! | `image` | an [`Image`](crate::Image) part (or, when its data is not base64, the note `[image: image/png, 1234 bytes base64]`) | without `data` |
//! | `audio` | an [`Audio`](crate::Audio) part (same fallback) | without `data` |
//! | `resource_link` | `[resource link: name <uri>]` | yes |
//! | `resource` (embedded) | its text; a `blob` as an image (`image/*`) or a [`Document`](crate::Document) named by its URI | without `blob` |
//! | `structuredContent` | its JSON, only when there is no `content` (servers send the same as text) | yes |
//! | `isError: true` | the text, as an error result ([`crate::ToolError`]) | no |
//!
//! A provider whose model cannot take a part says so before sending the next request
//! ([`Accepts`](crate::llm::Accepts)); [`CallResult::text`] is the text-only view, with notes.
//!
//! The typed pieces are [`Content`], in [`CallResult::content`]. Progress notifications become
//! `ToolUpdate` events in the order they came. `abort()` (the tool's cancel token) sends
//! `notifications/cancelled` and the call returns at once with [`McpError::Aborted`];
//! [`ClientBuilder::call_timeout`] bounds each call the same way.
//!
//! When the server announces that its tools changed (`notifications/tools/list_changed`),
//! [`Client::sync_tools`] in a `before_turn` hook gives the agent the new list from the next
//! turn on:
//!
//! ```no_run
//! # use pagent::mcp::Client;
//! # use pagent::Agent;
//! # let server = Client::stdio("my-server").connect()?;
//! let sync = server.clone();
//! let mut builder = Agent::builder().before_turn(move |setup| {
//!     let _ = sync.sync_tools(&mut setup.tools);
//! });
//! # builder = builder.provider(pagent::llm::Faux::default());
//! for tool in server.tools()? {
//!     builder = builder.tool_arc(tool);
//! }
//! let agent = builder.build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod client;
mod dpop;
mod elicit;
mod era;
mod error;
mod http;
mod oauth;
mod oauth_flow;
mod process;
mod protocol;
mod resources;
mod sampling;
mod session;
mod stdio;
mod tool;

pub use builder::ClientBuilder;
pub use client::Client;
pub use elicit::{Elicitation, ElicitationAnswer, ElicitationMode};
pub use error::{Direction, McpError};
pub use oauth::{
    AuthorizationRequest, Challenge, FileStore, MemoryStore, OAuth, TokenStore, Tokens,
};
pub use protocol::{CallResult, Content, Era, Icon, Progress, ServerInfo, ToolInfo};
pub use resources::{
    PromptArgument, PromptInfo, PromptMessage, PromptResult, ResourceContents, ResourceInfo,
    ResourceTemplate,
};
pub use sampling::{SamplingReply, SamplingRequest};
pub use tool::McpTool;
