//! A fault-injecting TCP proxy on loopback, in front of a redis-server: it passes bytes both
//! ways, and on demand closes every connection (as a server `timeout` or a NAT does) or
//! cuts one after forwarding a request and before its reply comes back.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct Proxy {
    pub(crate) port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// How many of the next requests are forwarded, then their connection cut.
    cut_next: AtomicUsize,
    /// Client sides of the open connections, with their server sides.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    stop: AtomicBool,
}

impl Proxy {
    pub(crate) fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let shared: Arc<Shared> = Arc::default();
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
                        let (up, cut) = (s.clone(), cutting.clone());
                        std::thread::spawn(move || forward_requests(client, server, &up, &cut));
                        std::thread::spawn(move || copy(s2, c2, &cutting));
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
    cutting: &AtomicBool,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let cut = shared
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

fn copy(mut from: TcpStream, mut to: TcpStream, cutting: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) if cutting.load(Ordering::Acquire) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}
