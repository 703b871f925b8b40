//! The TCP layer under ureq: sockets that an abort, a phase timeout or the run deadline
//! interrupt from the run thread itself, with no helper thread.
//!
//! # How
//! ureq runs a request on the calling thread through a chain of connectors. This module
//! gives it its own TCP link ([`Tcp`], in place of ureq's; ureq's CONNECT proxy connector
//! comes before it, as in ureq's default chain, and ureq's rustls connector wraps it for
//! `https`) and a last one ([`Ready`]) that marks the connection as set up. Around every ureq call the run thread puts the request's [`Ctx`] in a
//! thread-local; each I/O of a [`Sock`] reads it:
//!
//! - **Timeouts**: every blocking connect, write and read gets the time left until the
//!   earliest of the phase deadline the run thread set (connect, first byte, idle) and the
//!   run deadline of the cancel token, as the socket's own timeout. When it passes, the
//!   socket is shut down and the phase recorded, so the error names it. The timeout set on
//!   the socket is kept while it is within [`Slack`] of the time left (a system call per
//!   read saved, as the idle deadline moves with every read): an I/O then ends at most that
//!   slack after its deadline, and one that times out before its deadline is retried with
//!   the time left.
//! - **Abort**: the first I/O of a request on a socket (new or taken from ureq's pool)
//!   registers a hook with the cancel token that shuts the socket down (`Shutdown::Both`)
//!   through a shared handle (an `Arc`, made once per socket: no `dup` per request). [`CancelToken::cancel`] from any thread then wakes a blocked read
//!   or write at once, and the server sees the connection close. A new socket is created
//!   and registered before it connects (with `socket2`, as std has no way to make a socket
//!   without connecting it), so a connect blocked in the kernel wakes too.
//! - **Pooling**: a socket that was shut down, timed out or failed reports
//!   `is_open() == false`, so ureq never pools it. When the request ends, its sockets are
//!   shut down unless its reply ended normally (an error reply, a reply left half read):
//!   only a reply read to its end leaves its socket pooled for the next request.
//!
//! Limits: a DNS lookup (ureq's, on the run thread, when a new connection is opened to a
//! host name: [`Resolve`]) cannot be interrupted; a host given as an IP address needs none.
//!
//! ureq's `unversioned` transport API is exempt from its semver promises; `Cargo.toml`
//! pins ureq's minor version for that reason.

use std::cell::{Cell, RefCell};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ureq::config::{Config, IpFamily};
use ureq::http::Uri;
use ureq::http::uri::Authority;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, NextTimeout, Transport,
};

use super::CancelToken;
use super::sockbuf::SockBuffers;
use crate::TimeoutPhase;

/// Where a request stands: what bounds the I/O and what happened to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Not connecting (a pooled connection is used, or none yet).
    Idle,
    /// Opening the TCP connection.
    Tcp,
    /// The TLS handshake on a fresh connection.
    Tls,
    /// Sending the request and reading the reply.
    Http,
}

/// One request of the run thread, as the sockets see it.
pub(crate) struct Ctx {
    pub(crate) cancel: CancelToken,
    /// Tells sockets whether they registered with this request already.
    id: u64,
    stage: Cell<Stage>,
    connect_timeout: Duration,
    connect_deadline: Cell<Instant>,
    first_byte_timeout: Duration,
    /// The deadline of the next I/O once connected, and the phase it belongs to.
    deadline: Cell<(Instant, TimeoutPhase)>,
    /// Set when an I/O ran out of time: the phase whose deadline passed.
    timed_out: Cell<Option<TimeoutPhase>>,
    /// The socket this request used, with its cancel hook: a request uses one (no
    /// allocation for it), and those it used before it in `more` (a kept connection found
    /// closed, a proxy's).
    socket: RefCell<Option<(u64, Arc<TcpStream>)>>,
    more: RefCell<Vec<(u64, Arc<TcpStream>)>>,
    /// Set once the reply ended normally: its socket may stay in ureq's pool.
    keep: Cell<bool>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CURRENT: RefCell<Option<Rc<Ctx>>> = const { RefCell::new(None) };
}

impl Ctx {
    /// A request starting now: its first byte is due `first_byte_timeout` after it is sent.
    pub(crate) fn new(
        cancel: &CancelToken,
        connect_timeout: Duration,
        first_byte_timeout: Duration,
    ) -> Rc<Ctx> {
        let now = Instant::now();
        Rc::new(Ctx {
            cancel: cancel.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            stage: Cell::new(Stage::Idle),
            connect_timeout,
            connect_deadline: Cell::new(now + connect_timeout),
            first_byte_timeout,
            deadline: Cell::new((now + first_byte_timeout, TimeoutPhase::FirstByte)),
            timed_out: Cell::new(None),
            socket: RefCell::new(None),
            more: RefCell::new(Vec::new()),
            keep: Cell::new(false),
        })
    }

    /// Makes this the request of the current thread until the guard is dropped.
    pub(crate) fn enter(self: &Rc<Ctx>) -> Entered {
        let previous = CURRENT.with(|c| c.replace(Some(self.clone())));
        Entered(previous)
    }

    /// Bounds the next reads of the reply by `deadline`, for `phase`.
    pub(crate) fn set_deadline(&self, deadline: Instant, phase: TimeoutPhase) {
        self.deadline.set((deadline, phase));
    }

    pub(crate) fn stage(&self) -> Stage {
        self.stage.get()
    }

    /// Records that an I/O of this request ran out of time in `phase`, and returns its error.
    ///
    /// The OS may wake a timed wait a little before its deadline (poll(2) counts whole
    /// milliseconds, socket timeouts count clock ticks). For the run deadline the rest is
    /// waited out here (a tick at most), so that the token is cancelled, and the run reports
    /// its timeout, no earlier than the deadline.
    fn expire(&self, phase: TimeoutPhase) -> io::Error {
        if phase == TimeoutPhase::Run
            && let Some(deadline) = self.cancel.deadline()
        {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            self.cancel.is_cancelled();
        }
        self.timed_out.set(Some(phase));
        timed_out(phase)
    }

    /// The phase whose deadline an I/O of this request ran past, if one did.
    pub(crate) fn timed_out(&self) -> Option<TimeoutPhase> {
        self.timed_out.get()
    }

    /// The deadline of an I/O now, and the phase it belongs to: the stage's own deadline or
    /// the run deadline, whichever comes first.
    fn limit(&self) -> (Instant, TimeoutPhase) {
        let own = match self.stage.get() {
            Stage::Tcp | Stage::Tls => (self.connect_deadline.get(), TimeoutPhase::Connect),
            Stage::Idle | Stage::Http => self.deadline.get(),
        };
        match self.cancel.deadline() {
            Some(run) if run <= own.0 => (run, TimeoutPhase::Run),
            _ => own,
        }
    }

    /// The time left for an I/O, or the phase whose deadline already passed.
    fn time_left(&self) -> Result<Duration, TimeoutPhase> {
        let (deadline, phase) = self.limit();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(phase);
        }
        Ok(left)
    }

    /// Says that the reply ended normally, so that its connection may be pooled.
    pub(crate) fn keep_connection(&self) {
        self.keep.set(true);
    }

    /// Registers `stream` to be shut down when the request is cancelled.
    fn watch(&self, stream: &Arc<TcpStream>) -> io::Result<()> {
        let for_hook = stream.clone();
        let hook = self.cancel.on_cancel(move || {
            // An error means the socket is closed or shut down already.
            let _ = for_hook.shutdown(Shutdown::Both);
        });
        match hook {
            Some(id) => {
                let previous = self.socket.replace(Some((id, stream.clone())));
                self.more.borrow_mut().extend(previous);
            }
            None => return Err(aborted()),
        }
        Ok(())
    }
}

impl Drop for Ctx {
    /// Unregisters the sockets (dropping their handles, so that they close with their
    /// transports), and shuts them down unless the reply ended normally: a connection whose
    /// reply was an error, or was left half read, never goes back to the pool, and the
    /// server learns at once that the client left.
    fn drop(&mut self) {
        let socket = self.socket.take();
        for (id, socket) in socket.into_iter().chain(self.more.take()) {
            self.cancel.remove_hook(id);
            if !self.keep.get() {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Restores the thread's previous request when dropped.
pub(crate) struct Entered(Option<Rc<Ctx>>);

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

fn current() -> Option<Rc<Ctx>> {
    CURRENT.with(|c| c.borrow().clone())
}

fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "aborted")
}

fn timed_out(phase: TimeoutPhase) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, crate::Error::Timeout(phase))
}

/// The first link of the chain: opens a TCP connection that the request's cancel token
/// and deadlines can interrupt.
#[derive(Debug, Default)]
pub(crate) struct Tcp;

impl<In: Transport> Connector<In> for Tcp {
    type Out = Either<In, Sock>;

    fn connect(
        &self,
        details: &ConnectionDetails<'_>,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        // A tunnel through a CONNECT proxy, made by the link before: its own connection to
        // the proxy came from this connector too (ureq runs the chain for it).
        if let Some(tunnel) = chained {
            return Ok(Some(Either::A(tunnel)));
        }
        let Some(ctx) = current() else {
            return Err(ureq::Error::Io(io::Error::other(
                "a request outside of a provider call",
            )));
        };
        // A host named, not given as an address: looked up now, for a new connection only
        // (see [`Resolve`]), before the connect timeout starts, as ureq's resolver did.
        let looked_up;
        let addrs = match details.addrs.is_empty() {
            true => {
                looked_up = DefaultResolver::default().resolve(
                    details.uri,
                    details.config,
                    details.timeout,
                )?;
                &looked_up
            }
            false => &details.addrs,
        };
        ctx.stage.set(Stage::Tcp);
        ctx.connect_deadline
            .set(Instant::now() + ctx.connect_timeout);
        let mut last = None;
        for addr in addrs {
            match connect_one(&ctx, *addr) {
                Ok(stream) => {
                    if details.needs_tls() {
                        ctx.stage.set(Stage::Tls);
                    }
                    return Ok(Some(Either::B(Sock {
                        stream,
                        read_timeout: None,
                        write_timeout: None,
                        buffers: SockBuffers::default(),
                        watched_by: ctx.id,
                        broken: false,
                    })));
                }
                // Refused, unreachable: the next address may answer.
                Err(e) if e.kind() != io::ErrorKind::TimedOut && !ctx.cancel.is_cancelled() => {
                    last = Some(e);
                }
                Err(e) => return Err(ureq::Error::Io(e)),
            }
        }
        Err(ureq::Error::Io(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the host has no address")
        })))
    }
}

/// ureq's resolver, which runs before every request, even one that goes out on a pooled
/// connection: a host given as an IP address is read as it is (ureq's own formats the host
/// and port and parses them back, on every request), and a host name is left for [`Tcp`] to
/// look up when it opens a new connection (no lookup for a request on a pooled one; the
/// lookup and its errors are ureq's). A proxy that wants its target resolved by the client
/// gets ureq's resolver as it is. The last address read is kept: a client's requests go
/// to one host, whose address is then found by comparing the host and port.
#[derive(Debug, Default)]
pub(crate) struct Resolve {
    last: parking_lot::Mutex<Option<(Authority, bool, SocketAddr)>>,
}

impl Resolver for Resolve {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        if config.proxy().is_some_and(|p| p.resolve_target()) {
            return DefaultResolver::default().resolve(uri, config, timeout);
        }
        let mut addrs = self.empty();
        let (Some(authority), https) = (uri.authority(), uri.scheme_str() == Some("https")) else {
            return Ok(addrs);
        };
        let mut last = self.last.lock();
        let addr = match &*last {
            Some((of, tls, addr)) if of == authority && *tls == https => Some(*addr),
            _ => {
                let addr = ip_literal(uri);
                if let Some(addr) = addr {
                    *last = Some((authority.clone(), https, addr));
                }
                addr
            }
        };
        drop(last);
        let wanted = |ip: &SocketAddr| match config.ip_family() {
            IpFamily::Any => true,
            IpFamily::Ipv4Only => ip.is_ipv4(),
            IpFamily::Ipv6Only => ip.is_ipv6(),
        };
        if let Some(addr) = addr.filter(wanted) {
            addrs.push(addr);
        }
        Ok(addrs)
    }
}

/// The address of `uri` when its host is an IP address, with the port it names or its
/// scheme's.
fn ip_literal(uri: &Uri) -> Option<SocketAddr> {
    let authority = uri.authority()?;
    let host = authority.host();
    // `[::1]` is how a URL writes an IPv6 address.
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: IpAddr = host.parse().ok()?;
    let port = match authority.port_u16() {
        Some(port) => port,
        None => super::url::default_port(uri.scheme_str()?)?,
    };
    Some(SocketAddr::new(ip, port))
}

/// Connects to `addr` within the time left, the socket registered with the cancel token
/// from before the connect starts.
fn connect_one(ctx: &Ctx, addr: SocketAddr) -> io::Result<Arc<TcpStream>> {
    use socket2::{Domain, Protocol, SockRef, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    let stream = Arc::new(TcpStream::from(socket));
    ctx.watch(&stream)?;
    let socket = SockRef::from(&*stream);
    let left = ctx.time_left().map_err(|phase| ctx.expire(phase))?;
    // The connect waits in poll(2), which counts whole milliseconds and would wake up to one
    // early: rounded up, a timeout never fires before its deadline (the run deadline then has
    // passed by the time it is reported).
    let left =
        Duration::from_millis(u64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(u64::MAX));
    match socket.connect_timeout(&addr.into(), left) {
        Ok(()) => {}
        Err(_) if ctx.cancel.is_cancelled() => return Err(aborted()),
        Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::WouldBlock => {
            let (_, phase) = ctx.limit();
            return Err(ctx.expire(phase));
        }
        Err(e) => return Err(e),
    }
    socket.set_tcp_nodelay(true)?;
    Ok(stream)
}

/// The last link of the chain: the connection is set up (TCP, and TLS for `https`), so the
/// first-byte timeout starts now, as the request goes out.
#[derive(Debug, Default)]
pub(crate) struct Ready;

impl<In: Transport> Connector<In> for Ready {
    type Out = In;

    fn connect(
        &self,
        _details: &ConnectionDetails<'_>,
        chained: Option<In>,
    ) -> Result<Option<In>, ureq::Error> {
        if let Some(ctx) = current() {
            ctx.stage.set(Stage::Http);
            let now = Instant::now();
            ctx.deadline
                .set((now + ctx.first_byte_timeout, TimeoutPhase::FirstByte));
        }
        Ok(chained)
    }
}

/// How far the timeout set on a socket may be from the time left before it is set again:
/// 1/64 of the time left, at most 50 ms.
struct Slack;

impl Slack {
    const MAX: Duration = Duration::from_millis(50);

    /// Sets the socket's read or write timeout (`set`, the one it has) to `left`, unless
    /// the one it has is within the slack of it.
    fn bound(
        stream: &TcpStream,
        set: &mut Option<Duration>,
        left: Duration,
        read: bool,
    ) -> io::Result<()> {
        if set.is_some_and(|t| t.abs_diff(left) <= (left / 64).min(Slack::MAX)) {
            return Ok(());
        }
        if read {
            stream.set_read_timeout(Some(left))?;
        } else {
            stream.set_write_timeout(Some(left))?;
        }
        *set = Some(left);
        Ok(())
    }
}

/// True for the error of a socket timeout.
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// A TCP connection as ureq's transport; see the module docs.
pub(crate) struct Sock {
    /// Shared with the cancel hook of the request in flight.
    stream: Arc<TcpStream>,
    /// The read and write timeouts set on the socket (see [`Slack`]).
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// Small, grown by the traffic, freed while the connection is pooled.
    buffers: SockBuffers,
    /// The request that registered this socket with its cancel token last.
    watched_by: u64,
    /// Shut down, timed out or failed: never to be reused.
    broken: bool,
}

impl std::fmt::Debug for Sock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sock")
            .field("peer", &self.stream.peer_addr().ok())
            .field("broken", &self.broken)
            .finish()
    }
}

impl Sock {
    /// Prepares one I/O: registers the socket with the current request and returns the
    /// time it may take.
    fn before_io(&mut self) -> Result<Option<(Rc<Ctx>, Duration)>, ureq::Error> {
        let Some(ctx) = current() else {
            return Ok(None);
        };
        if self.watched_by != ctx.id {
            ctx.watch(&self.stream).map_err(|e| self.fail(e))?;
            self.watched_by = ctx.id;
        }
        if ctx.cancel.is_cancelled() {
            return Err(self.fail(aborted()));
        }
        match ctx.time_left() {
            Ok(left) => Ok(Some((ctx, left))),
            Err(phase) => Err(self.fail(ctx.expire(phase))),
        }
    }

    /// Marks the socket broken, shuts it down (so the server learns at once), and turns
    /// `e` into ureq's error.
    fn fail(&mut self, e: io::Error) -> ureq::Error {
        self.broken = true;
        let _ = self.stream.shutdown(Shutdown::Both);
        ureq::Error::Io(e)
    }

    /// The error of a failed I/O: a timeout names its phase, a cancelled request says so.
    fn io_failed(&mut self, ctx: Option<&Ctx>, e: io::Error) -> ureq::Error {
        let Some(ctx) = ctx else {
            return self.fail(e);
        };
        if ctx.cancel.is_cancelled() {
            return self.fail(aborted());
        }
        if is_timeout(&e) {
            let (_, phase) = ctx.limit();
            return self.fail(ctx.expire(phase));
        }
        self.fail(e)
    }
}

impl Transport for Sock {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    // ureq's own timeouts are off (`HttpClient::agent`); the request's deadlines apply.
    fn transmit_output(&mut self, amount: usize, _timeout: NextTimeout) -> Result<(), ureq::Error> {
        let ctx = self.before_io()?;
        let (ctx, mut left) = match ctx {
            Some((ctx, left)) => (Some(ctx), Some(left)),
            None => (None, None),
        };
        let mut written = 0;
        while written < amount {
            if let Some(left) = left {
                Slack::bound(&self.stream, &mut self.write_timeout, left, false)
                    .map_err(|e| self.fail(e))?;
            }
            let output = &self.buffers.output()[written..amount];
            match (&*self.stream).write(output) {
                Ok(0) => return Err(self.fail(io::ErrorKind::WriteZero.into())),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => match early(ctx.as_deref(), &e) {
                    // Timed out before the deadline (the socket's timeout was within the
                    // slack of it): again, with the time left.
                    Some(rest) => left = Some(rest),
                    None => return Err(self.io_failed(ctx.as_deref(), e)),
                },
            }
        }
        self.buffers.output_sent(amount);
        Ok(())
    }

    fn await_input(&mut self, _timeout: NextTimeout) -> Result<bool, ureq::Error> {
        // The request went out whole: its buffer is not needed while the reply streams.
        self.buffers.free_output();
        let ctx = self.before_io()?;
        let (ctx, mut left) = match ctx {
            Some((ctx, left)) => (Some(ctx), Some(left)),
            None => (None, None),
        };
        loop {
            if let Some(left) = left {
                Slack::bound(&self.stream, &mut self.read_timeout, left, true)
                    .map_err(|e| self.fail(e))?;
            }
            let input = self.buffers.input_append_buf();
            match (&*self.stream).read(input) {
                // The end of the stream, or a shutdown by a cancel: then it is an abort, and
                // the reply must not look complete.
                Ok(0) if ctx.as_ref().is_some_and(|c| c.cancel.is_cancelled()) => {
                    return Err(self.fail(aborted()));
                }
                Ok(0) => {
                    self.broken = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.buffers.input_appended(n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => match early(ctx.as_deref(), &e) {
                    // Timed out before the deadline (the socket's timeout was within the
                    // slack of it): again, with the time left.
                    Some(rest) => left = Some(rest),
                    None => return Err(self.io_failed(ctx.as_deref(), e)),
                },
            }
        }
    }

    /// ureq asks as the connection goes into its pool and as it comes out: either way it
    /// is idle, so its buffers are freed (they come back, small, with the next request).
    fn is_open(&mut self) -> bool {
        let open = !self.broken && probe(&self.stream);
        if open {
            self.buffers.release();
        }
        open
    }
}

/// The time left when `e` is a socket timeout that came before the deadline of the
/// request (which was not cancelled meanwhile), else `None`: `e` stands.
fn early(ctx: Option<&Ctx>, e: &io::Error) -> Option<Duration> {
    let ctx = ctx?;
    if !is_timeout(e) || ctx.cancel.is_cancelled() {
        return None;
    }
    ctx.time_left().ok()
}

/// True when an idle pooled connection is still usable: nothing to read (the server sent
/// no close and no stray bytes) without blocking. One `recv` that peeks without waiting.
#[cfg(unix)]
fn probe(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::uninit()];
    let peeked = socket2::SockRef::from(stream)
        .recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT);
    matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// True when an idle pooled connection is still usable: nothing to read (the server sent
/// no close and no stray bytes) without blocking.
#[cfg(not(unix))]
fn probe(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let open = matches!(
        stream.peek(&mut [0]),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock
    );
    stream.set_nonblocking(false).is_ok() && open
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected pair: our `Sock` and the server's end.
    fn pair() -> (Sock, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let sock = Sock {
            stream: Arc::new(client),
            read_timeout: None,
            write_timeout: None,
            buffers: SockBuffers::default(),
            watched_by: 0,
            broken: false,
        };
        (sock, server)
    }

    #[test]
    fn an_ip_address_is_read_as_it_is_and_a_name_is_left_for_the_connect() {
        let resolve = Resolve::default();
        let agent = ureq::Agent::new_with_defaults();
        let config = agent.config();
        let at = |url: &str| -> Vec<SocketAddr> {
            let uri: Uri = url.parse().unwrap();
            resolve
                .resolve(&uri, config, NextTimeout::default())
                .unwrap()
                .iter()
                .copied()
                .collect()
        };
        let addr = |a: &str| vec![a.parse::<SocketAddr>().unwrap()];
        assert_eq!(at("http://127.0.0.1:8080/v1"), addr("127.0.0.1:8080"));
        // Again, from what it kept; then another host and port.
        assert_eq!(at("http://127.0.0.1:8080/v1"), addr("127.0.0.1:8080"));
        assert_eq!(at("http://127.0.0.1:8081/v1"), addr("127.0.0.1:8081"));
        assert_eq!(at("http://[::1]:9/v1"), addr("[::1]:9"));
        assert_eq!(at("http://user:pw@10.0.0.1/v1"), addr("10.0.0.1:80"));
        // The port of the scheme: a kept address of the same host is not taken for it.
        assert_eq!(at("https://10.0.0.1/v1"), addr("10.0.0.1:443"));
        assert_eq!(at("http://localhost:9/v1"), vec![]);
        assert_eq!(at("http://example.com/v1"), vec![]);
    }

    #[test]
    fn a_read_that_times_out_before_its_deadline_is_read_again() {
        let (mut sock, mut server) = pair();
        // The socket has a 20 ms timeout that the cache takes for the time left (as when
        // it was within the slack of it): the read times out long before the deadline.
        sock.stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        sock.read_timeout = Some(Duration::from_secs(10));
        let ctx = Ctx::new(
            &CancelToken::new(),
            Duration::from_secs(10),
            Duration::from_secs(10),
        );
        let _entered = ctx.enter();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            server.write_all(b"late").unwrap();
            server
        });
        assert!(sock.await_input(NextTimeout::default()).unwrap());
        assert_eq!(sock.buffers.input(), b"late");
        assert_eq!(ctx.timed_out(), None);
        // Set again, to the time left.
        assert!(sock.read_timeout.unwrap() > Duration::from_secs(9));
        drop(writer.join().unwrap());
    }

    #[test]
    fn a_socket_timeout_is_set_again_only_when_off_by_more_than_the_slack() {
        let (sock, _server) = pair();
        let mut set = None;
        let ten = Duration::from_secs(10);
        Slack::bound(&sock.stream, &mut set, ten, true).unwrap();
        assert_eq!(set, Some(ten));
        // Within 1/64 of the time left (and 50 ms): kept.
        Slack::bound(
            &sock.stream,
            &mut set,
            ten - Duration::from_millis(40),
            true,
        )
        .unwrap();
        assert_eq!(set, Some(ten));
        Slack::bound(
            &sock.stream,
            &mut set,
            ten + Duration::from_millis(40),
            true,
        )
        .unwrap();
        assert_eq!(set, Some(ten));
        // Past it: set again.
        let later = ten + Duration::from_millis(60);
        Slack::bound(&sock.stream, &mut set, later, true).unwrap();
        assert_eq!(set, Some(later));
        assert_eq!(sock.stream.read_timeout().unwrap(), Some(later));
        // A short time left has a short slack.
        let short = Duration::from_millis(64);
        Slack::bound(&sock.stream, &mut set, short, true).unwrap();
        Slack::bound(
            &sock.stream,
            &mut set,
            short - Duration::from_millis(2),
            true,
        )
        .unwrap();
        assert_eq!(set, Some(short - Duration::from_millis(2)));
    }
}
