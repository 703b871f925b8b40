//! `https` against a loopback TLS server (rustls, with the certificates of tests/data/tls,
//! made by its `make.sh`): a server of a private authority is reached once its root is
//! given, over one kept connection for several requests; without the root, or with another
//! authority's, the handshake fails by name and is not retried; a server that asks for a
//! client certificate gets the one given, and without one the error says what it asked for;
//! certificates that cannot be read fail the build.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagent::llm::{Anthropic, OpenAiCompat, Provider};
use pagent::{Agent, Error};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::support;

fn pem(name: &str) -> Vec<u8> {
    support::data(&format!("tls/{name}"))
}

const CHAT_REPLY: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
                          data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n\
                          data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                          data: [DONE]\n\n";

const ANTHROPIC_REPLY: &str = "event: message_start\n\
    data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n\
    event: content_block_start\n\
    data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
    event: content_block_delta\n\
    data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello there\"}}\n\n\
    event: content_block_stop\n\
    data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
    event: message_delta\n\
    data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
    event: message_stop\n\
    data: {\"type\":\"message_stop\"}\n\n";

/// A TLS server on 127.0.0.1 with tests/data/tls/server.pem, answering every request of a
/// connection (kept alive) with `reply` as an event stream; it lives at most 20 s.
struct TlsServer {
    url: String,
    accepted: Arc<AtomicUsize>,
    /// The method and path of each request received, in order.
    requests: Arc<Mutex<Vec<String>>>,
    /// How each handshake that failed failed, as the server saw it.
    refused: Arc<Mutex<Vec<String>>>,
    /// The client certificates presented (DER), one per connection that presented one.
    presented: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// How the server gives up a connection in the handshake, once the client's hello was read.
#[derive(Clone, Copy)]
enum GiveUp {
    Reset,
    Close,
    /// Answers nothing, holding the connection until the client closes it (a server too
    /// busy to go on with the handshake).
    Stall,
}

impl TlsServer {
    /// `ask_client`: the server requires a client certificate of tests/data/tls/ca.pem.
    fn start(reply: &'static str, ask_client: bool) -> TlsServer {
        TlsServer::giving_up(reply, ask_client, &[])
    }

    /// As [`TlsServer::start`], but the first connections are given up in the handshake, one
    /// for each of `first`, in order.
    fn giving_up(reply: &'static str, ask_client: bool, first: &[GiveUp]) -> TlsServer {
        let first = first.to_vec();
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&pem("server.pem"))
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(&pem("server.key")).unwrap();
        let builder = rustls::ServerConfig::builder();
        let config = if ask_client {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem("ca.pem")) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        }
        .with_single_cert(chain, key)
        .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let server = TlsServer {
            url: format!("https://{}", listener.local_addr().unwrap()),
            accepted: Arc::default(),
            requests: Arc::default(),
            refused: Arc::default(),
            presented: Arc::default(),
        };
        let (accepted, requests, refused, presented) = (
            server.accepted.clone(),
            server.requests.clone(),
            server.refused.clone(),
            server.presented.clone(),
        );
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                let Ok((tcp, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let n = accepted.fetch_add(1, Ordering::SeqCst);
                if let Some(&how) = first.get(n) {
                    let _ = tcp.set_nonblocking(false);
                    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
                    let _ = (&tcp).read(&mut [0; 512]);
                    match how {
                        GiveUp::Reset => {
                            let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
                        }
                        GiveUp::Close => {}
                        GiveUp::Stall => {
                            std::thread::spawn(move || {
                                while matches!((&tcp).read(&mut [0; 64]), Ok(n) if n > 0) {}
                            });
                        }
                    }
                    continue;
                }
                let config = config.clone();
                let (requests, refused, presented) =
                    (requests.clone(), refused.clone(), presented.clone());
                std::thread::spawn(move || {
                    serve(tcp, config, reply, &requests, &refused, &presented)
                });
            }
        });
        server
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// The handshakes refused, once `n` are recorded (or after 5 s): the server's thread
    /// records a refusal after it sent its alert, so the client can have read the alert
    /// and returned before the last one is written down.
    fn refused(&self, n: usize) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let refused = self.refused.lock().unwrap().clone();
            if refused.len() >= n || Instant::now() >= until {
                return refused;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn serve(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    reply: &str,
    requests: &Mutex<Vec<String>>,
    refused: &Mutex<Vec<String>>,
    presented: &Mutex<Vec<Vec<u8>>>,
) {
    tcp.set_nonblocking(false).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::ServerConnection::new(config).unwrap();
    let mut tcp = tcp;
    while tls.is_handshaking() {
        if let Err(e) = tls.complete_io(&mut tcp) {
            refused.lock().unwrap().push(e.to_string());
            return;
        }
    }
    if let Some(cert) = tls.peer_certificates().and_then(|c| c.first()) {
        presented.lock().unwrap().push(cert.to_vec());
    }
    let mut stream = rustls::StreamOwned::new(tls, tcp);
    // Requests on the connection, one after another, until the client leaves (bounded).
    for _ in 0..10 {
        let Some(request) = support::read_request(&mut stream) else {
            return;
        };
        requests
            .lock()
            .unwrap()
            .push(format!("{} {}", request.method, request.path));
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            reply.len()
        );
        if stream.write_all(head.as_bytes()).is_err()
            || stream.write_all(reply.as_bytes()).is_err()
            || stream.flush().is_err()
        {
            return;
        }
    }
}

fn chat(server: &TlsServer) -> OpenAiCompat {
    OpenAiCompat::new(format!("{}/v1", server.url)).retry(support::fast_retries())
}

/// The events of a prompt answered "Hello there"; `reply` between the assistant's start and
/// end, `end` the `AgentEnd` line.
fn answered(reply: &[&str], end: &str) -> Vec<String> {
    let tail = [
        "MessageEnd assistant Stop calls=0",
        "TurnEnd 1 no_tool_calls",
        end,
    ];
    support::with_prompt(&[reply, &tail[..]].concat())
}

#[test]
fn a_private_authoritys_server_is_reached_with_its_root_over_one_connection_for_two_prompts() {
    let server = TlsServer::start(CHAT_REPLY, false);
    let (agent, rec) = support::agent(chat(&server).root_certificates(pem("ca.pem")), "m");
    let result = agent.prompt("Hi").unwrap();
    assert_eq!(result.text(), "Hello there");
    assert_eq!(
        rec.lines(),
        answered(
            &["text x2 \"Hello there\""],
            "AgentEnd no_tool_calls in=0 out=0"
        )
    );
    agent.prompt("Again").unwrap();
    assert_eq!(
        server.requests(),
        ["POST /v1/chat/completions", "POST /v1/chat/completions"]
    );
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        1,
        "the connection was kept"
    );

    // Anthropic's provider has the same setting.
    let server = TlsServer::start(ANTHROPIC_REPLY, false);
    let provider = Anthropic::new(&server.url)
        .api_key("sk-test")
        .root_certificates(pem("ca.pem"))
        .retry(support::fast_retries());
    let (agent, rec) = support::agent(provider, "claude");
    agent.prompt("Hi").unwrap();
    assert_eq!(
        rec.lines(),
        answered(
            &[
                "usage in=3 out=1 cache_read=0 cache_write=0 reasoning=0 total=4",
                "text x1 \"Hello there\"",
                "usage in=3 out=2 cache_read=0 cache_write=0 reasoning=0 total=5",
            ],
            "AgentEnd no_tool_calls in=3 out=2"
        )
    );
    assert_eq!(server.requests(), ["POST /v1/messages"]);
}

/// The error of one prompt to `provider`.
fn run_error(provider: impl Provider + 'static) -> Error {
    let (agent, _) = support::agent(provider, "m");
    agent.prompt("Hi").unwrap_err().into_error()
}

#[test]
fn a_connection_reset_or_closed_in_the_handshake_is_retried_as_a_failed_connection() {
    let server = TlsServer::giving_up(CHAT_REPLY, false, &[GiveUp::Reset, GiveUp::Close]);
    let (agent, rec) = support::agent(chat(&server).root_certificates(pem("ca.pem")), "m");
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello there");
    let port = server.url.rsplit(':').next().unwrap();
    let retries = rec.retried();
    let target = format!("POST https://127.0.0.1:{port}/v1/chat/completions");
    assert_eq!(
        retries,
        [
            format!(
                "connection failed: {target}: Connection reset by peer (os error 104) in the TLS handshake"
            ),
            format!("connection failed: {target}: unexpected end of file in the TLS handshake"),
        ]
    );
    assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests(), ["POST /v1/chat/completions"]);
}

#[test]
fn a_handshake_not_ended_within_the_connect_timeout_is_retried_as_a_connect_timeout() {
    let server = TlsServer::giving_up(CHAT_REPLY, false, &[GiveUp::Stall, GiveUp::Stall]);
    let provider = chat(&server)
        .root_certificates(pem("ca.pem"))
        .connect_timeout(Duration::from_millis(300));
    let (agent, rec) = support::agent(provider, "m");
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello there");
    let retries = rec.retried();
    assert_eq!(retries, ["timed out connecting", "timed out connecting"]);
    assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests(), ["POST /v1/chat/completions"]);
}

#[test]
fn without_its_root_the_servers_certificate_is_refused_by_name_and_not_retried() {
    for roots in [None, Some(pem("other-ca.pem"))] {
        let server = TlsServer::start(CHAT_REPLY, false);
        let provider = match &roots {
            Some(pem) => chat(&server).root_certificates(pem),
            None => chat(&server),
        };
        let Error::Config(message) = run_error(provider) else {
            panic!("a configuration error")
        };
        let port = server.url.rsplit(':').next().unwrap();
        assert_eq!(
            message,
            format!(
                "POST https://127.0.0.1:{port}/v1/chat/completions: the TLS handshake failed \
                 (io: invalid peer certificate: UnknownIssuer): a server whose authority is \
                 not a public one needs its roots given (`root_certificates`)"
            )
        );
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1, "not retried");
        assert!(server.requests().is_empty());
    }
}

#[test]
fn a_server_that_asks_for_a_client_certificate_gets_the_one_given() {
    let server = TlsServer::start(CHAT_REPLY, true);
    let (agent, rec) = support::agent(chat(&server).root_certificates(pem("ca.pem")), "m");
    let error = agent.prompt("Hi").unwrap_err().into_error();
    let port = server.url.rsplit(':').next().unwrap();
    let target = format!("POST https://127.0.0.1:{port}/v1/chat/completions");
    let attempts = server.accepted.load(Ordering::SeqCst);
    let hint = "; the server closed the connection right after the TLS handshake, as one that \
                requires a client certificate does when it gets none (`client_certificate`)";
    // Each attempt that lost the alert (the server closed before it was read, so the
    // request's write failed) was retried, as a closed connection proves nothing, and named.
    let retries: Vec<String> = rec
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("retry "))
        .collect();
    assert_eq!(retries.len(), attempts - 1, "{retries:#?}");
    for (n, line) in retries.iter().enumerate() {
        assert!(
            line.starts_with(&format!("retry {} after ", n + 1)),
            "{line}"
        );
        assert!(line.contains(&target) && line.contains(hint), "{line}");
    }
    match error {
        // The server's alert was read: a refusal, not retried.
        Error::Config(message) => {
            assert_eq!(
                message,
                format!(
                    "{target}: the TLS handshake failed (io: received fatal alert: \
                     CertificateRequired): the server asks for a client certificate \
                     (`client_certificate`)"
                )
            );
        }
        // Every attempt lost it.
        Error::Connection(message) => {
            assert!(message.starts_with(&format!("{target}: ")), "{message}");
            assert!(
                message.ends_with(&format!("{hint} (gave up after 7 attempts)")),
                "{message}"
            );
            assert_eq!(attempts, 7);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        server.refused(attempts),
        vec!["peer sent no certificates"; attempts]
    );
    assert!(server.requests().is_empty());

    let client = [pem("client.pem"), pem("client.key")].concat();
    let provider = chat(&server)
        .root_certificates(pem("ca.pem"))
        .client_certificate(&client);
    let (agent, _) = support::agent(provider, "m");
    assert_eq!(agent.prompt("Hi").unwrap().text(), "Hello there");
    assert_eq!(server.requests(), ["POST /v1/chat/completions"]);
    let own: Vec<u8> = CertificateDer::from_pem_slice(&pem("client.pem"))
        .unwrap()
        .to_vec();
    assert_eq!(*server.presented.lock().unwrap(), [own]);
}

#[test]
fn certificates_that_cannot_be_read_fail_the_build_by_name() {
    let build = |provider: OpenAiCompat| {
        Agent::builder()
            .provider(provider)
            .model("m")
            .build()
            .map(drop)
    };
    let base = || OpenAiCompat::new("https://127.0.0.1:9/v1");
    assert_eq!(
        build(base().root_certificates("not a certificate")),
        Err(Error::Config(
            "the root certificates hold no PEM certificate (`-----BEGIN CERTIFICATE-----`)".into()
        ))
    );
    assert_eq!(
        build(base().client_certificate(pem("client.pem"))),
        Err(Error::Config(
            "the client certificate holds no private key (`-----BEGIN PRIVATE KEY-----`)".into()
        ))
    );
    // The provider on its own refuses every request the same way.
    let provider = base().root_certificates("");
    assert!(matches!(provider.check(), Err(Error::Config(_))));
    assert_eq!(build(base().root_certificates(pem("ca.pem"))), Ok(()));
}
