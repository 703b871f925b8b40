//! OAuth 2.1 against a real OAuth-protected MCP server: the official TypeScript SDK's example
//! server (`simpleStreamableHttp.js --oauth --oauth-strict`, shipped in the npm package
//! `@modelcontextprotocol/sdk` that `.ci/mcp.sh` installs, pinned by
//! tests/mcp/package-lock.json) with its own authorization server, through the whole
//! authorization-code flow: the browser's part is played by the test (it fetches the
//! authorization URL and takes the redirect to pagent's loopback listener), everything else
//! is pagent's and the SDK's. Every request both servers answered is traced
//! (tests/mcp/http_trace.cjs) and the whole sequence asserted.

use pagent::mcp::{FileStore, MemoryStore, OAuth, TokenStore, Tokens};

use super::scripted::{Scripted, Step, json_reply, plain};

use super::*;

/// A port free now on the loopback interface (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The TypeScript SDK's example server with OAuth, and its authorization server, on free
/// loopback ports; killed and reaped on drop.
struct SdkOAuthServer {
    child: Child,
    mcp_port: u16,
    auth_port: u16,
    trace: PathBuf,
}

impl SdkOAuthServer {
    fn start(dir: &Path) -> SdkOAuthServer {
        let (mcp_port, auth_port) = (free_port(), free_port());
        let trace = temp_dir("oauth-trace").join("trace.jsonl");
        let example = dir.join(
            "node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js",
        );
        let preload = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/http_trace.cjs");
        let child = Command::new("node")
            .arg("--require")
            .arg(&preload)
            .arg(&example)
            .args(["--oauth", "--oauth-strict"])
            .env("MCP_PORT", mcp_port.to_string())
            .env("MCP_AUTH_PORT", auth_port.to_string())
            .env("PAGENT_HTTP_TRACE", &trace)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = SdkOAuthServer {
            child,
            mcp_port,
            auth_port,
            trace,
        };
        let until = Instant::now() + Duration::from_secs(30);
        for port in [mcp_port, auth_port] {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < until, "the SDK's servers did not start");
                assert!(
                    server.child.try_wait().unwrap().is_none(),
                    "the SDK's example server exited"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        server
    }

    fn url(&self) -> String {
        format!("http://localhost:{}/mcp", self.mcp_port)
    }

    /// Each request answered so far, in order.
    fn traced(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.trace)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The requests answered, once one of `method` to `path` is among them (a server
    /// writes its line when the answer is sent, which may be after the client read it),
    /// waiting up to 10 s.
    fn traced_until(&self, method: &str, path: &str) -> Vec<Value> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let traced = self.traced();
            if Instant::now() >= until
                || traced
                    .iter()
                    .any(|t| t["method"] == method && t["path"] == path)
            {
                return traced;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for SdkOAuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.trace.parent().unwrap());
    }
}

/// What the test's browser did: the authorization URL it was given, the authorization
/// server's redirect, and what pagent's loopback listener answered it.
#[derive(Debug, Default)]
struct Browsed {
    url: String,
    status: u16,
    location: String,
    landed: (u16, String),
}

/// The browser of a user who authorizes at once: given the URL (on a thread of its own,
/// as a browser opened by the program would be), it fetches it, follows nothing, and takes
/// the authorization server's redirect to where it points (pagent's loopback listener).
fn browser(log: Arc<Mutex<Vec<Browsed>>>) -> impl Fn(&str) -> Result<(), String> + Send + Sync {
    move |url: &str| {
        let (url, log) = (url.to_owned(), log.clone());
        std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .max_redirects(0)
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(20)))
                .build()
                .into();
            let mut seen = Browsed {
                url: url.clone(),
                ..Browsed::default()
            };
            if let Ok(reply) = agent.get(&url).call() {
                seen.status = reply.status().as_u16();
                seen.location = reply
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
            }
            if !seen.location.is_empty()
                && let Ok(mut reply) = agent.get(&seen.location).call()
            {
                let status = reply.status().as_u16();
                seen.landed = (
                    status,
                    reply.body_mut().read_to_string().unwrap_or_default(),
                );
            }
            log.lock().unwrap().push(seen);
        });
        Ok(())
    }
}

/// The parameters of a URL's query, decoded.
fn query(url: &str) -> Vec<(String, String)> {
    let q = url.split_once('?').map_or("", |(_, q)| q);
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// A store that keeps what it is given in memory, and a log of each save.
#[derive(Clone, Default)]
struct Recording {
    kept: Arc<MemoryStore>,
    saved: Arc<Mutex<Vec<(String, Tokens)>>>,
}

impl TokenStore for Recording {
    fn load(&self, resource: &str) -> Result<Option<Tokens>, String> {
        self.kept.load(resource)
    }

    fn save(&self, resource: &str, tokens: &Tokens) -> Result<(), String> {
        self.saved
            .lock()
            .unwrap()
            .push((resource.to_owned(), tokens.clone()));
        self.kept.save(resource, tokens)
    }
}

/// `base64url(SHA-256(verifier))`: the PKCE S256 challenge of a verifier (RFC 7636).
fn s256(verifier: &str) -> String {
    use base64::Engine as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

#[test]
fn the_typescript_sdks_oauth_example_server_is_authorized_through_the_whole_code_flow() {
    let Some(dir) = installed() else { return };
    let server = SdkOAuthServer::start(&dir);
    let browsed = Arc::new(Mutex::new(Vec::new()));
    let store = Recording::default();
    let client = Client::http(server.url())
        .oauth(
            OAuth::new()
                .client_name("pagent-test")
                .store(store.clone())
                .authorize_in_browser(browser(browsed.clone()))
                .authorization_timeout(Duration::from_secs(30)),
        )
        .connect()
        .unwrap();
    let tools = client.tools().unwrap();
    let hello = call(find(&tools, "greet"), json!({"name": "Ann"})).unwrap();
    assert_eq!(hello.to_text(), "Hello, Ann!");
    drop(tools);
    client.close();

    // The browser: sent once to the authorization server, which redirected it at once to
    // pagent's listener, which took the redirect.
    let browsed = std::mem::take(&mut *browsed.lock().unwrap());
    assert_eq!(browsed.len(), 1, "{browsed:?}");
    let browsed = &browsed[0];
    let asked = query(&browsed.url);
    let param = |name: &str| -> String {
        asked
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {name} in {}", browsed.url))
    };
    let redirect_uri = param("redirect_uri");
    assert!(
        redirect_uri.starts_with("http://127.0.0.1:") && redirect_uri.ends_with("/callback"),
        "{redirect_uri}"
    );
    assert_eq!(browsed.status, 302);
    let back = query(&browsed.location);
    let code = back.iter().find(|(n, _)| n == "code").unwrap().1.clone();
    assert_eq!(
        browsed.location,
        format!("{redirect_uri}?code={code}&state={}", param("state"))
    );
    assert_eq!(
        browsed.landed,
        (200, "Authorized. You may close this window.".into())
    );

    // The tokens, kept for the server's resource.
    let saved = store.saved.lock().unwrap().clone();
    assert_eq!(saved.len(), 1);
    let (resource, tokens) = &saved[0];
    assert_eq!(resource, &server.url());
    assert_eq!(tokens.scope(), Some("mcp:tools"));
    assert_eq!(tokens.refresh_token(), None);
    let left = tokens
        .expires_at()
        .unwrap()
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(left > Duration::from_secs(3000), "{left:?}");

    // Every request either server answered, in order. Left out: the server's GET stream
    // (its end races the close) and the MCP server's introspection of each token it is
    // sent (checked below).
    let traced = server.traced_until("DELETE", "/mcp");
    let introspected: Vec<&Value> = traced
        .iter()
        .filter(|t| t["path"] == "/introspect")
        .collect();
    let steps: Vec<&Value> = traced
        .iter()
        .filter(|t| t["path"] != "/introspect" && !(t["method"] == "GET" && t["path"] == "/mcp"))
        .collect();
    let seen: Vec<String> = steps
        .iter()
        .map(|t| {
            let on = if t["port"] == server.mcp_port {
                "mcp"
            } else {
                assert_eq!(t["port"], server.auth_port, "{t}");
                "auth"
            };
            let rpc = t["body"]["method"].as_str().filter(|_| on == "mcp");
            format!(
                "{on} {} {}{} {}{}",
                t["method"].as_str().unwrap(),
                t["path"].as_str().unwrap(),
                rpc.map(|m| format!(" {m}")).unwrap_or_default(),
                t["status"],
                if t["bearer"] == true { " (bearer)" } else { "" },
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            // Refused: no token.
            "mcp POST /mcp server/discover 401",
            // Discovery: the resource's metadata, then its authorization server's.
            "mcp GET /.well-known/oauth-protected-resource/mcp 200",
            "auth GET /.well-known/oauth-authorization-server 200",
            // Dynamic registration, the user's authorization (the browser), the token.
            "auth POST /register 201",
            "auth GET /authorize 302",
            "auth POST /token 200",
            // The same request again with the token: the server speaks the session era.
            "mcp POST /mcp server/discover 400 (bearer)",
            "mcp POST /mcp initialize 200 (bearer)",
            "mcp POST /mcp notifications/initialized 202 (bearer)",
            "mcp POST /mcp tools/list 200 (bearer)",
            "mcp POST /mcp tools/call 200 (bearer)",
            "mcp DELETE /mcp 200 (bearer)",
        ]
    );
    let body = |i: usize| &steps[i]["body"];
    // The registration: a native public client with the loopback redirect.
    assert_eq!(
        body(3),
        &json!({
            "client_name": "pagent-test",
            "application_type": "native",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
    );
    // The authorization request: PKCE S256, the resource indicator (RFC 8707), the
    // resource's scope.
    let client_id = body(5)["client_id"].as_str().unwrap().to_owned();
    let mut names: Vec<&str> = asked.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "client_id",
            "code_challenge",
            "code_challenge_method",
            "redirect_uri",
            "resource",
            "response_type",
            "scope",
            "state"
        ]
    );
    assert_eq!(param("response_type"), "code");
    assert_eq!(param("client_id"), client_id);
    assert_eq!(param("code_challenge_method"), "S256");
    assert_eq!(param("resource"), server.url());
    assert_eq!(param("scope"), "mcp:tools");
    assert!(param("state").len() >= 16);
    // The token request: the code with its verifier, whose challenge went out before.
    let verifier = body(5)["code_verifier"].as_str().unwrap();
    assert!(verifier.len() >= 43, "{verifier}");
    assert_eq!(s256(verifier), param("code_challenge"));
    assert_eq!(
        body(5),
        &json!({
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "resource": server.url(),
            "client_id": client_id,
        })
    );
    // The MCP server checked the token it was sent with each request (the GET stream's
    // too), and that token is the one the flow got.
    assert!(introspected.len() >= 6, "{introspected:?}");
    for t in introspected {
        assert_eq!(t["body"], json!({"token": tokens.access_token()}));
        assert_eq!(t["status"], 200);
    }
}

// ---------------------------------------------------------------------------------------
// Against a loopback authorization server of the test's own: refresh, the loopback
// listener, the file store, redaction.

/// What the test's authorization server knows and does.
#[derive(Default)]
struct Issuer {
    /// Access tokens the MCP server takes.
    valid: Vec<String>,
    /// Refresh tokens the token endpoint takes.
    refreshable: Vec<String>,
    issued: usize,
    /// `expires_in` of the first token issued (then an hour).
    first_expires_in: Option<u64>,
    /// The registration's answer gives a secret (`client_secret_post`).
    confidential: bool,
    /// The token endpoint refuses the code, saying back every field it was sent.
    echo_refusal: bool,
    /// The MCP server answers a valid token with a 500 that says the header back.
    echo_header: bool,
    /// The MCP server holds each refusal until this many requests were refused (at most
    /// 5 s), so that they are all in flight at once.
    gate: usize,
    refused: usize,
    /// DPoP (RFC 9449): offered, required at the token endpoint, and the tokens bound to
    /// the key that proved (the key's `x`, by token).
    dpop: bool,
    bound: Vec<(String, String)>,
    /// The resource names a second authorization server (issuer `{base}/as2`, its
    /// endpoints under `/as2`, its client `client-2`).
    moved: bool,
}

/// The key (`x` of its JWK) of a valid DPoP proof for `method` and `url` (with the hash of
/// `token` when one is presented); `None` for no proof or a bad one.
fn proved(proof: Option<&str>, method: &str, url: &str, token: Option<&str>) -> Option<String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let proof = proof?;
    let mut parts = proof.split('.');
    let header: Value = serde_json::from_slice(&b64.decode(parts.next()?).ok()?).ok()?;
    let claims: Value = serde_json::from_slice(&b64.decode(parts.next()?).ok()?).ok()?;
    let signature = b64.decode(parts.next()?).ok()?;
    let jwk = &header["jwk"];
    let point = [
        vec![4],
        b64.decode(jwk["x"].as_str()?).ok()?,
        b64.decode(jwk["y"].as_str()?).ok()?,
    ]
    .concat();
    let (input, _) = proof.rsplit_once('.')?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
        .verify(input.as_bytes(), &signature)
        .ok()?;
    let ath = token
        .map(|t| b64.encode(ring::digest::digest(&ring::digest::SHA256, t.as_bytes()).as_ref()));
    (header["typ"] == "dpop+jwt"
        && claims["htm"] == method
        && claims["htu"] == url
        && claims["ath"].as_str().map(str::to_owned) == ath)
        .then(|| jwk["x"].as_str().unwrap_or("").to_owned())
}

/// A long token, so that every run of it counts as a secret.
fn token(kind: &str, n: usize) -> String {
    format!("{kind}-{n}-Zq7Xw3Vb9Ty2Rk5Lm8")
}

/// The fields of a form.
fn form(text: &str) -> Vec<(String, String)> {
    query(&format!("?{text}"))
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// A session-era MCP server ([`scripted::plain`]) at `/mcp` that takes only the tokens its
/// authorization server (the same origin) issued: protected resource and authorization
/// server metadata, dynamic registration, a token endpoint for codes and refresh tokens
/// (refresh tokens rotate).
fn guarded(issuer: &Arc<Mutex<Issuer>>) -> Scripted {
    let issuer = issuer.clone();
    Scripted::start(move |seen| {
        let base = format!("http://{}", seen.header("host").unwrap_or(""));
        let full = seen.path.split('?').next().unwrap_or("");
        // The second authorization server's requests, as the first's.
        let (second, path) = match full.strip_prefix("/as2") {
            Some(rest) if rest.starts_with('/') => (true, rest),
            _ if full == "/.well-known/oauth-authorization-server/as2" => {
                (true, "/.well-known/oauth-authorization-server")
            }
            _ => (false, full),
        };
        let at = if second {
            format!("{base}/as2")
        } else {
            base.clone()
        };
        let mut st = issuer.lock().unwrap();
        match (seen.method.as_str(), path) {
            ("GET", "/.well-known/oauth-protected-resource/mcp") => json_reply(
                200,
                &json!({"resource": format!("{base}/mcp"),
                        "authorization_servers": [if st.moved { format!("{base}/as2") } else { base.clone() }],
                        "scopes_supported": ["read"]}),
            ),
            ("GET", "/.well-known/oauth-authorization-server") => {
                let mut meta = json!({"issuer": at,
                        "authorization_endpoint": format!("{at}/authorize"),
                        "token_endpoint": format!("{at}/token"),
                        "registration_endpoint": format!("{at}/register"),
                        "code_challenge_methods_supported": ["S256"],
                        "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
                        "scopes_supported": ["read", "offline_access"]});
                if st.dpop {
                    meta["dpop_signing_alg_values_supported"] = json!(["ES256"]);
                }
                json_reply(200, &meta)
            }
            ("POST", "/register") if st.confidential => json_reply(
                201,
                &json!({"client_id": "client-1", "client_secret": token("cs", 1),
                        "token_endpoint_auth_method": "client_secret_post"}),
            ),
            ("POST", "/register") => json_reply(
                201,
                &json!({"client_id": if second { "client-2" } else { "client-1" },
                        "token_endpoint_auth_method": "none"}),
            ),
            ("POST", "/token") => {
                let fields = form(&seen.text);
                let grant = field(&fields, "grant_type").unwrap_or("");
                let refresh = field(&fields, "refresh_token").unwrap_or("");
                if st.echo_refusal {
                    return json_reply(
                        400,
                        &json!({"error": "invalid_grant",
                                "error_description": format!("refused: {}", seen.text)}),
                    );
                }
                let assertion = field(&fields, "assertion").unwrap_or("");
                if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer"
                    && !assertion.starts_with("workload-")
                {
                    return json_reply(
                        400,
                        &json!({"error": "invalid_grant",
                                "error_description": format!("{assertion} is not trusted")}),
                    );
                }
                if grant == "refresh_token" && !st.refreshable.iter().any(|r| r == refresh) {
                    return json_reply(
                        400,
                        &json!({"error": "invalid_grant",
                                "error_description": format!("{refresh} is not known")}),
                    );
                }
                let key = proved(seen.header("dpop"), "POST", &format!("{base}/token"), None);
                if st.dpop && key.is_none() {
                    return json_reply(400, &json!({"error": "invalid_dpop_proof"}));
                }
                st.refreshable.retain(|r| r != refresh);
                st.issued += 1;
                let n = st.issued;
                if let Some(key) = key {
                    st.bound.push((token("at", n), key));
                }
                let expires_in = match st.first_expires_in {
                    Some(s) if n == 1 => s,
                    _ => 3600,
                };
                st.valid.push(token("at", n));
                st.refreshable.push(token("rt", n));
                json_reply(
                    200,
                    &json!({"access_token": token("at", n),
                            "token_type": if st.dpop { "DPoP" } else { "Bearer" },
                            "refresh_token": token("rt", n), "expires_in": expires_in,
                            "scope": "read offline_access"}),
                )
            }
            (_, "/mcp") => {
                let scheme = if st.dpop { "DPoP " } else { "Bearer " };
                let bearer = seen
                    .header("authorization")
                    .and_then(|a| a.strip_prefix(scheme))
                    .unwrap_or("");
                // A DPoP-bound token goes with a proof of its key.
                let held = !st.dpop
                    || st.bound.iter().any(|(t, key)| {
                        t == bearer
                            && proved(
                                seen.header("dpop"),
                                &seen.method,
                                &format!("{base}/mcp"),
                                Some(bearer),
                            )
                            .as_ref()
                                == Some(key)
                    });
                if !held || !st.valid.iter().any(|t| t == bearer) {
                    let challenge = format!(
                        r#"Bearer error="invalid_token", resource_metadata="{base}/.well-known/oauth-protected-resource/mcp""#
                    );
                    st.refused += 1;
                    let gate = st.gate;
                    drop(st);
                    let until = Instant::now() + Duration::from_secs(5);
                    while issuer.lock().unwrap().refused < gate && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    return vec![Step::Head(401, vec![("www-authenticate", challenge)])];
                }
                if st.echo_header && seen.rpc() == "ping" {
                    return vec![
                        Step::Head(500, vec![("content-type", "text/plain".into())]),
                        Step::Data(format!("no: authorization: Bearer {bearer}")),
                    ];
                }
                plain(seen)
            }
            _ => vec![Step::Head(404, vec![])],
        }
    })
}

/// Each request the server saw, in one line: the method, the path, the JSON-RPC method or
/// the grant, and the token it came with.
fn flow_lines(server: &Scripted, n: usize) -> Vec<String> {
    server
        .wait_seen(n)
        .iter()
        .map(|s| {
            let path = s.path.split('?').next().unwrap_or("").to_owned();
            let what = if path.ends_with("/token") {
                let fields = form(&s.text);
                let mut what = field(&fields, "grant_type").unwrap_or("").to_owned();
                if let Some(r) = field(&fields, "refresh_token") {
                    what.push_str(&format!(" {r}"));
                }
                what
            } else {
                s.rpc().to_owned()
            };
            let bearer = s
                .header("authorization")
                .and_then(|a| a.strip_prefix("Bearer ").or(a.strip_prefix("DPoP ")))
                .map(|t| format!(" [{}]", t.split('-').take(2).collect::<Vec<_>>().join("-")))
                .unwrap_or_default();
            format!("{} {path} {what}{bearer}", s.method)
                .replace("  ", " ")
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// OAuth whose user authorizes at once (the hook makes the redirect), counting the times
/// it is asked.
fn authorizing(asked: &Arc<AtomicUsize>) -> OAuth {
    let asked = asked.clone();
    OAuth::new().authorize("http://127.0.0.1:9/callback", move |request, _| {
        asked.fetch_add(1, Ordering::SeqCst);
        let state = query(&request.url)
            .into_iter()
            .find(|(n, _)| n == "state")
            .map(|(_, v)| v)
            .unwrap_or_default();
        Ok(format!(
            "{}?code=code-1&state={state}",
            request.redirect_uri
        ))
    })
}

/// What a first connect sends: refused, discovery, registration, the code's token, the
/// request again with it.
/// A session-era client of `server`'s `/mcp`, authorized by `oauth`.
fn guarded_client(server: &Scripted, oauth: OAuth) -> pagent::mcp::ClientBuilder {
    Client::http(format!("{}/mcp", server.url))
        .era(Era::Session)
        .oauth(oauth)
}

fn first_connect() -> Vec<String> {
    [
        "POST /mcp initialize",
        "GET /.well-known/oauth-protected-resource/mcp",
        "GET /.well-known/oauth-authorization-server",
        "POST /register",
        "POST /token authorization_code",
        "POST /mcp initialize [at-1]",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn lines_of(rows: &[&str]) -> Vec<String> {
    rows.iter().map(|r| (*r).to_owned()).collect()
}

#[test]
fn an_expired_token_is_refreshed_before_the_next_request_which_carries_the_new_one() {
    let issuer = Arc::new(Mutex::new(Issuer {
        // Within the minute the client counts as expired.
        first_expires_in: Some(30),
        ..Issuer::default()
    }));
    let server = guarded(&issuer);
    let asked = Arc::new(AtomicUsize::new(0));
    let client = guarded_client(&server, authorizing(&asked))
        .connect()
        .unwrap();
    client.ping().unwrap();
    client.close();
    assert_eq!(
        flow_lines(&server, 11),
        [
            first_connect(),
            lines_of(&[
                // The next request finds the token expired: refreshed first, as the
                // client it was issued to, and the new one sent.
                &format!("POST /token refresh_token {}", token("rt", 1)),
                "POST /mcp notifications/initialized [at-2]",
                "GET /mcp [at-2]",
                "POST /mcp ping [at-2]",
                "DELETE /mcp [at-2]",
            ]),
        ]
        .concat()
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let refresh = server
        .seen()
        .into_iter()
        .find(|s| s.text.contains("grant_type=refresh_token"))
        .unwrap();
    let fields = form(&refresh.text);
    assert_eq!(field(&fields, "client_id"), Some("client-1"));
    assert_eq!(
        field(&fields, "resource"),
        Some(format!("{}/mcp", server.url).as_str())
    );
}

#[test]
fn a_token_refused_on_a_live_connection_is_refreshed_once_for_two_threads_then_authorized_anew() {
    let issuer = Arc::new(Mutex::new(Issuer::default()));
    let server = guarded(&issuer);
    let asked = Arc::new(AtomicUsize::new(0));
    let client = guarded_client(&server, authorizing(&asked))
        .connect()
        .unwrap();
    client.ping().unwrap();
    let before = server.seen().len();
    // The server forgets the access token: two threads' requests are refused with it,
    // both before either gets a new one.
    {
        let mut st = issuer.lock().unwrap();
        st.valid.clear();
        st.refused = 0;
        st.gate = 2;
    }
    std::thread::scope(|s| {
        let pings: Vec<_> = (0..2).map(|_| s.spawn(|| client.ping())).collect();
        for ping in pings {
            ping.join().unwrap().unwrap();
        }
    });
    let mut after: Vec<String> = flow_lines(&server, before + 6)[before..].to_vec();
    after.sort();
    // Each ping refused once; the resource's metadata read again (it names the same
    // authorization server) and one refresh for both; each sent again with the new token.
    assert_eq!(
        after,
        [
            "GET /.well-known/oauth-protected-resource/mcp",
            "POST /mcp ping [at-1]",
            "POST /mcp ping [at-1]",
            "POST /mcp ping [at-2]",
            "POST /mcp ping [at-2]",
            &format!("POST /token refresh_token {}", token("rt", 1)),
        ]
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1, "no new authorization");
    // Now the refresh token is refused too: the user is asked again.
    let before = server.seen().len();
    {
        let mut st = issuer.lock().unwrap();
        st.valid.clear();
        st.refreshable.clear();
        st.gate = 0;
    }
    client.ping().unwrap();
    assert_eq!(
        flow_lines(&server, before + 5)[before..],
        [
            "POST /mcp ping [at-2]",
            "GET /.well-known/oauth-protected-resource/mcp",
            &format!("POST /token refresh_token {}", token("rt", 2)),
            "POST /token authorization_code",
            "POST /mcp ping [at-3]",
        ]
    );
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    client.close();
}

/// The browser of a user who authorizes at once, on another program's behalf too: before
/// the real redirect, pagent's listener gets a request for another path and a redirect
/// with another `state`. Each status the listener answered is logged.
fn crowded_browser(
    statuses: Arc<Mutex<Vec<u16>>>,
    listener: Arc<Mutex<String>>,
) -> impl Fn(&str) -> Result<(), String> + Send + Sync {
    move |url: &str| {
        let (url, statuses, listener) = (url.to_owned(), statuses.clone(), listener.clone());
        std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .max_redirects(0)
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .into();
            let asked = query(&url);
            let param = |name: &str| field(&asked, name).unwrap_or("").to_owned();
            let redirect = param("redirect_uri");
            *listener.lock().unwrap() = redirect.clone();
            let origin = redirect.trim_end_matches("/callback").to_owned();
            for target in [
                format!("{origin}/favicon.ico"),
                format!("{redirect}?code=stolen&state=not-{}", param("state")),
                format!("{redirect}?code=stolen"),
                format!("{redirect}?code=code-1&state={}", param("state")),
            ] {
                let status = agent.get(&target).call().map_or(0, |r| r.status().as_u16());
                statuses.lock().unwrap().push(status);
            }
        });
        Ok(())
    }
}

#[test]
fn the_loopback_listener_refuses_other_requests_and_states_and_takes_the_redirect() {
    let issuer = Arc::new(Mutex::new(Issuer::default()));
    let server = guarded(&issuer);
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let listener = Arc::new(Mutex::new(String::new()));
    let client = guarded_client(
        &server,
        OAuth::new()
            .authorize_in_browser(crowded_browser(statuses.clone(), listener.clone()))
            .authorization_timeout(Duration::from_secs(20)),
    )
    .connect()
    .unwrap();
    client.ping().unwrap();
    client.close();
    assert_eq!(*statuses.lock().unwrap(), [404, 400, 400, 200]);
    // The code that came with the right state is the one exchanged.
    let exchanged = server
        .seen()
        .into_iter()
        .find(|s| s.text.contains("grant_type=authorization_code"))
        .unwrap();
    let fields = form(&exchanged.text);
    assert_eq!(field(&fields, "code"), Some("code-1"));
    let redirect = listener.lock().unwrap().clone();
    assert_eq!(field(&fields, "redirect_uri"), Some(redirect.as_str()));
    // Registered with that redirect, on the loopback interface; nothing listens there now.
    let registered = server
        .seen()
        .into_iter()
        .find(|s| s.path == "/register")
        .unwrap();
    assert_eq!(registered.body["redirect_uris"], json!([redirect]));
    let port: u16 = redirect
        .strip_prefix("http://127.0.0.1:")
        .and_then(|r| r.strip_suffix("/callback"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn the_loopback_listener_gives_up_when_no_redirect_comes_in_time() {
    let issuer = Arc::new(Mutex::new(Issuer::default()));
    let server = guarded(&issuer);
    let shown = Arc::new(Mutex::new(Vec::new()));
    let log = shown.clone();
    let started = Instant::now();
    let err = guarded_client(
        &server,
        OAuth::new()
            .authorize_in_browser(move |url| {
                log.lock().unwrap().push(url.to_owned());
                Ok(())
            })
            .authorization_timeout(Duration::from_millis(300)),
    )
    .connect()
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(
        err,
        McpError::Auth(
            "the user's authorization was not obtained: no redirect came within 300ms".into()
        )
    );
    assert_eq!(shown.lock().unwrap().len(), 1);
    // A program's `open` that fails fails the flow with its reason, without waiting.
    let err = guarded_client(
        &server,
        OAuth::new().authorize_in_browser(|_| Err("no browser here".into())),
    )
    .connect()
    .unwrap_err();
    assert_eq!(
        err,
        McpError::Auth("the user's authorization was not obtained: no browser here".into())
    );
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A guarded server and a `FileStore` in a fresh directory, for runs one after another.
struct Runs {
    issuer: Arc<Mutex<Issuer>>,
    server: Scripted,
    dir: PathBuf,
    path: PathBuf,
    url: String,
    asked: Arc<AtomicUsize>,
}

impl Runs {
    fn new(issuer: Issuer, name: &str) -> Runs {
        let issuer = Arc::new(Mutex::new(issuer));
        let server = guarded(&issuer);
        let dir = temp_dir(name);
        let url = format!("{}/mcp", server.url);
        Runs {
            issuer,
            server,
            path: dir.join("tokens.json"),
            dir,
            url,
            asked: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A run's client, its tokens in the file.
    fn connect(&self) -> Client {
        Client::http(&self.url)
            .era(Era::Session)
            .oauth(authorizing(&self.asked).store(FileStore::new(&self.path)))
            .connect()
            .unwrap()
    }

    /// A first run: connect, ping, close; the tokens it left in the file.
    fn first(&self) -> Tokens {
        let client = self.connect();
        client.ping().unwrap();
        client.close();
        FileStore::new(&self.path).load(&self.url).unwrap().unwrap()
    }
}

impl Drop for Runs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn tokens_in_a_file_store_survive_a_reconnect_and_are_refreshed_as_the_client_kept_with_them() {
    let runs = Runs::new(Issuer::default(), "oauth-store");
    let (server, path, url, asked) = (&runs.server, &runs.path, &runs.url, &runs.asked);
    let kept = runs.first();
    #[cfg(unix)]
    assert_eq!(mode(path), 0o600, "the owner's only");
    assert_eq!(kept.access_token(), token("at", 1));
    assert_eq!(kept.client_id(), Some("client-1"));
    let before = server.seen().len();
    // Another run: the kept token goes with the first request; nobody is asked.
    let second = runs.connect();
    second.ping().unwrap();
    assert_eq!(
        flow_lines(server, before + 4)[before..],
        [
            "POST /mcp initialize [at-1]",
            "POST /mcp notifications/initialized [at-1]",
            "GET /mcp [at-1]",
            "POST /mcp ping [at-1]",
        ]
    );
    // Refused later: refreshed as the client the file kept, never registered on this
    // connection, and the file holds the new tokens.
    runs.issuer.lock().unwrap().valid.clear();
    let before = server.seen().len();
    second.ping().unwrap();
    assert_eq!(
        flow_lines(server, before + 5)[before..],
        [
            "POST /mcp ping [at-1]",
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-authorization-server",
            &format!("POST /token refresh_token {}", token("rt", 1)),
            "POST /mcp ping [at-2]",
        ]
    );
    second.close();
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let kept = FileStore::new(path).load(url).unwrap().unwrap();
    assert_eq!(kept.access_token(), token("at", 2));
    assert_eq!(kept.refresh_token(), Some(token("rt", 2).as_str()));
    #[cfg(unix)]
    assert_eq!(mode(path), 0o600);
}

#[test]
fn a_corrupt_or_unwritable_token_file_is_a_token_store_error() {
    let issuer = Arc::new(Mutex::new(Issuer::default()));
    let server = guarded(&issuer);
    let dir = temp_dir("oauth-corrupt");
    let url = format!("{}/mcp", server.url);
    let asked = Arc::new(AtomicUsize::new(0));
    let connect = |path: &Path| {
        Client::http(&url)
            .era(Era::Session)
            .oauth(authorizing(&asked).store(FileStore::new(path)))
            .connect()
    };
    let path = dir.join("tokens.json");
    for (text, why) in [
        (
            format!("{{\"{url}\": {{\"access_token\": \"at-SECRET-Zq7Xw3Vb9Ty2\""),
            "is not JSON (EOF while parsing an object at line 1 column",
        ),
        ("[]".to_owned(), "is not a JSON object"),
        (
            format!("{{\"{url}\": {{\"refresh_token\": \"rt-SECRET-Zq7Xw3Vb9Ty2\"}}}}"),
            "lack an access token",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = connect(&path).unwrap_err();
        let McpError::TokenStore(reason) = &err else {
            panic!("{err:?}")
        };
        assert!(reason.contains(&path.display().to_string()), "{reason}");
        assert!(reason.contains(why), "{reason}");
        assert!(!err.to_string().contains("SECRET"), "{err}");
        // Nothing was sent, and the file is left as it was.
        assert_eq!(server.seen().len(), 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
    // A file that cannot be written: the request that got the tokens fails with why.
    let nowhere = dir.join("missing").join("tokens.json");
    let err = connect(&nowhere).unwrap_err();
    assert!(
        matches!(&err, McpError::TokenStore(m) if m.starts_with(&format!("cannot write {}", nowhere.display()))),
        "{err:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tokens_codes_and_secrets_never_show_in_an_error_or_a_debug() {
    let secret_free = |text: &str| {
        for kind in ["at", "rt", "cs"] {
            for n in 1..4 {
                assert!(!text.contains(&token(kind, n)), "{text}");
                // Nor a long run of one.
                assert!(!text.contains("Zq7Xw3Vb9"), "{text}");
            }
        }
    };
    // The token endpoint refuses, saying back the code, its verifier and the client's
    // secret it was sent.
    let issuer = Arc::new(Mutex::new(Issuer {
        confidential: true,
        echo_refusal: true,
        ..Issuer::default()
    }));
    let server = guarded(&issuer);
    let asked = Arc::new(AtomicUsize::new(0));
    let err = guarded_client(&server, authorizing(&asked))
        .connect()
        .unwrap_err();
    let exchanged = server
        .seen()
        .into_iter()
        .find(|s| s.path == "/token")
        .unwrap();
    let fields = form(&exchanged.text);
    let text = format!("{err} {err:?}");
    assert!(
        text.contains("the token endpoint refused (status 400)"),
        "{text}"
    );
    for name in ["code_verifier", "client_secret"] {
        let value = field(&fields, name).unwrap();
        assert!(value.len() >= 8, "{name}");
        assert!(!text.contains(value), "{name}: {text}");
    }
    secret_free(&text);

    // The MCP server says the header back in an error; and every Debug.
    let issuer = Arc::new(Mutex::new(Issuer {
        confidential: true,
        echo_header: true,
        ..Issuer::default()
    }));
    let server = guarded(&issuer);
    let dir = temp_dir("oauth-debug");
    secret_free(&format!(
        "{:?}",
        OAuth::new()
            .client("c", Some(&token("cs", 3)))
            .client_credentials("m2m", token("cs", 2))
    ));
    let oauth = authorizing(&asked).store(FileStore::new(dir.join("tokens.json")));
    let builder = guarded_client(&server, oauth);
    secret_free(&format!("{builder:?}"));
    let client = builder.connect().unwrap();
    let err = client.ping().unwrap_err();
    assert!(
        err.to_string().contains("no: authorization: Bearer"),
        "{err}"
    );
    secret_free(&format!("{err} {err:?} {client:?}"));
    let kept = FileStore::new(dir.join("tokens.json"))
        .load(&format!("{}/mcp", server.url))
        .unwrap()
        .unwrap();
    assert_eq!(kept.access_token(), token("at", 1));
    secret_free(&format!(
        "{kept:?} {:?}",
        FileStore::new(dir.join("tokens.json"))
    ));
    client.close();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dpop_bound_tokens_are_proved_with_their_key_which_a_file_store_keeps_for_the_next_run() {
    let runs = Runs::new(
        Issuer {
            dpop: true,
            ..Issuer::default()
        },
        "oauth-dpop",
    );
    let (server, path, url, asked) = (&runs.server, &runs.path, &runs.url, &runs.asked);
    // Every request after the first goes with a proof of the key the token is bound to
    // (the server refuses any other), and the kept tokens remember the key.
    let kept = runs.first();
    assert!(kept.dpop_bound());
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let key = file[url]["dpop_key"].as_str().unwrap();
    assert!(key.len() > 100, "a PKCS#8 document");
    assert!(!format!("{kept:?}").contains(key));
    let before = server.seen().len();
    let second = runs.connect();
    second.ping().unwrap();
    second.close();
    assert_eq!(
        flow_lines(server, before + 5)[before..],
        [
            "POST /mcp initialize [at-1]",
            "POST /mcp notifications/initialized [at-1]",
            "GET /mcp [at-1]",
            "POST /mcp ping [at-1]",
            "DELETE /mcp [at-1]",
        ]
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let seen = server.seen();
    for s in &seen[before..] {
        assert!(s.header("authorization").unwrap().starts_with("DPoP "));
    }
    // A fresh proof each time.
    let mut proofs: Vec<&str> = seen.iter().filter_map(|s| s.header("dpop")).collect();
    let all = proofs.len();
    proofs.sort_unstable();
    proofs.dedup();
    assert_eq!(proofs.len(), all);
    // Without DPoP wanted, the same server's token request has no proof and is refused.
    let err = Client::http(url)
        .era(Era::Session)
        .oauth(authorizing(asked).dpop(false))
        .connect()
        .unwrap_err();
    assert!(err.to_string().contains("invalid_dpop_proof"), "{err}");
}

#[test]
fn a_workload_identity_is_exchanged_for_a_token_and_a_refused_one_is_told_once_without_a_secret() {
    let issuer = Arc::new(Mutex::new(Issuer::default()));
    let server = guarded(&issuer);
    let url = format!("{}/mcp", server.url);
    let given = Arc::new(AtomicUsize::new(0));
    let workload = |jwt: &'static str| {
        let given = given.clone();
        OAuth::new()
            .client("workload-client", None)
            .workload_identity(move || {
                given.fetch_add(1, Ordering::SeqCst);
                Ok(jwt.to_owned())
            })
    };
    let client = Client::http(&url)
        .era(Era::Session)
        .oauth(workload("workload-Zq7Xw3Vb9Ty2Rk5Lm8"))
        .connect()
        .unwrap();
    client.ping().unwrap();
    client.close();
    let lines = flow_lines(&server, 5);
    assert_eq!(
        lines[..5],
        [
            "POST /mcp initialize",
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-authorization-server",
            "POST /token urn:ietf:params:oauth:grant-type:jwt-bearer",
            "POST /mcp initialize [at-1]",
        ]
    );
    let granted = server
        .seen()
        .into_iter()
        .find(|s| s.path == "/token")
        .unwrap();
    let mut fields = form(&granted.text);
    fields.sort();
    assert_eq!(
        fields,
        [
            ("assertion", "workload-Zq7Xw3Vb9Ty2Rk5Lm8"),
            ("client_id", "workload-client"),
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("resource", url.as_str()),
            ("scope", "read offline_access"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
    );
    assert_eq!(given.load(Ordering::SeqCst), 1);
    // A token the server does not trust: the error says so once, without the token; no
    // other grant is tried.
    let server = guarded(&issuer);
    let err = guarded_client(&server, workload("forged-Zq7Xw3Vb9Ty2Rk5Lm8"))
        .connect()
        .unwrap_err();
    assert!(
        matches!(&err, McpError::Auth(m) if m.starts_with("the token endpoint refused (status 400): invalid_grant")),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("Zq7Xw3Vb9"), "{err}");
    let tokens: Vec<String> = flow_lines(&server, 4)
        .into_iter()
        .filter(|l| l.starts_with("POST /token"))
        .collect();
    assert_eq!(
        tokens,
        ["POST /token urn:ietf:params:oauth:grant-type:jwt-bearer"]
    );
    assert_eq!(given.load(Ordering::SeqCst), 2);
}

#[test]
fn an_expired_token_kept_from_an_earlier_run_is_refreshed_before_the_first_request() {
    let runs = Runs::new(Issuer::default(), "oauth-expired");
    let kept = runs.first();
    assert_eq!(kept.access_token(), token("at", 1));
    // The run was long ago: its token has expired since.
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(&runs.path).unwrap()).unwrap();
    file[&runs.url]["expires_at"] = json!(1);
    std::fs::write(&runs.path, file.to_string()).unwrap();
    let before = runs.server.seen().len();
    // The next run finds it expiring within the minute: it discovers the authorization
    // server (this connection has not yet) and refreshes as the kept client, before
    // anything is sent to the MCP server.
    let client = runs.connect();
    client.close();
    assert_eq!(
        flow_lines(&runs.server, before + 7)[before..],
        [
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-authorization-server",
            &format!("POST /token refresh_token {}", token("rt", 1)),
            "POST /mcp initialize [at-2]",
            "POST /mcp notifications/initialized [at-2]",
            "GET /mcp [at-2]",
            "DELETE /mcp [at-2]",
        ]
    );
    assert_eq!(runs.asked.load(Ordering::SeqCst), 1);
    let kept = FileStore::new(&runs.path).load(&runs.url).unwrap().unwrap();
    assert_eq!(kept.access_token(), token("at", 2));
}

#[test]
fn a_resource_that_names_a_new_authorization_server_is_authorized_there_with_nothing_of_the_old() {
    let runs = Runs::new(Issuer::default(), "oauth-moved");
    let kept = runs.first();
    assert_eq!(kept.client_id(), Some("client-1"));
    // Between runs the resource moved to another authorization server, which alone issues
    // the tokens it takes now.
    {
        let mut st = runs.issuer.lock().unwrap();
        st.moved = true;
        st.valid.clear();
    }
    let before = runs.server.seen().len();
    let client = runs.connect();
    client.ping().unwrap();
    // Discovered and registered with; neither the old client nor its refresh token sent.
    assert_eq!(
        flow_lines(&runs.server, before + 9)[before..],
        [
            "POST /mcp initialize [at-1]",
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-authorization-server/as2",
            "POST /as2/register",
            "POST /as2/token authorization_code",
            "POST /mcp initialize [at-2]",
            "POST /mcp notifications/initialized [at-2]",
            "GET /mcp [at-2]",
            "POST /mcp ping [at-2]",
        ]
    );
    assert_eq!(runs.asked.load(Ordering::SeqCst), 2);
    let exchanged = runs
        .server
        .seen()
        .into_iter()
        .find(|s| s.path == "/as2/token")
        .unwrap();
    assert_eq!(field(&form(&exchanged.text), "client_id"), Some("client-2"));
    // Refused again on the live connection: the metadata is read again, names the same
    // server, and the refresh goes to it as its own client.
    runs.issuer.lock().unwrap().valid.clear();
    let before = runs.server.seen().len();
    client.ping().unwrap();
    assert_eq!(
        flow_lines(&runs.server, before + 4)[before..],
        [
            "POST /mcp ping [at-2]",
            "GET /.well-known/oauth-protected-resource/mcp",
            &format!("POST /as2/token refresh_token {}", token("rt", 2)),
            "POST /mcp ping [at-3]",
        ]
    );
    client.close();
    let kept = FileStore::new(&runs.path).load(&runs.url).unwrap().unwrap();
    assert_eq!(kept.client_id(), Some("client-2"));
}
