//! The peer end to end on a line output: routing, waits, strays, stalls.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

/// An output whose lines the test reads.
struct Lines(crossbeam_channel::Sender<Value>, Vec<u8>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.1.extend_from_slice(bytes);
        while let Some(i) = self.1.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.1.drain(..=i).collect();
            let _ = self
                .0
                .send(serde_json::from_slice(&line).expect("a JSON line"));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn peer() -> (Arc<Peer>, Arc<LineOut>, Receiver<Value>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let out =
        Arc::new(LineOut::spawn("test-out", Lines(tx, Vec::new()), Limits::default()).unwrap());
    (Arc::new(Peer::new(out.clone())), out, rx)
}

fn next(rx: &Receiver<Value>) -> Value {
    rx.recv_timeout(Duration::from_secs(10)).expect("a line")
}

fn never() -> CancelToken {
    CancelToken::new()
}

#[test]
fn a_call_gets_the_answer_the_other_side_sends_and_its_notices_first() {
    let (peer, _out, rx) = peer();
    let answering = {
        let peer = peer.clone();
        std::thread::spawn(move || {
            let request = next(&rx);
            assert_eq!(
                request,
                json!({"jsonrpc": "2.0", "id": 1, "method": "add", "params": [1, 2]})
            );
            assert!(peer.notice(1, json!("halfway")));
            let line = br#"{"jsonrpc":"2.0","id":1,"result":3}"#;
            assert_eq!(peer.deliver(line), Ok(Delivered::Answered(1)));
            // Answered once: the same answer again is late.
            assert_eq!(peer.deliver(line), Ok(Delivered::Late(1)));
        })
    };
    let mut notices = Vec::new();
    let result = peer.call("add", Some(&json!([1, 2])), &never(), None, &mut |n| {
        notices.push(n)
    });
    assert_eq!(result, Ok(json!(3)));
    assert_eq!(notices, [json!("halfway")]);
    answering.join().unwrap();
    assert_eq!(peer.waiting(), 0);
}

#[test]
fn error_answers_timeouts_cancels_and_strays_are_each_told_apart() {
    let (peer, _out, rx) = peer();
    // An error answer.
    let p = peer.clone();
    let answering = std::thread::spawn(move || {
        next(&rx);
        p.deliver(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#)
            .unwrap();
        rx
    });
    assert_eq!(
        peer.call("x", None, &never(), None, &mut |_| {}),
        Err(CallError::Rpc(RpcError::new(-32601, "no")))
    );
    let rx = answering.join().unwrap();
    // No answer: the timeout, and the request is forgotten.
    assert_eq!(
        peer.call(
            "y",
            None,
            &never(),
            Some(Duration::from_millis(20)),
            &mut |_| {}
        ),
        Err(CallError::TimedOut)
    );
    assert_eq!(next(&rx), json!({"jsonrpc": "2.0", "id": 2, "method": "y"}));
    assert_eq!(
        peer.deliver(br#"{"id":2,"result":1}"#),
        Ok(Delivered::Late(2))
    );
    // A cancel from another thread.
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let canceller = std::thread::spawn(move || {
        next(&rx);
        c.cancel();
    });
    assert_eq!(
        peer.call("z", None, &cancel, None, &mut |_| {}),
        Err(CallError::Cancelled)
    );
    canceller.join().unwrap();
    // Strays.
    assert_eq!(
        peer.deliver(br#"{"id":99,"result":1}"#),
        Ok(Delivered::Unknown(json!(99)))
    );
    assert_eq!(
        peer.deliver(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"unreadable"}}"#
        ),
        Ok(Delivered::Unaddressed(RpcError::new(-32700, "unreadable")))
    );
    assert_eq!(peer.deliver(b"  "), Ok(Delivered::Blank));
}

#[test]
fn closing_wakes_every_waiting_call_with_the_reason() {
    let (peer, _out, _rx) = peer();
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let peer = peer.clone();
            std::thread::spawn(move || peer.call("wait", None, &never(), None, &mut |_| {}))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while peer.waiting() < 3 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    peer.close(LinkError::Closed);
    for call in waiting {
        assert_eq!(
            call.join().unwrap(),
            Err(CallError::Failed(LinkError::Closed))
        );
    }
    assert!(matches!(
        peer.request("late", None, &never()),
        Err(LinkError::Closed)
    ));
}

#[test]
fn a_peer_that_stops_reading_closes_the_connection_and_every_waiting_call_learns_why() {
    // The output never takes a byte: the peer on the other side reads nothing.
    struct Deaf(Receiver<()>);
    impl Write for Deaf {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Err(std::io::Error::other("gone"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (_hold, deaf) = crossbeam_channel::bounded(0);
    let limits = Limits {
        max_bytes: 4096,
        stall: Duration::from_millis(100),
    };
    let out = Arc::new(LineOut::spawn("test-deaf", Deaf(deaf), limits).unwrap());
    let peer: Arc<Peer> = Arc::new(Peer::new(out));
    let waiting = {
        let peer = peer.clone();
        std::thread::spawn(move || peer.call("first", None, &never(), None, &mut |_| {}))
    };
    // The answers a flood of pings would get: queued up to the limit, then the stall.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut sent = 0;
    let error = loop {
        assert!(Instant::now() < deadline, "never stalled");
        match peer.respond(&json!(sent), &json!({})) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    // At most the batch the writer took (and blocks on) and a full queue: each answer is
    // 35 bytes or more, its line end included.
    assert!(
        sent <= 2 * 4096 / 35,
        "{sent} answers queued past the limit"
    );
    assert!(matches!(error, LinkError::Stalled { .. }), "{error:?}");
    assert_eq!(
        waiting.join().unwrap(),
        Err(CallError::Failed(error.clone()))
    );
    assert_eq!(peer.closed(), Some(error));
}

#[test]
fn serving_lines_answers_what_breaks_the_protocol_and_hands_on_the_rest() {
    let (peer, out, rx) = peer();
    let input = concat!(
        "not json\n",
        "\n",
        r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"a":1}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"note"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":[1],"method":"bad id"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":5,"error":"not an object"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":6,"result":"nobody asked"}"#,
        "\n",
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
        r#"{"jsonrpc":"2.0","id":"s","method":"last"}"#,
    );
    let calls = Mutex::new(Vec::new());
    peer.serve_lines(input.as_bytes(), 80, |call| calls.lock().push(call))
        .unwrap();
    assert_eq!(
        calls.into_inner(),
        [
            Call {
                id: Some(json!(1)),
                method: "hello".into(),
                params: Some(json!({"a": 1}))
            },
            Call {
                id: None,
                method: "note".into(),
                params: None
            },
            Call {
                id: Some(json!("s")),
                method: "last".into(),
                params: None
            },
        ]
    );
    out.finish().unwrap();
    let answers: Vec<(Value, i64)> = rx
        .try_iter()
        .map(|l| (l["id"].clone(), l["error"]["code"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        answers,
        [
            (Value::Null, codes::PARSE_ERROR),
            (Value::Null, codes::INVALID_REQUEST),
            (Value::Null, codes::INVALID_REQUEST),
        ]
    );
}
