//! The connection every type of `pagent::redis` talks through: commands packed by the
//! `redis` crate, replies read by a small RESP2 reader of our own.
//!
//! The replies the fleet reads are arrays of bulk strings and integers, a few hundred
//! bytes each; the `redis` crate's general parser (built on `combine`, for every RESP
//! version and its push messages) took a quarter of a worker thread's instructions to read
//! them (callgrind, see the module docs' "Capacity"). This reader reads RESP2 from a buffer
//! of its own, and builds the same [`::redis::Value`]s, so everything else (`Cmd`,
//! `FromRedisValue`, the crate's error kinds) is the crate's as before. An error reply is
//! handed to the crate's parser, which knows every error code; it is the one part of a
//! reply that is not on the path of a prompt.
//!
//! What a server sends is not trusted: a reply that is not RESP2, a length out of range, a
//! nesting deeper than [`MAX_DEPTH`] or a line longer than the buffer is an error (an I/O
//! error of kind `InvalidData`), and a connection cut mid-reply one of kind
//! `UnexpectedEof`; neither panics, and a length is never allocated before its bytes came.
//! After any failure the connection is closed ([`Wire::is_open`] is false): what follows
//! on it cannot be told apart from the rest of a reply.
//!
//! The connection speaks RESP2 whatever the URL asks (`?protocol=resp3`): the fleet needs
//! nothing of RESP3.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::Duration;

use ::redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, RedisResult, Value};

/// The read buffer: also the longest line (a simple string, an error, a length) accepted.
const BUFFER: usize = 16 * 1024;
/// How deep replies may nest: the fleet's go four deep (`XREADGROUP`'s five).
pub(crate) const MAX_DEPTH: usize = 16;
/// The longest bulk string accepted: Redis's own default limit (`proto-max-bulk-len`).
const MAX_BULK: usize = 512 * 1024 * 1024;
/// The most elements an array may announce.
const MAX_ELEMENTS: usize = 1 << 24;

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes),
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(bytes),
        }
    }

    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }
}

/// One connection to a Redis server.
pub(crate) struct Wire {
    stream: Stream,
    buf: Box<[u8]>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    open: bool,
    db: i64,
}

impl Wire {
    /// Connects to the server of `info` within `timeout` (per address tried), logs in and
    /// selects its database. Reads and writes then wait at most `timeout`.
    ///
    /// # Errors
    /// An I/O error when the server cannot be reached (a timeout among them), the server's
    /// error when it refuses the login or the database.
    pub(crate) fn connect(info: &ConnectionInfo, timeout: Duration) -> RedisResult<Wire> {
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let mut last = None;
                let mut connected = None;
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, timeout) {
                        Ok(s) => {
                            connected = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let stream = connected.ok_or_else(|| {
                    last.unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, "the host has no address")
                    })
                })?;
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
            other => {
                return Err(RedisError::from(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("redis: connections to {other} are not supported"),
                )));
            }
        };
        let mut wire = Wire {
            stream,
            buf: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            open: true,
            db: info.redis_settings().db(),
        };
        wire.set_read_timeout(Some(timeout))?;
        wire.set_write_timeout(Some(timeout))?;
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = ::redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password).query::<()>(&mut wire)?;
        }
        if wire.db != 0 {
            ::redis::cmd("SELECT").arg(wire.db).query::<()>(&mut wire)?;
        }
        Ok(wire)
    }

    /// How long a read waits (`None`: for ever).
    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        Ok(self.stream.set_read_timeout(timeout)?)
    }

    /// How long a write waits (`None`: for ever).
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        Ok(self.stream.set_write_timeout(timeout)?)
    }

    /// Sends a packed command (or several) without reading a reply.
    ///
    /// # Errors
    /// The I/O error of the write (the connection is closed then).
    pub(crate) fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        if !self.open {
            return Err(closed().into());
        }
        self.stream.write_all(cmd).map_err(|e| self.fail(e))
    }

    /// Reads one reply. An error reply is a [`Value::ServerError`] (the connection stays
    /// usable).
    ///
    /// # Errors
    /// An I/O error: the connection failed, timed out, or sent what is not a RESP2 reply
    /// (`InvalidData`); the connection is closed then.
    pub(crate) fn recv_response(&mut self) -> RedisResult<Value> {
        if !self.open {
            return Err(closed().into());
        }
        self.value(0).map_err(|e| self.fail(e))
    }

    /// Whether the connection may still carry commands (no failure seen on it).
    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    fn fail(&mut self, e: io::Error) -> RedisError {
        self.open = false;
        self.start = 0;
        self.end = 0;
        e.into()
    }

    /// Reads more bytes after the unread ones, moving those to the buffer's start first
    /// when the buffer's end is reached.
    fn fill(&mut self) -> io::Result<()> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            return Err(invalid("a reply line longer than the read buffer"));
        }
        let n = self.stream.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection in the middle of a reply",
            ));
        }
        self.end += n;
        Ok(())
    }

    /// The next line's type byte and the range of its content in `buf` (consumed, with its
    /// `\r\n`).
    fn line(&mut self) -> io::Result<(u8, usize, usize)> {
        let mut scanned = 0;
        loop {
            let unread = &self.buf[self.start + scanned..self.end];
            if let Some(i) = memchr::memchr(b'\n', unread) {
                let newline = self.start + scanned + i;
                if newline == self.start || self.buf[newline - 1] != b'\r' {
                    return Err(invalid("a reply line that does not end with \\r\\n"));
                }
                let kind = self.buf[self.start];
                let content = (self.start + 1, newline - 1);
                self.start = newline + 1;
                return Ok((kind, content.0, content.1.max(content.0)));
            }
            scanned = self.end - self.start;
            self.fill()?;
        }
    }

    fn value(&mut self, depth: usize) -> io::Result<Value> {
        let (kind, from, to) = self.line()?;
        match kind {
            b'+' => {
                let line = &self.buf[from..to];
                Ok(if line == b"OK" {
                    Value::Okay
                } else {
                    Value::SimpleString(String::from_utf8_lossy(line).into_owned())
                })
            }
            b':' => Ok(Value::Int(number(&self.buf[from..to])?)),
            b'-' => {
                // Given whole to the crate's parser, which knows the error codes.
                let mut line = Vec::with_capacity(to - from + 3);
                line.push(b'-');
                line.extend_from_slice(&self.buf[from..to]);
                line.extend_from_slice(b"\r\n");
                match ::redis::parse_redis_value(&line) {
                    Ok(value @ Value::ServerError(_)) => Ok(value),
                    _ => Err(invalid("an error reply that does not parse")),
                }
            }
            b'$' => match number(&self.buf[from..to])? {
                -1 => Ok(Value::Nil),
                n if n < 0 || n as u64 > MAX_BULK as u64 => {
                    Err(invalid("a bulk string length out of range"))
                }
                n => self.bulk(n as usize).map(Value::BulkString),
            },
            b'*' => match number(&self.buf[from..to])? {
                -1 => Ok(Value::Nil),
                n if n < 0 || n as u64 > MAX_ELEMENTS as u64 => {
                    Err(invalid("an array length out of range"))
                }
                _ if depth >= MAX_DEPTH => Err(invalid("a reply nested too deep")),
                n => {
                    let n = n as usize;
                    // Room grows with the elements that came, not with what was announced.
                    let mut items = Vec::with_capacity(n.min(64));
                    for _ in 0..n {
                        items.push(self.value(depth + 1)?);
                    }
                    Ok(Value::Array(items))
                }
            },
            _ => Err(invalid("a reply of a type RESP2 does not have")),
        }
    }

    /// A bulk string's `n` bytes and its `\r\n`.
    fn bulk(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n.min(BUFFER));
        while out.len() < n {
            if self.start == self.end {
                self.fill()?;
            }
            let take = (n - out.len()).min(self.end - self.start);
            out.extend_from_slice(&self.buf[self.start..self.start + take]);
            self.start += take;
        }
        while self.end - self.start < 2 {
            self.fill()?;
        }
        if &self.buf[self.start..self.start + 2] != b"\r\n" {
            return Err(invalid("a bulk string longer than its length"));
        }
        self.start += 2;
        Ok(out)
    }
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send_packed_command(cmd)?;
        self.recv_response()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send_packed_command(cmd)?;
        let mut values = Vec::with_capacity(count);
        let mut refused = None;
        for i in 0..offset + count {
            match self.recv_response()? {
                // A command of a transaction (`MULTI`) refused as it was queued.
                Value::ServerError(e) if i < offset => {
                    refused.get_or_insert(e);
                }
                _ if i < offset => {}
                value => values.push(value),
            }
        }
        match refused {
            Some(e) => Err(e.into()),
            None => Ok(values),
        }
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        ::redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

fn number(digits: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("a length or integer that is not a number"))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("redis: malformed reply: {what}"),
    )
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "redis: the connection failed before",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connection to a loopback server that sends `bytes` once a command came, then
    /// closes.
    fn replying(bytes: &'static [u8]) -> Wire {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut first = [0u8; 64];
            let _ = s.read(&mut first);
            // In pieces, so that lines and lengths are split across reads (some 50 of
            // them: a long reply is not sent 3 bytes a millisecond).
            for piece in bytes.chunks((bytes.len() / 50).max(3)) {
                if s.write_all(piece).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let info: ConnectionInfo = format!("redis://{addr}/").parse().unwrap();
        Wire::connect(&info, Duration::from_secs(5)).unwrap()
    }

    fn read(bytes: &'static [u8]) -> (RedisResult<Value>, bool) {
        let mut wire = replying(bytes);
        wire.send_packed_command(b"PING\r\n").unwrap();
        let value = wire.recv_response();
        (value, wire.is_open())
    }

    /// What reading `bytes` failed with: malformed (`InvalidData`) or cut short
    /// (`UnexpectedEof`), told by the message (the crate keeps the I/O error to itself).
    fn kind(bytes: &'static [u8]) -> io::ErrorKind {
        let (value, open) = read(bytes);
        assert!(!open, "the connection is closed after {value:?}");
        let e = value.unwrap_err();
        assert!(e.is_io_error(), "{e:?}");
        let message = e.to_string();
        if message.contains("malformed reply") {
            io::ErrorKind::InvalidData
        } else if message.contains("closed the connection") {
            io::ErrorKind::UnexpectedEof
        } else {
            panic!("{message}")
        }
    }

    #[test]
    fn the_replies_of_the_fleet_read_as_the_crate_reads_them() {
        let bytes: &[u8] = b"*6\r\n:1\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$4\r\nkind\r\n$6\r\nprompt\r\n*0\r\n+OK\r\n";
        let (value, open) = read(bytes);
        assert!(open);
        assert_eq!(value.unwrap(), ::redis::parse_redis_value(bytes).unwrap());
        for bytes in [
            &b"+PONG\r\n"[..],
            b":-42\r\n",
            b"*-1\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-ERR unknown command\r\n",
        ] {
            let (value, open) = read(Box::leak(bytes.to_vec().into_boxed_slice()));
            assert_eq!(value.unwrap(), ::redis::parse_redis_value(bytes).unwrap());
            assert!(open);
        }
    }

    #[test]
    fn an_error_reply_keeps_its_code_for_the_crate() {
        let mut wire = replying(b"-NOSCRIPT No matching script.\r\n");
        let e = ::redis::cmd("EVALSHA")
            .arg("x")
            .arg(0)
            .query::<()>(&mut wire)
            .unwrap_err();
        assert_eq!(e.code(), Some("NOSCRIPT"));
        assert!(wire.is_open());
    }

    /// Every condition that passes, as Redis words it on the wire, is one a worker or a
    /// mirror waits out (`Error::Connection`), whatever the crate's kind for it; any other
    /// error reply is `Error::Io`, which is not.
    #[test]
    fn every_passing_error_reply_is_waited_out_and_no_other_is() {
        let query = |reply: String| {
            let mut wire = replying(Box::leak(reply.into_bytes().into_boxed_slice()));
            let e = ::redis::cmd("GET")
                .arg("x")
                .query::<()>(&mut wire)
                .unwrap_err();
            super::super::map_err(&e, false)
        };
        for code in super::super::PASSING {
            let e = query(format!("-{code} the server says to wait\r\n"));
            assert!(matches!(e, crate::Error::Connection(_)), "{code}: {e:?}");
        }
        for code in [
            "ERR",
            "WRONGTYPE",
            "NOPERM",
            "NOGROUP",
            "EXECABORT",
            "BUSYGROUP",
        ] {
            let e = query(format!("-{code} not a condition that passes\r\n"));
            assert!(matches!(e, crate::Error::Io { .. }), "{code}: {e:?}");
        }
    }

    #[test]
    fn a_malformed_reply_is_an_error_that_closes_the_connection() {
        for bytes in [
            &b"?what\r\n"[..],
            b":12x\r\n",
            b"$abc\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"$3\r\nabcdef\r\n",
            b"+no carriage return\n",
            b"\r\n",
            // RESP3 on a RESP2 connection.
            b"%1\r\n+a\r\n+b\r\n",
        ] {
            let bytes = Box::leak(bytes.to_vec().into_boxed_slice());
            assert_eq!(
                kind(bytes),
                io::ErrorKind::InvalidData,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn a_huge_length_is_refused_before_anything_is_allocated_for_it() {
        // 2^62 bytes, 2^40 elements: refused at once; 100 MB or 10 million elements announced and never sent: the
        // connection's end, with only what came held.
        assert_eq!(
            kind(b"$4611686018427387904\r\n"),
            io::ErrorKind::InvalidData
        );
        assert_eq!(kind(b"*1099511627776\r\n"), io::ErrorKind::InvalidData);
        assert_eq!(kind(b"$100000000\r\nabc"), io::ErrorKind::UnexpectedEof);
        assert_eq!(kind(b"*10000000\r\n:1\r\n"), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_reply_nested_deeper_than_the_limit_is_refused() {
        let deep: &'static [u8] = Box::leak("*1\r\n".repeat(MAX_DEPTH + 1).into_bytes().into());
        assert_eq!(kind(deep), io::ErrorKind::InvalidData);
        let mut ok = "*1\r\n".repeat(MAX_DEPTH);
        ok.push_str(":1\r\n");
        let ok: &'static [u8] = Box::leak(ok.into_bytes().into());
        let (value, open) = read(ok);
        assert!(open);
        assert_eq!(value.unwrap(), ::redis::parse_redis_value(ok).unwrap());
    }

    #[test]
    fn a_line_longer_than_the_buffer_is_refused() {
        let long: &'static [u8] =
            Box::leak(format!("+{}\r\n", "x".repeat(BUFFER)).into_bytes().into());
        assert_eq!(kind(long), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_reply_cut_short_is_an_end_of_file_and_closes_the_connection() {
        for bytes in [&b"*3\r\n:1\r\n"[..], b"$10\r\nabc", b"+OK", b"$3\r\nabc"] {
            let bytes = Box::leak(bytes.to_vec().into_boxed_slice());
            assert_eq!(kind(bytes), io::ErrorKind::UnexpectedEof);
        }
        // And nothing more is sent or read on it.
        let mut wire = replying(b":1");
        wire.send_packed_command(b"PING\r\n").unwrap();
        assert!(wire.recv_response().is_err());
        assert!(wire.send_packed_command(b"PING\r\n").is_err());
        assert!(wire.recv_response().is_err());
    }
}
