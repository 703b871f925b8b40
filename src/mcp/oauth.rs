//! OAuth 2.1 for MCP servers over HTTP, as the protocol's authorization spec has it: what a
//! program configures ([`OAuth`]), the challenge of a refusal ([`Challenge`]), the tokens
//! ([`Tokens`]) and where they are kept ([`TokenStore`], [`MemoryStore`], [`FileStore`]).
//! The flow itself is in `oauth_flow`.
//!
//! (The flow is told in the docs of [`OAuth`].)

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::cancel::CancelToken;

/// What the authorization hook is given: the URL to send the user to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AuthorizationRequest {
    /// The authorization server's URL with the request (PKCE challenge, state, scope,
    /// resource): open it in the user's browser.
    pub url: String,
    /// Where the authorization server sends the browser back: the hook returns that URL,
    /// with its query.
    pub redirect_uri: String,
    /// The scopes asked for, if any.
    pub scope: Option<String>,
}

/// The program's part of the authorization code flow: given the request, send the user to
/// its URL and return the URL the browser was redirected to (`redirect_uri?code=..&state=..`),
/// or why not.
pub(crate) type AuthorizeHook =
    Arc<dyn Fn(&AuthorizationRequest, &CancelToken) -> Result<String, String> + Send + Sync>;

/// Shows the user the authorization URL (opens a browser).
pub(crate) type OpenHook = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// How the user's authorization is obtained.
#[derive(Clone)]
pub(crate) enum Authorizer {
    /// Only client credentials (or no interactive grant at all).
    None,
    /// The program's hook, with a redirect URI of its choosing.
    Hook {
        hook: AuthorizeHook,
        redirect_uri: String,
    },
    /// A loopback listener on 127.0.0.1, and the program's `open` (the browser).
    Loopback { open: OpenHook, timeout: Duration },
}

/// Gives a JWT for an assertion grant, or why not: a workload's identity token, or the
/// user's ID token of the enterprise's identity provider.
pub(crate) type AssertionHook = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// The credentials of a grant without a user at a browser.
#[derive(Clone)]
pub(crate) enum Credentials {
    /// Client credentials, `client_secret_basic` (or `_post`, as the server supports).
    Secret { id: String, secret: String },
    /// Client credentials, `private_key_jwt`: an ES256 key, PKCS#8 PEM.
    Jwt { id: String, key_pem: String },
    /// The JWT bearer grant (RFC 7523) with a workload's identity token (SEP-1933).
    Workload { assertion: AssertionHook },
    /// Enterprise-managed authorization (SEP-990): the user's ID token exchanged at the
    /// identity provider (RFC 8693) for an identity assertion grant (ID-JAG), then the JWT
    /// bearer grant with it.
    Enterprise {
        idp_token_endpoint: String,
        idp_client_id: String,
        idp_client_secret: Option<String>,
        id_token: AssertionHook,
    },
}

/// `hook` with a panic caught as a failure.
fn caught(hook: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> AssertionHook {
    Arc::new(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(&hook))
            .unwrap_or_else(|_| Err("the hook panicked".into()))
    })
}

/// OAuth 2.1 for an MCP server over HTTP: [`super::ClientBuilder::oauth`].
///
/// # The flow
/// A request refused with `401` (or `403` with `error="insufficient_scope"`) starts it:
/// 1. **Discovery.** The protected resource metadata (RFC 9728) at the `resource_metadata`
///    of the `WWW-Authenticate` challenge, else at the well-known URL with the endpoint's
///    path, then at the root; its `resource` must name this server (else the flow stops
///    before anything is sent to an authorization server). Then the authorization server's
///    metadata (RFC 8414, then OpenID Connect discovery, path-aware), whose `issuer` must be
///    the one the resource named. A server with no metadata (the 2025-03-26 revision) gets
///    the authorization server at its origin, and `/authorize`, `/token`, `/register`
///    there when that has no metadata either.
/// 2. **The client.** A preconfigured client ([`OAuth::client`]), a Client ID Metadata
///    Document ([`OAuth::client_metadata_url`]) where the server supports them, else
///    dynamic client registration (RFC 7591). The token endpoint is authenticated as the
///    registration says, or as the server supports (`client_secret_basic`,
///    `client_secret_post`, `none`).
/// 3. **The grant.** Client credentials when configured ([`OAuth::client_credentials`],
///    [`OAuth::client_credentials_jwt`]), the JWT bearer grant of a workload
///    ([`OAuth::workload_identity`]) or of an enterprise's identity provider
///    ([`OAuth::enterprise_managed`]); else the authorization code flow with PKCE
///    (S256) and the resource indicator (RFC 8707): the program's hook
///    ([`OAuth::authorize`], or [`OAuth::authorize_in_browser`] with a loopback listener)
///    sends the user to the authorization URL and hands back where the browser was
///    redirected; its `state` must match, and its `iss` the issuer (RFC 9207).
///    A `401` after that fetches the protected resource metadata again: when it names
///    another authorization server (SEP-2352), that one is discovered and registered with,
///    and nothing of the one before (its client, its refresh token) is sent to it.
/// 4. **Scopes.** The challenge's `scope`, else every scope of the resource's
///    `scopes_supported`, else none; `offline_access` added when the authorization server
///    lists it (for a refresh token). A `403` with `insufficient_scope` asks again for the
///    scopes held and those the challenge names (step-up), at most three authorizations per
///    request.
/// 5. **Tokens.** Sent as `Authorization: Bearer` with every request, kept in the
///    [`TokenStore`] by the server's resource URL with the client they were issued to
///    (read as the client connects: a [`FileStore`]'s tokens of an earlier run go with the
///    first request), refreshed (`refresh_token` grant, as that client) before a request
///    when they expire within a minute, and when the server refuses them, before a new
///    authorization is asked for. Requests of several threads refused with the same token
///    share one refresh.
///
/// With an authorization server that offers DPoP (RFC 9449), tokens are bound to a key of the
/// connection's own and presented as `Authorization: DPoP` with a fresh proof each time
/// ([`OAuth::dpop`]).
///
/// Without OAuth configured, a refusal is [`super::McpError::Unauthorized`] with the parsed
/// challenge, so a program can run a flow of its own.
///
/// # Secrets
/// Tokens, the client secret and the signing key never show: `Debug` prints them redacted,
/// and every error text of the connection is scrubbed of them as of the credential headers.
///
/// ```no_run
/// use pagent::mcp::{Client, OAuth};
///
/// let client = Client::http("https://mcp.example.com/mcp")
///     .oauth(OAuth::new().client_name("my-cli").authorize_in_browser(|url| {
///         println!("Open {url} to authorize");
///         Ok(())
///     }))
///     .connect()?;
/// # Ok::<(), pagent::mcp::McpError>(())
/// ```
#[derive(Clone)]
pub struct OAuth {
    pub(crate) authorizer: Authorizer,
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret: Option<String>,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) client_name: String,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) scopes: Vec<String>,
    pub(crate) store: Arc<dyn TokenStore>,
    pub(crate) dpop: bool,
}

impl fmt::Debug for OAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let authorizer = match &self.authorizer {
            Authorizer::None => "none",
            Authorizer::Hook { .. } => "hook",
            Authorizer::Loopback { .. } => "loopback",
        };
        f.debug_struct("OAuth")
            .field("authorizer", &authorizer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("client_metadata_url", &self.client_metadata_url)
            .field("client_name", &self.client_name)
            .field(
                "grant",
                &match &self.credentials {
                    None => "authorization_code",
                    Some(Credentials::Secret { .. } | Credentials::Jwt { .. }) => {
                        "client_credentials"
                    }
                    Some(Credentials::Workload { .. }) => "workload_identity",
                    Some(Credentials::Enterprise { .. }) => "enterprise_managed",
                },
            )
            .field("scopes", &self.scopes)
            .field("dpop", &self.dpop)
            .finish_non_exhaustive()
    }
}

impl Default for OAuth {
    fn default() -> OAuth {
        OAuth::new()
    }
}

impl OAuth {
    /// OAuth with nothing configured yet: give it a way to get the user's authorization
    /// ([`OAuth::authorize`], [`OAuth::authorize_in_browser`]) or client credentials.
    #[must_use]
    pub fn new() -> OAuth {
        OAuth {
            authorizer: Authorizer::None,
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            client_name: "pagent".into(),
            credentials: None,
            scopes: Vec::new(),
            store: Arc::new(MemoryStore::default()),
            dpop: true,
        }
    }

    /// The authorization code flow through `hook`: it is given the authorization URL (and
    /// the `redirect_uri` registered for the client) and returns the URL the user's
    /// browser was redirected to, with its query, or why the user did not authorize.
    ///
    /// # Contract
    /// Called on the thread of the request that was refused, while no other request of
    /// the client runs a flow; it may block while the user decides (the token is
    /// cancelled when the request is given up). A panic is caught and fails the flow.
    #[must_use]
    pub fn authorize(
        mut self,
        redirect_uri: impl Into<String>,
        hook: impl Fn(&AuthorizationRequest, &CancelToken) -> Result<String, String>
        + Send
        + Sync
        + 'static,
    ) -> OAuth {
        self.authorizer = Authorizer::Hook {
            hook: Arc::new(
                move |request: &AuthorizationRequest, cancel: &CancelToken| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(request, cancel)))
                        .unwrap_or_else(|_| Err("the authorization hook panicked".into()))
                },
            ),
            redirect_uri: redirect_uri.into(),
        };
        self
    }

    /// The authorization code flow with a loopback redirect (RFC 8252): a listener on
    /// `127.0.0.1` (a port of the system's choosing, `http://127.0.0.1:<port>/callback`)
    /// takes the browser's redirect; `open` is given the authorization URL to show the user
    /// (open a browser, print it). Waits for the redirect at most 5 minutes
    /// ([`OAuth::authorization_timeout`]); a request to another path, or a redirect without
    /// the flow's `state` (another program may send one), is refused there and the wait
    /// goes on. The listener is closed when the flow ends.
    #[must_use]
    pub fn authorize_in_browser(
        mut self,
        open: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
    ) -> OAuth {
        self.authorizer = Authorizer::Loopback {
            open: Arc::new(open),
            timeout: Duration::from_secs(300),
        };
        self
    }

    /// How long [`OAuth::authorize_in_browser`] waits for the browser. Defaults to 5 min.
    #[must_use]
    pub fn authorization_timeout(mut self, timeout: Duration) -> OAuth {
        if let Authorizer::Loopback { timeout: t, .. } = &mut self.authorizer {
            *t = timeout;
        }
        self
    }

    /// A client registered with the authorization server beforehand, with its secret for
    /// a confidential client. Defaults to none: a Client ID Metadata Document or dynamic
    /// registration.
    #[must_use]
    pub fn client(mut self, id: impl Into<String>, secret: Option<&str>) -> OAuth {
        self.client_id = Some(id.into());
        self.client_secret = secret.map(str::to_owned);
        self
    }

    /// The URL of this client's metadata document (an `https` URL serving its JSON), used
    /// as its `client_id` with servers that support Client ID Metadata Documents. Defaults
    /// to none.
    #[must_use]
    pub fn client_metadata_url(mut self, url: impl Into<String>) -> OAuth {
        self.client_metadata_url = Some(url.into());
        self
    }

    /// The `client_name` of a dynamic registration. Defaults to `pagent`.
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> OAuth {
        self.client_name = name.into();
        self
    }

    /// The client credentials grant (machine to machine) with a client secret, instead of
    /// a user's authorization. Defaults to none.
    #[must_use]
    pub fn client_credentials(mut self, id: impl Into<String>, secret: impl Into<String>) -> OAuth {
        self.credentials = Some(Credentials::Secret {
            id: id.into(),
            secret: secret.into(),
        });
        self
    }

    /// The client credentials grant authenticated with a signed JWT (`private_key_jwt`,
    /// RFC 7523): `key_pem` is the client's P-256 private key, PKCS#8 PEM, signing ES256.
    /// Defaults to none.
    #[must_use]
    pub fn client_credentials_jwt(
        mut self,
        id: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> OAuth {
        self.credentials = Some(Credentials::Jwt {
            id: id.into(),
            key_pem: key_pem.into(),
        });
        self
    }

    /// Workload identity federation (SEP-1933): the JWT bearer grant (RFC 7523) with the
    /// identity token of the workload this program runs as, which `assertion` gives (read
    /// from the platform's file or metadata service) each time a token is needed, instead
    /// of a user's authorization. With [`OAuth::client`] for the client the authorization
    /// server knows the workload as. A refusal is [`super::McpError::Auth`], not retried
    /// with another grant. Defaults to none.
    ///
    /// # Contract
    /// Called on the thread of the request that needs a token; a panic fails the grant.
    #[must_use]
    pub fn workload_identity(
        mut self,
        assertion: impl Fn() -> Result<String, String> + Send + Sync + 'static,
    ) -> OAuth {
        self.credentials = Some(Credentials::Workload {
            assertion: caught(assertion),
        });
        self
    }

    /// Enterprise-managed authorization (SEP-990, cross-app access): the user's ID token
    /// of the enterprise's identity provider, which `id_token` gives, is exchanged at the
    /// provider's `idp_token_endpoint` (RFC 8693 token exchange, as `idp_client_id` with
    /// its secret, if any) for an identity assertion grant for this server's authorization
    /// server and resource, which the JWT bearer grant then turns into the token, with
    /// [`OAuth::client`] as the client there. No browser. Defaults to none.
    ///
    /// # Contract
    /// As [`OAuth::workload_identity`]'s.
    #[must_use]
    pub fn enterprise_managed(
        mut self,
        idp_token_endpoint: impl Into<String>,
        idp_client_id: impl Into<String>,
        idp_client_secret: Option<&str>,
        id_token: impl Fn() -> Result<String, String> + Send + Sync + 'static,
    ) -> OAuth {
        self.credentials = Some(Credentials::Enterprise {
            idp_token_endpoint: idp_token_endpoint.into(),
            idp_client_id: idp_client_id.into(),
            idp_client_secret: idp_client_secret.map(str::to_owned),
            id_token: caught(id_token),
        });
        self
    }

    /// Scopes always asked for, besides those the server names. Defaults to none.
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> OAuth {
        self.scopes.push(scope.into());
        self
    }

    /// Whether tokens are asked for bound to a DPoP key (RFC 9449) when the authorization
    /// server offers it (`dpop_signing_alg_values_supported` with `ES256`). Defaults to
    /// true: a key of the connection's own (kept with the tokens), a fresh proof of it with
    /// every token request and every request to the server, and the servers' nonces
    /// (`use_dpop_nonce`) taken up.
    #[must_use]
    pub fn dpop(mut self, on: bool) -> OAuth {
        self.dpop = on;
        self
    }

    /// Where tokens are kept, by the server's resource URL. Defaults to a [`MemoryStore`]
    /// of this `OAuth` (and its clones).
    #[must_use]
    pub fn store(mut self, store: impl TokenStore + 'static) -> OAuth {
        self.store = Arc::new(store);
        self
    }
}

/// One challenge of a `WWW-Authenticate` header (RFC 9110): its scheme and parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    scheme: String,
    params: Vec<(String, String)>,
}

impl Challenge {
    /// The challenges of a `WWW-Authenticate` header value, in order.
    #[must_use]
    pub fn parse_all(header: &str) -> Vec<Challenge> {
        let mut out: Vec<Challenge> = Vec::new();
        let mut rest = header.trim();
        while !rest.is_empty() {
            rest = rest.trim_start_matches([',', ' ', '\t']);
            if rest.is_empty() {
                break;
            }
            // A token: a scheme (followed by a space or the end) or a parameter name.
            let end = rest.find([' ', '\t', ',', '=']).unwrap_or(rest.len());
            let token = &rest[..end];
            let after = rest[end..].trim_start_matches([' ', '\t']);
            if let (Some(value), Some(last)) = (after.strip_prefix('='), out.last_mut()) {
                let value = value.trim_start_matches([' ', '\t']);
                let (text, left) = if let Some(quoted) = value.strip_prefix('"') {
                    let mut text = String::new();
                    let mut chars = quoted.char_indices();
                    let mut left = "";
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '\\' => {
                                if let Some((_, next)) = chars.next() {
                                    text.push(next);
                                }
                            }
                            '"' => {
                                left = &quoted[i + 1..];
                                break;
                            }
                            c => text.push(c),
                        }
                    }
                    (text, left)
                } else {
                    let end = value.find([',', ' ', '\t']).unwrap_or(value.len());
                    (value[..end].to_owned(), &value[end..])
                };
                last.params.push((token.to_ascii_lowercase(), text));
                rest = left;
            } else {
                out.push(Challenge {
                    scheme: token.to_owned(),
                    params: Vec::new(),
                });
                rest = after;
            }
        }
        out
    }

    /// The `Bearer` challenge of a `WWW-Authenticate` header value (or its first).
    #[must_use]
    pub fn parse(header: &str) -> Challenge {
        let all = Challenge::parse_all(header);
        all.iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
            .or(all.first())
            .cloned()
            .unwrap_or_default()
    }

    /// The scheme (`Bearer`), empty when the server sent no challenge.
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The parameter `name` (case-insensitive), unquoted.
    #[must_use]
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every parameter, names in lower case, in order.
    #[must_use]
    pub fn params(&self) -> &[(String, String)] {
        &self.params
    }

    /// `error` (`invalid_token`, `insufficient_scope`...).
    #[must_use]
    pub fn error(&self) -> Option<&str> {
        self.param("error")
    }

    /// `error_description`.
    #[must_use]
    pub fn error_description(&self) -> Option<&str> {
        self.param("error_description")
    }

    /// `scope`: the scopes the request needs, space-separated.
    #[must_use]
    pub fn scope(&self) -> Option<&str> {
        self.param("scope")
    }

    /// `resource_metadata`: the URL of the protected resource metadata (RFC 9728).
    #[must_use]
    pub fn resource_metadata(&self) -> Option<&str> {
        self.param("resource_metadata")
    }

    pub(crate) fn scrub(&mut self, s: &impl Fn(String) -> String) {
        for (_, value) in &mut self.params {
            *value = s(std::mem::take(value));
        }
    }
}

impl fmt::Display for Challenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scheme.is_empty() {
            return f.write_str("no challenge");
        }
        f.write_str(&self.scheme)?;
        for (i, (name, value)) in self.params.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}{name}=\"{}\"", value.replace('"', "\\\""))?;
        }
        Ok(())
    }
}

/// The tokens of one server's resource, and the client they were issued to (a refresh
/// token is good only with it). `Debug` shows the tokens and the client's secret redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Tokens {
    pub(crate) access_token: String,
    pub(crate) refresh_token: Option<String>,
    /// Seconds since the Unix epoch.
    pub(crate) expires_at: Option<u64>,
    pub(crate) scope: Option<String>,
    pub(crate) client: Option<IssuedTo>,
    /// The DPoP key the tokens are bound to (RFC 9449), its PKCS#8 document in base64url:
    /// a secret.
    pub(crate) dpop_key: Option<String>,
}

/// The client that tokens were issued to: what a refresh authenticates as.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct IssuedTo {
    pub(crate) id: String,
    pub(crate) secret: Option<String>,
    /// `client_secret_basic`, `client_secret_post`, `none` or `private_key_jwt`.
    pub(crate) method: String,
    /// The authorization server it is registered with (its issuer): a client is good only
    /// there. `None` for tokens kept before this was.
    pub(crate) issuer: Option<String>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"<redacted>")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("client_id", &self.client.as_ref().map(|c| &c.id))
            .field("dpop_key", &self.dpop_key.as_ref().map(|_| "<redacted>"))
            .field(
                "client_secret",
                &self
                    .client
                    .as_ref()
                    .and_then(|c| c.secret.as_ref())
                    .map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Tokens {
    /// The access token, sent as `Authorization: Bearer`.
    #[must_use]
    pub fn access_token(&self) -> &str {
        &self.access_token
    }

    /// The refresh token, if the server gave one.
    #[must_use]
    pub fn refresh_token(&self) -> Option<&str> {
        self.refresh_token.as_deref()
    }

    /// When the access token expires, if the server said.
    #[must_use]
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at.map(|s| UNIX_EPOCH + Duration::from_secs(s))
    }

    /// The scopes granted, space-separated, if the server said.
    #[must_use]
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// True when the tokens are bound to a DPoP key (RFC 9449): presented as
    /// `Authorization: DPoP` with a proof of the key, which is kept with them.
    #[must_use]
    pub fn dpop_bound(&self) -> bool {
        self.dpop_key.is_some()
    }

    /// The id of the client the tokens were issued to, when known.
    #[must_use]
    pub fn client_id(&self) -> Option<&str> {
        self.client.as_ref().map(|c| c.id.as_str())
    }

    /// True when the access token expires within a minute.
    pub(crate) fn expired(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.expires_at.is_some_and(|at| at <= now + 60)
    }

    /// From a token endpoint's answer; `None` without an `access_token`.
    pub(crate) fn from_response(v: &Value, previous_refresh: Option<&str>) -> Option<Tokens> {
        let access_token = v.get("access_token")?.as_str()?.to_owned();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Some(Tokens {
            access_token,
            refresh_token: v
                .get("refresh_token")
                .and_then(Value::as_str)
                .or(previous_refresh)
                .map(str::to_owned),
            expires_at: v.get("expires_in").and_then(Value::as_u64).map(|s| now + s),
            scope: v.get("scope").and_then(Value::as_str).map(str::to_owned),
            client: None,
            dpop_key: None,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "scope": self.scope,
            "client": self.client.as_ref().map(|c| json!({
                "id": c.id,
                "secret": c.secret,
                "method": c.method,
                "issuer": c.issuer,
            })),
            "dpop_key": self.dpop_key,
        })
    }

    fn from_json(v: &Value) -> Option<Tokens> {
        let text = |v: &Value, name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
        let client = match v.get("client") {
            None | Some(Value::Null) => None,
            Some(c) => Some(IssuedTo {
                id: text(c, "id")?,
                secret: text(c, "secret"),
                method: text(c, "method")?,
                issuer: text(c, "issuer"),
            }),
        };
        Some(Tokens {
            access_token: text(v, "access_token")?,
            refresh_token: text(v, "refresh_token"),
            expires_at: v.get("expires_at").and_then(Value::as_u64),
            scope: text(v, "scope"),
            client,
            dpop_key: text(v, "dpop_key"),
        })
    }
}

/// Where tokens are kept between requests (and, for a [`FileStore`], between runs), by the
/// server's resource URL.
///
/// # Contract
/// Called on the thread of a request while it authorizes (and `load` once as the client
/// connects), with no lock of the client held; it should return quickly. An error is the
/// reason, as text that shows no token: [`super::McpError::TokenStore`] of the connect (a
/// `load`) or of the request that got the tokens (a `save`; the connection keeps them and
/// goes on with them).
pub trait TokenStore: Send + Sync {
    /// The tokens kept for `resource`, if any.
    ///
    /// # Errors
    /// Why what is kept cannot be read (a corrupt file...).
    fn load(&self, resource: &str) -> Result<Option<Tokens>, String>;
    /// Keeps `tokens` for `resource` (replacing what was kept).
    ///
    /// # Errors
    /// Why they could not be kept.
    fn save(&self, resource: &str, tokens: &Tokens) -> Result<(), String>;
}

/// Tokens kept in memory: the default [`TokenStore`].
#[derive(Debug, Default)]
pub struct MemoryStore {
    tokens: Mutex<HashMap<String, Tokens>>,
}

impl TokenStore for MemoryStore {
    fn load(&self, resource: &str) -> Result<Option<Tokens>, String> {
        Ok(self.tokens.lock().get(resource).cloned())
    }

    fn save(&self, resource: &str, tokens: &Tokens) -> Result<(), String> {
        self.tokens
            .lock()
            .insert(resource.to_owned(), tokens.clone());
        Ok(())
    }
}

/// Tokens kept in a JSON file (for a CLI between runs), with the client each was issued to,
/// by resource URL. Written whole through a temporary file beside it that is renamed over
/// it; on unix both are made readable and writable by their owner only (mode `0600`). A
/// file that is not this store's JSON is an error, never read as empty or written over.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileStore {
    /// A store in the file at `path` (made when tokens are first saved; its directory must
    /// exist).
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// Everything kept; empty when there is no file yet.
    fn read(&self) -> Result<serde_json::Map<String, Value>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(e) => return Err(format!("cannot read {}: {e}", self.path.display())),
        };
        // The parser's message says where, never what: no token is quoted.
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(all)) => Ok(all),
            Ok(_) => Err(format!("{} is not a JSON object", self.path.display())),
            Err(e) => Err(format!("{} is not JSON ({e})", self.path.display())),
        }
    }
}

impl TokenStore for FileStore {
    fn load(&self, resource: &str) -> Result<Option<Tokens>, String> {
        let _held = self.lock.lock();
        match self.read()?.get(resource) {
            None => Ok(None),
            Some(v) => Tokens::from_json(v).map(Some).ok_or_else(|| {
                format!(
                    "the tokens {} keeps for {resource} lack an access token or a client's id",
                    self.path.display()
                )
            }),
        }
    }

    fn save(&self, resource: &str, tokens: &Tokens) -> Result<(), String> {
        let _held = self.lock.lock();
        let mut all = self.read()?;
        all.insert(resource.to_owned(), tokens.to_json());
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let written = (|| -> std::io::Result<()> {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = options.open(&tmp)?;
            // A temporary file left by an earlier run keeps its mode: set it.
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            std::io::Write::write_all(&mut file, &serde_json::to_vec(&Value::Object(all))?)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", self.path.display())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_parsed_with_quoted_and_bare_parameters() {
        let c = Challenge::parse(
            r#"Basic realm="x", Bearer error="insufficient_scope", scope="a b", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp", error_description="say \"no\"""#,
        );
        assert_eq!(c.scheme(), "Bearer");
        assert_eq!(c.error(), Some("insufficient_scope"));
        assert_eq!(c.scope(), Some("a b"));
        assert_eq!(
            c.resource_metadata(),
            Some("http://h/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.error_description(), Some("say \"no\""));
        let bare = Challenge::parse("Bearer realm=mcp, scope=read");
        assert_eq!(bare.param("REALM"), Some("mcp"));
        assert_eq!(bare.scope(), Some("read"));
        assert_eq!(Challenge::parse("Bearer").scheme(), "Bearer");
        assert_eq!(Challenge::parse("").scheme(), "");
        assert_eq!(bare.to_string(), r#"Bearer realm="mcp", scope="read""#);
    }

    #[test]
    fn tokens_never_show_in_debug() {
        let t = Tokens {
            access_token: "at-SECRET".into(),
            refresh_token: Some("rt-SECRET".into()),
            expires_at: None,
            scope: None,
            client: Some(IssuedTo {
                id: "client-1".into(),
                secret: Some("cs-SECRET".into()),
                method: "client_secret_basic".into(),
                issuer: Some("http://as".into()),
            }),
            dpop_key: Some("dk-SECRET".into()),
        };
        assert!(!format!("{t:?}").contains("SECRET"));
        assert!(format!("{t:?}").contains("client-1"));
        let o = OAuth::new().client("id", Some("cs-SECRET"));
        assert!(!format!("{o:?}").contains("SECRET"));
    }

    #[test]
    fn a_file_store_keeps_tokens_between_instances() {
        let path = std::env::temp_dir().join(format!("pagent-tokens-{}.json", std::process::id()));
        let t = Tokens {
            access_token: "a".into(),
            refresh_token: Some("r".into()),
            expires_at: Some(5),
            scope: Some("s".into()),
            client: Some(IssuedTo {
                id: "c".into(),
                secret: None,
                method: "none".into(),
                issuer: Some("http://as".into()),
            }),
            dpop_key: Some("k".into()),
        };
        let untold = Tokens {
            client: None,
            ..t.clone()
        };
        assert_eq!(FileStore::new(&path).load("http://h/mcp"), Ok(None));
        FileStore::new(&path).save("http://h/mcp", &t).unwrap();
        FileStore::new(&path)
            .save("http://h/other", &untold)
            .unwrap();
        assert_eq!(FileStore::new(&path).load("http://h/mcp"), Ok(Some(t)));
        assert_eq!(
            FileStore::new(&path).load("http://h/other"),
            Ok(Some(untold))
        );
        assert_eq!(FileStore::new(&path).load("http://other/mcp"), Ok(None));
        let _ = std::fs::remove_file(&path);
    }
}
