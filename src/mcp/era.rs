//! Choosing the era of the protocol with one server, as the 2026-07-28 revision's
//! compatibility section says: a stateless probe first (`server/discover` with the newest
//! revision in its `_meta`), then the session era's `initialize` when the answer says the
//! server is of that era.
//!
//! - A `server/discover` result: the server is stateless; the newest revision both speak is
//!   used from then on.
//! - An error that only a stateless server gives (`UnsupportedProtocolVersionError`, with
//!   the revisions it speaks): stateless too, with one of those (or, when it lists only
//!   session-era revisions, `initialize` with one of them).
//! - Anything else, an error of any other code, an HTTP 4xx without a JSON-RPC error of
//!   that era, a result that is not a discover result, no answer within
//!   [`PROBE_TIMEOUT`]: a session-era server, greeted with `initialize`.
//!
//! The era is the server's, not a request's: it is chosen once per connection.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::McpError;
use super::client::Handle;
use super::protocol::{self, Agreed, Era, LEGACY_VERSIONS, MODERN_VERSIONS, ServerInfo};
use super::session::{Request, Session};
use crate::cancel::CancelToken;

/// How long a probe waits for a server that may be of the session era and stay silent on
/// a request it does not know (the init timeout bounds it too).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which era [`super::ClientBuilder::era`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    Auto,
    Only(Era),
}

/// The protocol as first proposed: the newest stateless revision.
pub(crate) fn proposal(capabilities: &Value) -> Agreed {
    Agreed {
        era: Era::Stateless,
        version: MODERN_VERSIONS[0].to_owned(),
        capabilities: capabilities.clone(),
    }
}

/// Agrees on the protocol with the server, and says hello as its era wants.
///
/// Blocks until agreed, at most `timeout`.
///
/// # Errors
/// [`McpError::UnsupportedVersion`] when the server speaks no revision of this client's,
/// and any error of the requests.
pub(crate) fn agree(
    session: &Session,
    handle: &Handle,
    choice: Choice,
    timeout: Duration,
) -> Result<ServerInfo, McpError> {
    let until = Instant::now() + timeout;
    let capabilities = session.router.capabilities();
    if choice != Choice::Only(Era::Session) {
        let proposal = proposal(&capabilities);
        session.set_agreed(proposal.clone());
        match probe(session, until, choice == Choice::Only(Era::Stateless))? {
            Probed::Stateless(mut info, supported) => {
                let version = newest(&MODERN_VERSIONS, &supported);
                let Some(version) = version else {
                    // A stateless server that lists only session-era revisions.
                    if let Some(v) = newest(&LEGACY_VERSIONS, &supported) {
                        return initialize(session, handle, v, until);
                    }
                    return Err(McpError::UnsupportedVersion(supported.join(", ")));
                };
                let agreed = Agreed {
                    version: version.to_owned(),
                    ..proposal
                };
                session.set_agreed(agreed);
                if let Handle::Http(http) = handle {
                    http.set_protocol_version(version, true);
                }
                info.protocol_version = version.to_owned();
                return Ok(info);
            }
            Probed::Session => {}
        }
    }
    match initialize(session, handle, LEGACY_VERSIONS[0], until) {
        // A stateless server that answered the probe too late (a slow start): it refuses
        // `initialize` naming the revisions it speaks. Asked again, statelessly.
        Err(McpError::Rpc { code, data, .. })
            if choice == Choice::Auto
                && protocol::supported_versions(code, data.as_ref())
                    .is_some_and(|v| newest(&MODERN_VERSIONS, &v).is_some()) =>
        {
            let left = until.saturating_duration_since(Instant::now());
            return agree(session, handle, Choice::Only(Era::Stateless), left);
        }
        other => other,
    }
    .map_err(|e| match e {
        // The time of the whole greeting, probe included.
        McpError::Timeout { method, .. } => McpError::Timeout {
            method,
            after: timeout,
        },
        e => e,
    })
}

enum Probed {
    /// A stateless server: what it said of itself, and the revisions it speaks.
    Stateless(ServerInfo, Vec<String>),
    /// A session-era server.
    Session,
}

/// Sends `server/discover` (again once, with a revision the server names, when it refuses
/// the first).
fn probe(session: &Session, until: Instant, only: bool) -> Result<Probed, McpError> {
    let never = CancelToken::new();
    let remaining = until.saturating_duration_since(Instant::now());
    let asked = session.request(
        Request {
            method: "server/discover",
            params: None,
            cancel: &never,
            // Half the time at most: a server that stays silent on it still gets its
            // `initialize`.
            timeout: if only {
                remaining
            } else {
                (remaining / 2).min(PROBE_TIMEOUT)
            },
        },
        None,
    );
    let session_era = |e: McpError| if only { Err(e) } else { Ok(Probed::Session) };
    match asked {
        Ok(result) => match protocol::discovered(&result) {
            Some(found) => Ok(Probed::Stateless(found.info, found.supported)),
            None => session_era(McpError::Protocol(format!(
                "the server's answer to server/discover is not a discover result: {}",
                protocol::snippet(result.to_string().as_bytes())
            ))),
        },
        Err(McpError::Rpc { code, data, .. })
            if protocol::supported_versions(code, data.as_ref()).is_some() =>
        {
            let supported = protocol::supported_versions(code, data.as_ref()).unwrap_or_default();
            let Some(version) = newest(&MODERN_VERSIONS, &supported) else {
                return Ok(Probed::Stateless(unnamed(), supported));
            };
            // Asked again with the revision the server named, as the spec wants.
            session.set_agreed(Agreed {
                version: version.to_owned(),
                ..session.agreed()
            });
            let again = session.request(
                Request {
                    method: "server/discover",
                    params: None,
                    cancel: &never,
                    timeout: until.saturating_duration_since(Instant::now()),
                },
                None,
            )?;
            match protocol::discovered(&again) {
                Some(found) => Ok(Probed::Stateless(found.info, found.supported)),
                None => Ok(Probed::Stateless(unnamed(), supported)),
            }
        }
        Err(e @ McpError::Rpc { code, .. })
            if [
                protocol::codes::HEADER_MISMATCH,
                protocol::codes::MISSING_CAPABILITY,
            ]
            .contains(&code) =>
        {
            // Only a stateless server says so; it refused us.
            Err(e)
        }
        // The server is gone, or the caller gave up: no point in a second greeting.
        Err(e @ (McpError::Exited { .. } | McpError::Closed | McpError::Spawn(_))) => Err(e),
        // Not where the client may go, or not authorized: the same again for `initialize`.
        Err(e @ (McpError::Redirected { .. } | McpError::Auth(_) | McpError::TokenStore(_))) => {
            Err(e)
        }
        Err(e) => session_era(e),
    }
}

fn unnamed() -> ServerInfo {
    ServerInfo {
        name: String::new(),
        version: String::new(),
        protocol_version: String::new(),
        era: Era::Stateless,
        capabilities: Value::Object(Default::default()),
        instructions: None,
    }
}

/// The first of `ours` (newest first) that `theirs` lists.
fn newest<'a>(ours: &[&'a str], theirs: &[String]) -> Option<&'a str> {
    ours.iter().copied().find(|v| theirs.iter().any(|t| t == v))
}

/// `initialize` asking for `version`, then `notifications/initialized`; over HTTP the
/// server's own stream is opened.
fn initialize(
    session: &Session,
    handle: &Handle,
    version: &str,
    until: Instant,
) -> Result<ServerInfo, McpError> {
    let never = CancelToken::new();
    let capabilities = session.router.capabilities();
    session.set_agreed(Agreed {
        era: Era::Session,
        version: version.to_owned(),
        capabilities: capabilities.clone(),
    });
    let result = session
        .request(
            Request {
                method: "initialize",
                params: Some(protocol::initialize_params(version, &capabilities)),
                cancel: &never,
                timeout: until.saturating_duration_since(Instant::now()),
            },
            None,
        )
        .map_err(|e| match e {
            // The child's exit says more than the closed pipe.
            McpError::Closed => session.ended(),
            e => e,
        })?;
    let info = protocol::server_info(result)?;
    session.set_agreed(Agreed {
        era: Era::Session,
        version: info.protocol_version.clone(),
        capabilities,
    });
    if let Handle::Http(http) = handle {
        http.set_protocol_version(&info.protocol_version, false);
    }
    let deadline = CancelToken::with_deadline(until);
    session.notify("notifications/initialized", None, &deadline)?;
    if let Handle::Http(http) = handle {
        http.listen(until);
    }
    Ok(info)
}
