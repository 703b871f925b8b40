//! A fault-injecting TCP proxy on loopback, in front of a redis-server: it passes bytes both
//! ways, and on demand closes every connection (as a server `timeout` or a NAT does), cuts
//! one after forwarding a request and before its reply comes back, or does something to
//! the next requests that contain given bytes (a script's text): forwards and cuts, drops
//! and cuts, holds them (never forwarded, the connection left open, as a worker that died
//! right then would leave it), forwards them and the request after them unanswered and
//! then cuts, or forwards them and corrupts their reply or cuts it in the middle.
//!
//! Scripts go by their SHA1 (`EVALSHA`), their text only in the `SCRIPT LOAD` of a new
//! connection: the proxy learns the SHA1 of each script it sees loaded (asking the server),
//! and a marker found in a script's text marks the calls of that script too.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct Proxy {
    pub(crate) port: u16,
    shared: Arc<Shared>,
}

/// What to do with a request that contains [`Marked::marker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Forward it, then cut its connection before the reply comes back.
    ForwardThenCut,
    /// Cut its connection without forwarding it.
    DropAndCut,
    /// Never forward it, nor anything after it on its connection; leave the connection open.
    Hold,
    /// Empty the server's script cache (`SCRIPT FLUSH`), then forward it.
    FlushScripts,
    /// Forward it and the next request of its connection, passing back no reply of either
    /// (both applied, neither answered), then cut the connection.
    SilenceThenCut,
    /// Forward it, and pass its reply back with its first byte replaced by one RESP does
    /// not have.
    CorruptReply,
    /// Forward it, pass back the first half of its reply, then cut the connection.
    CutReply,
}

/// What [`copy`] does to the next reply it passes back.
const PASS: u8 = 0;
const CORRUPT: u8 = 1;
const CUT: u8 = 2;

struct Marked {
    marker: Vec<u8>,
    fault: Fault,
    /// How many requests with the marker pass before the fault.
    skip: usize,
    /// How many more requests with the marker get the fault.
    left: usize,
}

#[derive(Default)]
struct Shared {
    /// How many of the next requests are forwarded, then their connection cut.
    cut_next: AtomicUsize,
    marked: Mutex<Option<Marked>>,
    /// How many requests got a marked fault.
    faulted: AtomicUsize,
    /// Client sides of the open connections, with their server sides.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    stop: AtomicBool,
    upstream: u16,
    /// The scripts loaded through the proxy: (text, SHA1).
    scripts: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl Proxy {
    pub(crate) fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared {
            upstream,
            ..Shared::default()
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            while !s.stop.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                        s.open
                            .lock()
                            .unwrap()
                            .push((client.try_clone().unwrap(), server.try_clone().unwrap()));
                        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        // A cut under way on this connection: its replies are dropped.
                        let cutting = Arc::new(AtomicBool::new(false));
                        // Replies are read and dropped, the connection left open.
                        let silent = Arc::new(AtomicBool::new(false));
                        let mangle = Arc::new(AtomicU8::new(PASS));
                        let faults = (cutting.clone(), silent.clone(), mangle.clone());
                        let up = s.clone();
                        std::thread::spawn(move || forward_requests(client, server, &up, &faults));
                        std::thread::spawn(move || copy(s2, c2, &cutting, &silent, &mangle));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { port, shared }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Closes every open connection, both ways.
    pub(crate) fn close_all(&self) {
        for (c, s) in self.shared.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Forwards each of the next `n` requests, then cuts its connection before the reply.
    pub(crate) fn cut_next_requests(&self, n: usize) {
        self.shared.cut_next.store(n, Ordering::Release);
    }

    /// Does `fault` to each of the next `n` requests whose bytes (as read in one piece)
    /// contain `marker`.
    pub(crate) fn fault_requests_with(&self, marker: &str, fault: Fault, n: usize) {
        self.fault_requests_after(marker, 0, fault, n);
    }

    /// As [`Proxy::fault_requests_with`], after `skip` requests with `marker` passed.
    pub(crate) fn fault_requests_after(&self, marker: &str, skip: usize, fault: Fault, n: usize) {
        *self.shared.marked.lock().unwrap() = Some(Marked {
            marker: marker.as_bytes().to_vec(),
            fault,
            skip,
            left: n,
        });
    }

    /// How many requests got a fault of [`Proxy::fault_requests_with`] so far.
    pub(crate) fn faulted(&self) -> usize {
        self.shared.faulted.load(Ordering::Acquire)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.close_all();
    }
}

fn forward_requests(
    mut client: TcpStream,
    mut server: TcpStream,
    shared: &Shared,
    (cutting, silent, mangle): &(Arc<AtomicBool>, Arc<AtomicBool>, Arc<AtomicU8>),
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        learn_scripts(shared, &buf[..n]);
        let fault = if silent.load(Ordering::Acquire) {
            // The request after a silenced one: forwarded, then the connection is cut.
            Some(Fault::ForwardThenCut)
        } else {
            marked_fault(shared, &buf[..n])
        };
        match fault {
            Some(Fault::SilenceThenCut) => silent.store(true, Ordering::Release),
            Some(Fault::CorruptReply) => mangle.store(CORRUPT, Ordering::Release),
            Some(Fault::CutReply) => mangle.store(CUT, Ordering::Release),
            _ => {}
        }
        if fault == Some(Fault::Hold) {
            // Swallow the rest until the client goes away.
            while matches!(client.read(&mut buf), Ok(n) if n > 0) {}
            break;
        }
        if fault == Some(Fault::DropAndCut) {
            break;
        }
        if fault == Some(Fault::FlushScripts) {
            let mut server = TcpStream::connect(("127.0.0.1", shared.upstream)).unwrap();
            server
                .write_all(b"*2\r\n$6\r\nSCRIPT\r\n$5\r\nFLUSH\r\n")
                .unwrap();
            let mut ok = [0u8; 5];
            server.read_exact(&mut ok).unwrap();
            assert_eq!(&ok, b"+OK\r\n");
        }
        let cut = fault == Some(Fault::ForwardThenCut)
            || shared
                .cut_next
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok();
        if cut {
            cutting.store(true, Ordering::Release);
        }
        if server.write_all(&buf[..n]).is_err() {
            break;
        }
        if cut {
            // Let the server take it, then cut before the reply gets through.
            std::thread::sleep(Duration::from_millis(50));
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

fn contains(bytes: &[u8], part: &[u8]) -> bool {
    bytes.windows(part.len()).any(|w| w == part)
}

/// The commands of `bytes` (RESP arrays of bulk strings), as far as they are whole.
fn commands(bytes: &[u8]) -> Vec<Vec<&[u8]>> {
    fn line(bytes: &[u8], at: &mut usize) -> Option<usize> {
        let end = *at + bytes.get(*at..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&bytes[*at + 1..end])
            .ok()?
            .parse()
            .ok()?;
        *at = end + 2;
        Some(n)
    }
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.get(at) == Some(&b'*') {
        let Some(n) = line(bytes, &mut at) else { break };
        let mut args = Vec::new();
        for _ in 0..n {
            let Some(len) = line(bytes, &mut at) else {
                return out;
            };
            let Some(arg) = bytes.get(at..at + len) else {
                return out;
            };
            args.push(arg);
            at += len + 2;
        }
        out.push(args);
    }
    out
}

/// Records the SHA1 of each script that `bytes` loads (`SCRIPT LOAD`), asked of the server.
fn learn_scripts(shared: &Shared, bytes: &[u8]) {
    for args in commands(bytes) {
        let [script, load, body] = args[..] else {
            continue;
        };
        if !script.eq_ignore_ascii_case(b"SCRIPT") || !load.eq_ignore_ascii_case(b"LOAD") {
            continue;
        }
        if shared
            .scripts
            .lock()
            .unwrap()
            .iter()
            .any(|(b, _)| b == body)
        {
            continue;
        }
        let mut server = TcpStream::connect(("127.0.0.1", shared.upstream)).unwrap();
        let mut request =
            format!("*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n${}\r\n", body.len()).into_bytes();
        request.extend_from_slice(body);
        request.extend_from_slice(b"\r\n");
        server.write_all(&request).unwrap();
        // `$40\r\n<sha1>\r\n`
        let mut reply = [0u8; 47];
        server.read_exact(&mut reply).unwrap();
        let sha = reply[5..45].to_vec();
        shared.scripts.lock().unwrap().push((body.to_vec(), sha));
    }
}

/// The fault for a request read as `bytes`, counted, if it carries the marker or calls a
/// script whose text does (not the loading of scripts).
fn marked_fault(shared: &Shared, bytes: &[u8]) -> Option<Fault> {
    let mut marked = shared.marked.lock().unwrap();
    let m = marked.as_mut()?;
    if m.left == 0 || contains(bytes, b"SCRIPT\r\n$4\r\nLOAD") {
        return None;
    }
    let called = || {
        shared
            .scripts
            .lock()
            .unwrap()
            .iter()
            .any(|(body, sha)| contains(body, &m.marker) && contains(bytes, sha))
    };
    if !contains(bytes, &m.marker) && !called() {
        return None;
    }
    if m.skip > 0 {
        m.skip -= 1;
        return None;
    }
    m.left -= 1;
    shared.faulted.fetch_add(1, Ordering::AcqRel);
    Some(m.fault)
}

fn copy(
    mut from: TcpStream,
    mut to: TcpStream,
    cutting: &AtomicBool,
    silent: &AtomicBool,
    mangle: &AtomicU8,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) if cutting.load(Ordering::Acquire) => break,
            Ok(_) if silent.load(Ordering::Acquire) => {}
            Ok(n) if mangle.load(Ordering::Acquire) == CORRUPT => {
                mangle.store(PASS, Ordering::Release);
                buf[0] = b'?';
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Ok(n) if mangle.load(Ordering::Acquire) == CUT => {
                mangle.store(PASS, Ordering::Release);
                let _ = to.write_all(&buf[..n / 2]);
                let _ = from.shutdown(Shutdown::Both);
                break;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}
