//! OAuth 2.1 against a real OAuth-protected MCP server: the official TypeScript SDK's example
//! server (`simpleStreamableHttp.js --oauth --oauth-strict`, shipped in the npm package
//! `@modelcontextprotocol/sdk` that `.ci/mcp.sh` installs, pinned by
//! tests/mcp/package-lock.json) with its own authorization server, through the whole
//! authorization-code flow: the browser's part is played by the test (it fetches the
//! authorization URL and takes the redirect to pagent's loopback listener), everything else
//! is pagent's and the SDK's. Every request both servers answered is traced
//! (tests/mcp/http_trace.cjs) and the whole sequence asserted.

use pagent::mcp::{MemoryStore, OAuth, TokenStore, Tokens};

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
    fn load(&self, resource: &str) -> Option<Tokens> {
        self.kept.load(resource)
    }

    fn save(&self, resource: &str, tokens: &Tokens) {
        self.saved
            .lock()
            .unwrap()
            .push((resource.to_owned(), tokens.clone()));
        self.kept.save(resource, tokens);
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
    let traced = server.traced();
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
