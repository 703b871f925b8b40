//! The native wire: round trips, strict decoding, and mirrors that rebuild the published
//! snapshots line by line.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pagent::context::{CompactionReason, ContextUsage};
use pagent::llm::{Faux, FauxReply};
use pagent::wire::{self, Decoder, Mirror};
use pagent::{
    Agent, AgentEvent, AssistantMessage, Blob, ContentBlock, Document, Error, ErrorInfo, ErrorKind,
    Image, Message, Part, PartialMessage, RunStopReason, State, StopReason, TimeoutPhase, ToolCall,
    ToolOutput, ToolResultMessage, Usage, UserMessage, llm::StreamEvent,
};
use proptest::prelude::*;

// ---------------------------------------------------------------- generated events

fn text() -> impl Strategy<Value = String> {
    // Quotes, backslashes, line breaks (also U+2028), NUL, multi-byte characters.
    prop_oneof![
        "[a-z ]{0,12}",
        proptest::string::string_regex("[\\PC\\n\\r\\t\"\\\\\u{2028}\u{0}]{0,16}").unwrap(),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..3)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Tool details; `Some(null)` is left out: `"details": null` reads back as no details.
fn details() -> impl Strategy<Value = Option<serde_json::Value>> {
    prop::option::of(json_value().prop_filter("null details read back as none", |v| !v.is_null()))
}

fn usage() -> impl Strategy<Value = Usage> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(i, o, t)| {
        Usage::new(i.into(), o.into())
            .with_cache(1, 2)
            .with_reasoning(3)
            .with_total(t)
    })
}

fn context() -> impl Strategy<Value = ContextUsage> {
    (
        any::<u32>(),
        prop::option::of(1u32..),
        any::<u32>(),
        any::<u16>(),
    )
        .prop_map(|(used, window, estimated, omitted)| {
            ContextUsage::new(
                used.into(),
                window.map(u64::from),
                estimated.into(),
                omitted.into(),
            )
        })
}

fn compaction_reason() -> impl Strategy<Value = CompactionReason> {
    prop_oneof![
        Just(CompactionReason::Threshold),
        Just(CompactionReason::Overflow)
    ]
}

fn call() -> impl Strategy<Value = ToolCall> {
    (text(), "[a-z_]{1,8}", text())
        .prop_map(|(id, name, arguments)| ToolCall::new(id, name, arguments))
}

/// Text, images and documents, inline (any bytes) or by URL.
fn part() -> impl Strategy<Value = Part> {
    let bytes = || prop::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        text().prop_map(Part::text),
        ("image/[a-z]{1,5}", bytes()).prop_map(|(t, b)| Image::new(t, b).into()),
        text().prop_map(|url| Image::url(url).into()),
        (bytes(), prop::option::of(text())).prop_map(|(b, name)| {
            let d = Document::pdf(b);
            match name {
                Some(name) => d.with_name(name).into(),
                None => d.into(),
            }
        }),
        text().prop_map(|url| Document::url(url).into()),
    ]
}

fn parts() -> impl Strategy<Value = Vec<Part>> {
    prop::collection::vec(part(), 0..4)
}

fn result() -> impl Strategy<Value = ToolResultMessage> {
    (text(), text(), parts(), any::<bool>(), details()).prop_map(
        |(tool_call_id, tool_name, content, is_error, details)| {
            let mut r = ToolResultMessage::new(tool_call_id, tool_name, "").with_parts(content);
            r.is_error = is_error;
            r.details = details;
            r
        },
    )
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        Just(StopReason::Stop),
        Just(StopReason::Length),
        Just(StopReason::ToolUse),
        Just(StopReason::Error),
        Just(StopReason::Aborted),
    ]
}

fn run_stop() -> impl Strategy<Value = RunStopReason> {
    prop_oneof![
        Just(RunStopReason::Continuing),
        Just(RunStopReason::NoToolCalls),
        Just(RunStopReason::EmptyResponse),
        Just(RunStopReason::MaxTurns),
        Just(RunStopReason::Cancelled),
        Just(RunStopReason::Error),
    ]
}

/// Every kind of error, with any message: each goes over the wire and back.
fn error_info() -> impl Strategy<Value = ErrorInfo> {
    let phase = prop_oneof![
        Just(TimeoutPhase::Connect),
        Just(TimeoutPhase::FirstByte),
        Just(TimeoutPhase::Idle),
        Just(TimeoutPhase::Run),
    ];
    let status = prop::option::of(100u16..=599);
    let kind = prop_oneof![
        Just(ErrorKind::Auth),
        Just(ErrorKind::RateLimited),
        phase.prop_map(ErrorKind::Timeout),
        Just(ErrorKind::Connection),
        status.clone().prop_map(ErrorKind::Server),
        Just(ErrorKind::ContextOverflow),
        status.prop_map(ErrorKind::InvalidRequest),
        Just(ErrorKind::Stream),
        Just(ErrorKind::ReplyTooLarge),
        Just(ErrorKind::Aborted),
        Just(ErrorKind::Busy),
        Just(ErrorKind::Provider),
        Just(ErrorKind::Panic),
        Just(ErrorKind::Wire),
        Just(ErrorKind::Io),
        Just(ErrorKind::InvalidOutput),
    ];
    (kind, text()).prop_map(|(kind, message)| ErrorInfo::new(kind, message))
}

fn block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        text().prop_map(|text| ContentBlock::Text { text }),
        (text(), prop::option::of(text())).prop_map(|(thinking, signature)| {
            ContentBlock::Thinking {
                thinking,
                signature,
            }
        }),
        call().prop_map(ContentBlock::ToolCall),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        text().prop_map(Message::user),
        parts().prop_map(|p| Message::from(UserMessage::from_parts(p))),
        (
            prop::collection::vec(block(), 0..4),
            stop_reason(),
            usage(),
            text(),
            prop::option::of(text()),
            prop::option::of(text())
        )
            .prop_map(
                |(content, stop_reason, usage, model, response_id, error_message)| {
                    let mut m = AssistantMessage::new(content, stop_reason)
                        .with_usage(usage)
                        .with_model(model);
                    m.response_id = response_id;
                    m.error_message = error_message;
                    Message::Assistant(m)
                },
            ),
        result().prop_map(Message::ToolResult),
    ]
}

/// An instant as events carry one: whole milliseconds since the Unix epoch, or none.
fn instant() -> impl Strategy<Value = Option<SystemTime>> {
    prop::option::of(
        (0u64..5_000_000_000_000).prop_map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
    )
}

fn delta() -> impl Strategy<Value = StreamEvent> {
    prop_oneof![
        text().prop_map(|text| StreamEvent::TextDelta { text }),
        text().prop_map(|text| StreamEvent::ThinkingDelta { text }),
        text().prop_map(|signature| StreamEvent::ThinkingSignature { signature }),
        (text(), "[a-z]{1,6}").prop_map(|(id, name)| StreamEvent::ToolCallStart { id, name }),
        (0usize..3, text())
            .prop_map(|(index, arguments)| StreamEvent::ToolCallDelta { index, arguments }),
        usage().prop_map(|usage| StreamEvent::Usage { usage }),
        (any::<u32>(), any::<u64>(), text(), instant()).prop_map(
            |(attempt, delay_ms, error, at)| StreamEvent::Retry {
                attempt,
                delay_ms,
                error,
                at,
            }
        ),
    ]
}

/// Every kind but `MessageUpdate`, which needs the lines before it.
fn standalone_event() -> impl Strategy<Value = AgentEvent> {
    let arc = || message().prop_map(Arc::new);
    prop_oneof![
        Just(AgentEvent::AgentStart),
        any::<u32>().prop_map(|turn| AgentEvent::TurnStart { turn }),
        arc().prop_map(|message| AgentEvent::MessageStart { message }),
        arc().prop_map(|message| AgentEvent::MessageEnd { message }),
        (call(), instant()).prop_map(|(call, at)| AgentEvent::ToolStart { call, at }),
        (text(), text(), json_value(), any::<bool>()).prop_map(
            |(call_id, tool_name, arguments, rewritten)| AgentEvent::ToolExecute {
                call_id,
                tool_name,
                arguments,
                rewritten,
            }
        ),
        (text(), text(), text(), details()).prop_map(|(call_id, tool_name, content, details)| {
            AgentEvent::ToolUpdate {
                call_id,
                tool_name,
                partial: {
                    let mut out = ToolOutput::text(content);
                    out.details = details;
                    out
                },
            }
        }),
        (result(), prop::option::of(any::<u32>())).prop_map(|(r, us)| AgentEvent::ToolEnd {
            result: Arc::new(r),
            duration: us.map(|us| Duration::from_micros(u64::from(us))),
        }),
        (
            any::<u32>(),
            arc(),
            prop::collection::vec(result().prop_map(Arc::new), 0..3),
            run_stop(),
            context()
        )
            .prop_map(|(turn, message, tool_results, stop_reason, context)| {
                AgentEvent::TurnEnd {
                    turn,
                    message,
                    tool_results,
                    stop_reason,
                    context,
                }
            }),
        (compaction_reason(), any::<u16>(), context()).prop_map(|(reason, messages, context)| {
            AgentEvent::CompactionStart {
                reason,
                messages: messages.into(),
                context,
            }
        }),
        (
            compaction_reason(),
            context(),
            usage(),
            prop::option::of(error_info())
        )
            .prop_map(
                |(reason, context, usage, error)| AgentEvent::CompactionEnd {
                    reason,
                    context,
                    usage,
                    error
                }
            ),
        (
            prop::collection::vec(arc(), 0..4),
            run_stop(),
            usage(),
            prop::option::of(error_info())
        )
            .prop_map(|(messages, stop_reason, usage, error)| {
                AgentEvent::AgentEnd {
                    messages,
                    stop_reason,
                    usage,
                    error,
                }
            }),
    ]
}

/// A well-formed stream: standalone events, and assistant replies streamed as
/// `MessageStart`, `MessageUpdate`s with consistent partials, `MessageEnd`.
fn sequence() -> impl Strategy<Value = Vec<AgentEvent>> {
    let reply = (
        "[a-z0-9-]{0,8}",
        prop::collection::vec(delta(), 0..12),
        stop_reason(),
    )
        .prop_map(|(model, deltas, stop)| {
            let start = AssistantMessage::default().with_model(model.clone());
            let mut events = vec![AgentEvent::MessageStart {
                message: Arc::new(Message::Assistant(start)),
            }];
            let mut partial = PartialMessage::new(&model);
            for delta in deltas {
                partial = partial.apply(&delta);
                events.push(AgentEvent::MessageUpdate {
                    message: partial.clone(),
                    delta,
                });
            }
            events.push(AgentEvent::MessageEnd {
                message: Arc::new(Message::Assistant(partial.to_message(stop))),
            });
            events
        });
    let piece = prop_oneof![standalone_event().prop_map(|e| vec![e]), reply];
    prop::collection::vec(piece, 0..8).prop_map(|pieces| pieces.into_iter().flatten().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_standalone_event_round_trips(event in standalone_event()) {
        let line = wire::encode_event_line(&event);
        prop_assert!(!line.contains('\n') && !line.contains('\r'), "{}", line);
        prop_assert_eq!(wire::decode_event_line(&line).unwrap(), event);
    }

    #[test]
    fn every_stream_round_trips_through_a_decoder(events in sequence()) {
        let mut decoder = Decoder::new();
        for event in &events {
            let line = wire::encode_event_line(event);
            prop_assert!(!line.contains('\n'), "{}", line);
            prop_assert_eq!(&decoder.decode_line(&line).unwrap(), event);
        }
    }
}

#[test]
fn a_message_update_decoded_alone_holds_only_its_delta() {
    let before = PartialMessage::new("m").apply(&StreamEvent::text("Hello, "));
    let event = AgentEvent::MessageUpdate {
        message: before.apply(&StreamEvent::text("world")),
        delta: StreamEvent::text("world"),
    };
    let AgentEvent::MessageUpdate { message, delta } =
        wire::decode_event_line(&wire::encode_event_line(&event)).unwrap()
    else {
        panic!("not an update");
    };
    assert_eq!(delta, StreamEvent::text("world"));
    assert_eq!(message.text(), "world");
    assert_eq!(message.model(), "");
}

#[test]
fn delta_lines_stay_small_as_the_reply_grows() {
    let mut partial = PartialMessage::new("m");
    let mut sizes = Vec::new();
    for _ in 0..2000 {
        let delta = StreamEvent::text("0123456789");
        partial = partial.apply(&delta);
        sizes.push(
            wire::encode_event_line(&AgentEvent::MessageUpdate {
                message: partial.clone(),
                delta,
            })
            .len(),
        );
    }
    // O(n) in total: each line is the delta and a fixed envelope, never the whole reply.
    assert!(sizes.iter().all(|&n| n == sizes[0]), "{sizes:?}");
    assert!(sizes[0] < 120, "{}", sizes[0]);
}

// ---------------------------------------------------------------- strict decoding

fn rejected(line: &str) -> String {
    match wire::decode_event_line(line) {
        Err(Error::Wire(why)) => why,
        other => panic!("{line} was not rejected: {other:?}"),
    }
}

/// A native line is read in one pass from its text; a line that reading refuses (members
/// in a form it does not take, a member twice) is read again from a tree of the line, which
/// decides what is accepted and what each error says, as before.
#[test]
fn lines_in_every_form_the_envelope_takes_read_as_before() {
    let turn = |line: &str| match wire::decode_event_line(line) {
        Ok(AgentEvent::TurnStart { turn }) => turn,
        other => panic!("{line}: {other:?}"),
    };
    // Members in any order, `params` absent, escapes in `method` and `jsonrpc`.
    assert_eq!(
        turn(r#"{"params":{"turn":1},"method":"TurnStart","jsonrpc":"2.0"}"#),
        1
    );
    assert_eq!(
        turn(r#"{"jsonrpc":"2.0","method":"Turn\u0053tart","params":{"turn":2}}"#),
        2
    );
    assert_eq!(
        turn(r#"{"jsonrpc":"\u0032.0","method":"TurnStart","params":{"turn":3}}"#),
        3
    );
    assert!(matches!(
        wire::decode_event_line(r#"{"jsonrpc":"2.0","method":"AgentStart"}"#),
        Ok(AgentEvent::AgentStart)
    ));
    // A member twice, in the envelope or the params: the last one, as a JSON object reads.
    assert_eq!(
        turn(r#"{"jsonrpc":"2.0","method":"AgentEnd","method":"TurnStart","params":{"turn":4}}"#),
        4
    );
    assert_eq!(
        turn(r#"{"jsonrpc":"2.0","method":"TurnStart","params":{"turn":1,"turn":5}}"#),
        5
    );
    let line = r#"{"jsonrpc":"2.0","method":"MessageEnd","params":{"message":{"role":"user","role":"user","content":"hi"}}}"#;
    match wire::decode_event_line(line) {
        Ok(AgentEvent::MessageEnd { message }) => assert_eq!(*message, Message::user("hi")),
        other => panic!("{other:?}"),
    }
    // Refused with the words they had.
    let why = rejected(r#"{"jsonrpc":"2.0","method":"AgentStart","params":null}"#);
    assert_eq!(why, "params of AgentStart is not an object");
    let why = rejected(r#"{"jsonrpc":"2.0","method":"AgentStart","zzz":1,"extra":1}"#);
    assert_eq!(why, "unexpected member `extra` in a notification");
    let why = rejected(r#"{"jsonrpc":"2.0","method":7}"#);
    assert_eq!(why, "`method` is not a string");
    let why = rejected(r#"{"jsonrpc":"2.0","method":"TurnStart","params":{"turn":-1}}"#);
    assert!(
        why.starts_with("invalid params of TurnStart: invalid value: integer `-1`"),
        "{why}"
    );
    assert!(!why.contains("column"), "{why}");
}

#[test]
fn rejects_a_wrong_jsonrpc_version() {
    let why = rejected(r#"{"jsonrpc":"1.0","method":"AgentStart","params":{}}"#);
    assert!(why.contains("`jsonrpc`") && why.contains("2.0"), "{why}");
    let why = rejected(r#"{"jsonrpc":2.0,"method":"AgentStart","params":{}}"#);
    assert!(why.contains("`jsonrpc` is 2.0"), "{why}");
}

#[test]
fn rejects_a_missing_jsonrpc() {
    assert!(rejected(r#"{"method":"AgentStart","params":{}}"#).contains("no `jsonrpc`"));
}

#[test]
fn rejects_an_unknown_method() {
    let why = rejected(r#"{"jsonrpc":"2.0","method":"AgentPause","params":{}}"#);
    assert!(why.contains("unknown method `AgentPause`"), "{why}");
}

#[test]
fn rejects_a_missing_method() {
    assert!(rejected(r#"{"jsonrpc":"2.0","params":{}}"#).contains("no `method`"));
}

#[test]
fn rejects_missing_fields() {
    let why = rejected(
        r#"{"jsonrpc":"2.0","method":"ToolStart","params":{"call":{"id":"a","name":"f"}}}"#,
    );
    assert!(
        why.contains("ToolStart") && why.contains("missing field `arguments`"),
        "{why}"
    );
    let why = rejected(r#"{"jsonrpc":"2.0","method":"TurnEnd","params":{"turn":1}}"#);
    assert!(why.contains("missing field `message`"), "{why}");
}

#[test]
fn rejects_mistyped_fields() {
    let why = rejected(r#"{"jsonrpc":"2.0","method":"TurnStart","params":{"turn":"one"}}"#);
    assert!(
        why.contains("TurnStart") && why.contains("invalid type"),
        "{why}"
    );
}

#[test]
fn rejects_non_object_params() {
    let why = rejected(r#"{"jsonrpc":"2.0","method":"TurnStart","params":[1]}"#);
    assert!(
        why.contains("params of TurnStart is not an object"),
        "{why}"
    );
}

#[test]
fn rejects_an_id_on_a_notification() {
    let why = rejected(r#"{"jsonrpc":"2.0","id":7,"method":"AgentStart","params":{}}"#);
    assert!(why.contains("`id`"), "{why}");
}

#[test]
fn rejects_trailing_garbage() {
    let why = rejected(r#"{"jsonrpc":"2.0","method":"AgentStart","params":{}}{"#);
    assert!(why.contains("trailing characters"), "{why}");
}

#[test]
fn rejects_a_torn_line() {
    let why = rejected(r#"{"jsonrpc":"2.0","method":"TurnStart","params":{"tu"#);
    assert!(why.contains("incomplete JSON"), "{why}");
}

#[test]
fn rejects_a_line_break_inside_the_line() {
    let why = rejected("{\"jsonrpc\":\"2.0\",\n\"method\":\"AgentStart\",\"params\":{}}\n");
    assert!(why.contains("line break inside the line"), "{why}");
    // One trailing line end is the end of the line, not inside it.
    assert!(
        wire::decode_event_line(
            "{\"jsonrpc\":\"2.0\",\"method\":\"AgentStart\",\"params\":{}}\r\n"
        )
        .is_ok()
    );
}

#[test]
fn rejects_a_line_that_is_not_an_object() {
    assert!(rejected("[1,2]").contains("not a JSON object"));
}

#[test]
fn rejects_an_over_long_line() {
    let line = format!(
        r#"{{"jsonrpc":"2.0","method":"MessageStart","params":{{"message":{{"role":"user","content":"{}"}}}}}}"#,
        "x".repeat(wire::MAX_LINE_LEN)
    );
    let why = rejected(&line);
    assert!(
        why.contains(&format!("over the limit of {} bytes", wire::MAX_LINE_LEN)),
        "{why}"
    );
    // A raised limit takes it.
    let mut big = Decoder::new().max_line_len(2 * wire::MAX_LINE_LEN);
    assert!(big.decode_line(&line).is_ok());
}

#[test]
fn a_rejected_line_leaves_the_decoder_as_it_was() {
    let mut d = Decoder::new();
    let start = AgentEvent::MessageStart {
        message: Arc::new(Message::Assistant(
            AssistantMessage::default().with_model("m"),
        )),
    };
    d.decode_line(&wire::encode_event_line(&start)).unwrap();
    assert!(
        d.decode_line(r#"{"jsonrpc":"2.0","method":"MessageUpdate","params":{}}"#)
            .is_err()
    );
    let delta = StreamEvent::text("hi");
    let got = d.decode_line(&wire::encode_event_line(&AgentEvent::MessageUpdate {
        message: PartialMessage::new("m").apply(&delta),
        delta: delta.clone(),
    }));
    assert_eq!(
        got.unwrap(),
        AgentEvent::MessageUpdate {
            message: PartialMessage::new("m").apply(&delta),
            delta
        }
    );
}

// ---------------------------------------------------------------- mirrors

/// The common scenarios, and one that replaces the transcript between two runs and then
/// resets it (`MessagesReplaced`, the event outside a run; kept out of the common set, whose
/// session test expects a transcript that only grows).
fn scenarios() -> Vec<common::Recorded> {
    let mut all = common::record_all();
    let faux = Faux::default()
        .reply(FauxReply::text("one"))
        .reply(FauxReply::text("two"));
    let builder = Agent::builder().model("faux-1").provider(faux);
    all.push(common::record("replaced_then_reset", builder, |agent| {
        agent.prompt("Say hello.").unwrap();
        agent
            .replace_messages([Message::user("Earlier."), Message::user("Say it again.")])
            .unwrap();
        agent.prompt("Again.").unwrap();
        agent.follow_up("Later.").unwrap();
        assert_eq!(agent.reset().unwrap().len(), 1);
    }));
    all
}

#[test]
fn decoding_a_run_gives_back_every_event_the_agent_emitted() {
    for r in scenarios() {
        let mut decoder = Decoder::new();
        let lines: Vec<&str> = r.native.lines().collect();
        assert_eq!(lines.len(), r.events.len(), "{}", r.name);
        for (i, (line, (event, _))) in lines.iter().zip(&r.events).enumerate() {
            assert_eq!(
                &decoder.decode_line(line).unwrap(),
                event,
                "{} line {}",
                r.name,
                i + 1
            );
        }
    }
}

#[test]
fn mirror_replay_equals_published_snapshots() {
    for r in scenarios() {
        let mut mirror = Mirror::from_state(r.initial.clone());
        let mut i = 0;
        mirror
            .read_lines(r.native.as_bytes(), |event, state| {
                let (published_event, published) = &r.events[i];
                assert_eq!(event, published_event, "{} line {}", r.name, i + 1);
                assert_eq!(
                    &state.timeline(),
                    published,
                    "{} line {} ({})",
                    r.name,
                    i + 1,
                    event.name()
                );
                i += 1;
            })
            .unwrap();
        assert_eq!(i, r.events.len(), "{}", r.name);
        assert_eq!(
            mirror.state().timeline(),
            r.agent.snapshot().timeline(),
            "{}",
            r.name
        );
    }
}

/// A mirror folds in place, and a state it handed out stays as it was handed out.
#[test]
fn a_held_mirror_state_never_changes_under_later_lines() {
    for r in scenarios() {
        let lines: Vec<&str> = r.native.lines().collect();
        let half = lines.len() / 2;
        let mut mirror = Mirror::from_state(r.initial.clone());
        for line in &lines[..half] {
            mirror.apply_line(line).unwrap();
        }
        let held = mirror.state().clone();
        let seen = held.timeline();
        for line in &lines[half..] {
            mirror.apply_line(line).unwrap();
        }
        assert_eq!(held.timeline(), seen, "{}", r.name);
        assert_eq!(
            mirror.state().timeline(),
            r.agent.snapshot().timeline(),
            "{}",
            r.name
        );
        // Nothing held: the next lines fold into the same state, not copies of it.
        let mut mirror = Mirror::from_state(r.initial.clone());
        mirror.apply_line(lines[0]).unwrap();
        let at = Arc::as_ptr(mirror.state());
        for line in &lines[1..] {
            mirror.apply_line(line).unwrap();
        }
        assert_eq!(Arc::as_ptr(mirror.state()), at, "{}", r.name);
        assert_eq!(
            mirror.state().timeline(),
            r.agent.snapshot().timeline(),
            "{}",
            r.name
        );
    }
}

/// A mirror started from the snapshot published with any event (in the middle of a reply
/// too) folds the lines after it into exactly the snapshots the agent published for them.
#[test]
fn a_mirror_started_from_any_published_snapshot_goes_on_to_the_same_snapshots() {
    for r in scenarios() {
        let lines: Vec<&str> = r.native.lines().collect();
        let mut mid_reply = 0;
        for k in 1..lines.len() {
            let start = &r.events[k - 1].1;
            mid_reply += usize::from(start.streaming_message.is_some());
            let mut mirror = Mirror::from_state(start.clone());
            for (i, line) in lines.iter().enumerate().skip(k) {
                let events = mirror.apply_line(line).unwrap();
                let (published_event, published) = &r.events[i];
                assert_eq!(
                    &events,
                    std::slice::from_ref(published_event),
                    "{} line {}",
                    r.name,
                    i + 1
                );
                assert_eq!(
                    &mirror.state().timeline(),
                    published,
                    "{} from line {k}, line {}",
                    r.name,
                    i + 1
                );
            }
        }
        assert!(
            mid_reply > 0 || !r.native.contains("MessageUpdate"),
            "{}: no snapshot in the middle of a reply",
            r.name
        );
    }
}

/// Images and documents in a prompt, a tool's progress and its result come back from the
/// native lines whole, and the agent holds each image's bytes once however many snapshots
/// and messages carry it.
#[test]
fn images_and_documents_ride_the_wire_whole_and_stay_shared_in_the_agent() {
    let all = scenarios();
    let r = all.iter().find(|r| r.name == "images").unwrap();
    let state = r.agent.snapshot();
    let prompt = &state.messages[0];
    assert_eq!(prompt.parts().len(), 4);
    let image = prompt.parts()[1].data().unwrap();
    assert_eq!(image.as_bytes(), common::PNG);
    // Every event and snapshot that held the prompt shares its one copy of the bytes.
    let mut holders = 0;
    for (event, snapshot) in &r.events {
        if let Some(first) = snapshot.messages.first() {
            assert!(Blob::ptr_eq(first.parts()[1].data().unwrap(), image));
            holders += 1;
        }
        if let AgentEvent::MessageStart { message } | AgentEvent::MessageEnd { message } = event
            && message.role() == "user"
        {
            assert!(Blob::ptr_eq(message.parts()[1].data().unwrap(), image));
        }
    }
    assert!(holders > 10, "{holders}");
    let result = state.messages[2].as_tool_result().unwrap();
    assert_eq!(result.text(), "the screen:");
    assert!(
        matches!(&result.content[1], Part::Image(i) if i.source.media_type() == Some("image/png"))
    );
    // On the wire: base64, inline.
    assert!(
        r.native
            .contains(r#""data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAY=""#),
        "{}",
        r.native
    );
    assert!(
        r.native
            .contains(r#"{"type":"url","url":"https://example.com/spec.pdf"}"#)
    );
    assert!(
        r.native
            .contains(r#""partial":{"content":[{"type":"image""#)
    );
    let mut mirror = Mirror::from_state(r.initial.clone());
    mirror.read_lines(r.native.as_bytes(), |_, _| {}).unwrap();
    assert_eq!(mirror.state().messages[0], state.messages[0]);
    assert_eq!(mirror.state().messages[2], state.messages[2]);
    // Debug never shows the bytes.
    let debug = format!("{:?}", state.messages[0]);
    assert!(
        debug.contains("Blob(26 bytes)") && !debug.contains("137, 80"),
        "{debug}"
    );
}

#[test]
fn every_scenario_runs_the_paths_it_is_named_for() {
    let all = scenarios();
    let stop = |name: &str| {
        let r = all.iter().find(|r| r.name == name).unwrap();
        r.agent.snapshot().stop_reason
    };
    assert_eq!(stop("maxturns"), Some(RunStopReason::MaxTurns));
    assert_eq!(stop("provider_error"), Some(RunStopReason::Error));
    assert_eq!(stop("abort_mid_stream"), Some(RunStopReason::Cancelled));
    assert_eq!(stop("abort_in_tool"), Some(RunStopReason::Cancelled));
    assert_eq!(stop("elicitation"), Some(RunStopReason::NoToolCalls));
    assert_eq!(stop("abort_in_elicitation"), Some(RunStopReason::Cancelled));
    assert_eq!(stop("empty_response"), Some(RunStopReason::EmptyResponse));
    let panics = all.iter().find(|r| r.name == "listener_panic").unwrap();
    assert_eq!(panics.agent.snapshot().listener_panics, 1);
    let names: Vec<&str> = all
        .iter()
        .flat_map(|r| r.events.iter().map(|(e, _)| e.name()))
        .collect();
    for method in wire::METHODS {
        assert!(names.contains(&method), "no scenario emits {method}");
    }
}

#[test]
fn mirror_reports_the_line_that_does_not_decode() {
    let mut mirror = Mirror::new();
    let input = "{\"jsonrpc\":\"2.0\",\"method\":\"AgentStart\",\"params\":{}}\n\nnot json\n";
    let err = mirror.read_lines(input.as_bytes(), |_, _| {}).unwrap_err();
    assert!(
        err.to_string().starts_with("wire: line 3: invalid JSON"),
        "{err}"
    );
    assert!(mirror.state().is_streaming);
}

#[test]
fn mirror_refuses_an_over_long_line_without_holding_it() {
    let mut mirror = Mirror::new().decoder(Decoder::new().max_line_len(64));
    let mut input = String::from("{\"jsonrpc\":\"2.0\",\"method\":\"AgentStart\",\"params\":{}}\n");
    input.push_str(&"x".repeat(10_000));
    input.push('\n');
    let err = mirror.read_lines(input.as_bytes(), |_, _| {}).unwrap_err();
    assert_eq!(
        err,
        pagent::Error::Wire("line 2: line of 10000 bytes is over the limit of 64 bytes".into())
    );
    assert!(
        mirror.state().is_streaming,
        "the line before it stays folded in"
    );
}

// ---------------------------------------------------------------- mirrors joining mid-run

/// The invariants `State` documents under `# Consistency` that a mirror can keep.
fn assert_consistent(state: &State, context: &str) {
    assert_eq!(
        state.is_streaming_reply,
        state.streaming_message.is_some(),
        "is_streaming_reply disagrees with streaming_message: {context}"
    );
    let ids: Vec<&str> = state
        .pending_tool_calls
        .iter()
        .map(|p| p.call.id.as_str())
        .collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "a call pending twice: {context}");
    if !state.is_streaming {
        assert!(
            !state.is_streaming_reply && ids.is_empty(),
            "streaming or calls pending outside a run: {context}"
        );
    }
}

#[test]
fn mirror_joining_mid_reply_is_streaming() {
    let r = common::record_all()
        .into_iter()
        .find(|r| r.name == "text")
        .expect("the text scenario");
    let lines: Vec<&str> = r.native.lines().collect();
    let first_update = lines
        .iter()
        .position(|l| l.contains("\"MessageUpdate\""))
        .expect("the reply streams");
    let mut mirror = Mirror::new();
    for line in &lines[first_update..] {
        let event = one(mirror.apply_line(line).unwrap());
        assert_consistent(mirror.state(), event.name());
        if let AgentEvent::MessageUpdate { .. } = event {
            assert!(mirror.state().is_streaming && mirror.state().is_streaming_reply);
        }
    }
    assert_eq!(
        mirror.state().timeline().messages.to_vec(),
        r.agent.snapshot().timeline().messages.to_vec()[1..],
        "the transcript holds what ended after the join (all but the prompt)"
    );
}

#[test]
fn mirror_joining_mid_tool_call_shows_it_pending_until_it_ends() {
    let r = common::record_all()
        .into_iter()
        .find(|r| r.name == "tool_progress")
        .expect("the tool_progress scenario");
    let lines: Vec<&str> = r.native.lines().collect();
    let first_update = lines
        .iter()
        .position(|l| l.contains("\"ToolUpdate\""))
        .expect("the tool publishes progress");
    let mut mirror = Mirror::new();
    let AgentEvent::ToolUpdate { call_id, .. } =
        one(mirror.apply_line(lines[first_update]).unwrap())
    else {
        panic!("not a ToolUpdate: {}", lines[first_update]);
    };
    let published = r.events[first_update]
        .1
        .pending_tool_calls
        .iter()
        .find(|p| p.call.id == call_id)
        .expect("the agent shows the call pending")
        .clone();
    let pending = &mirror.state().pending_tool_calls;
    assert_eq!(pending.len(), 1, "the one call the mirror heard of");
    assert_eq!(pending[0].call.id, published.call.id);
    assert_eq!(pending[0].call.name, published.call.name);
    assert_eq!(
        pending[0].call.arguments, "",
        "arguments are not on the update"
    );
    assert_eq!(pending[0].progress, published.progress);
    let tool_end = first_update
        + lines[first_update..]
            .iter()
            .position(|l| l.contains("\"ToolEnd\"") && l.contains(&format!("\"{call_id}\"")))
            .unwrap();
    for line in &lines[first_update + 1..=tool_end] {
        mirror.apply_line(line).unwrap();
    }
    assert!(
        !mirror
            .state()
            .pending_tool_calls
            .iter()
            .any(|p| p.call.id == call_id)
    );
    // The results that ended after the join: the other call of the batch may have ended
    // before it or after, as the two threads ran.
    let ended_before = r.events[first_update].1.tool_results.len();
    assert_eq!(
        mirror.state().tool_results.iter().collect::<Vec<_>>(),
        r.events[tool_end]
            .1
            .tool_results
            .iter()
            .skip(ended_before)
            .collect::<Vec<_>>()
    );
    assert!(
        mirror
            .state()
            .tool_results
            .iter()
            .any(|result| result.tool_call_id == call_id)
    );
}

/// For every recorded run and every line a mirror could join at, the mirror keeps the
/// state's invariants after each line and agrees with the agent's published snapshot on all
/// the lines can tell: running, streaming, the turn once a turn event was read, and the
/// pending calls it heard of (in the agent's order, with the same progress).
#[test]
fn a_mirror_joining_at_any_line_keeps_the_state_invariants() {
    for r in scenarios() {
        let lines: Vec<&str> = r.native.lines().collect();
        for join in 0..lines.len() {
            let mut mirror = Mirror::new();
            let mut heard: Vec<String> = Vec::new();
            let mut heard_arguments: Vec<String> = Vec::new();
            let mut turn_known = false;
            for (i, line) in lines.iter().enumerate().skip(join) {
                let event = one(mirror.apply_line(line).unwrap());
                let context = format!(
                    "{} joined at line {} after line {}",
                    r.name,
                    join + 1,
                    i + 1
                );
                let (state, published) = (mirror.state(), &r.events[i].1);
                assert_consistent(state, &context);
                assert_eq!(state.is_streaming, published.is_streaming, "{context}");
                assert_eq!(
                    state.is_streaming_reply, published.is_streaming_reply,
                    "{context}"
                );
                match &event {
                    AgentEvent::ToolStart { call, .. } => {
                        heard.push(call.id.clone());
                        heard_arguments.push(call.id.clone());
                    }
                    AgentEvent::ToolExecute { call_id, .. } => {
                        heard.push(call_id.clone());
                        heard_arguments.push(call_id.clone());
                    }
                    AgentEvent::ToolUpdate { call_id, .. } => heard.push(call_id.clone()),
                    AgentEvent::TurnStart { .. } | AgentEvent::TurnEnd { .. } => turn_known = true,
                    _ => {}
                }
                if turn_known {
                    assert_eq!(state.turn, published.turn, "{context}");
                }
                let expected: Vec<(&str, _, _, _)> = published
                    .pending_tool_calls
                    .iter()
                    .filter(|p| heard.contains(&p.call.id))
                    .map(|p| {
                        // A call joined by its progress alone: its arguments came before.
                        let known = heard_arguments.contains(&p.call.id);
                        let arguments = known.then(|| p.arguments.clone()).flatten();
                        (p.call.id.as_str(), &p.progress, arguments, p.rewritten)
                    })
                    .collect();
                let got: Vec<(&str, _, _, _)> = state
                    .pending_tool_calls
                    .iter()
                    .map(|p| {
                        (
                            p.call.id.as_str(),
                            &p.progress,
                            p.arguments.clone(),
                            p.rewritten,
                        )
                    })
                    .collect();
                assert_eq!(got, expected, "{context}");
            }
        }
    }
}

// ---------------------------------------------------------------- fuzz seeds

/// Writes the seeds of the fuzz targets that need wire lines and session files: the native
/// lines of every recorded run to `$PAGENT_FUZZ_SEEDS/wire/<run>.jsonl`, its transcript as a
/// session file to `$PAGENT_FUZZ_SEEDS/session/<run>.jsonl`. Run by `fuzz/seeds.sh`, so that
/// the seeds are built from the runs the tests record and nothing is kept twice.
#[test]
#[ignore = "writes the fuzz seeds; run by fuzz/seeds.sh"]
fn write_fuzz_seeds() {
    let dir = std::path::PathBuf::from(
        std::env::var_os("PAGENT_FUZZ_SEEDS").expect("PAGENT_FUZZ_SEEDS names a directory"),
    );
    let (wire_dir, session_dir) = (dir.join("wire"), dir.join("session"));
    std::fs::create_dir_all(&wire_dir).unwrap();
    std::fs::create_dir_all(&session_dir).unwrap();
    for r in common::record_all() {
        let file = format!("{}.jsonl", r.name);
        std::fs::write(wire_dir.join(&file), &r.native).unwrap();
        let messages = r.agent.snapshot().messages.clone();
        pagent::session::save(session_dir.join(&file), messages.iter().map(|m| &**m)).unwrap();
    }
}

/// The one event a native line stands for.
fn one(events: Vec<AgentEvent>) -> AgentEvent {
    let [event]: [AgentEvent; 1] = events.try_into().expect("a native line is one event");
    event
}
