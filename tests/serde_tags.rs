//! The data model's enums named by a field of their own (`Message` by `role`; `ContentBlock`,
//! `Part`, `Source` and `StreamEvent` by `type`) read in one pass, with the results and the
//! errors of serde's derive (`#[serde(tag = ..)]`, which buffers each object first): checked
//! against that derive, over the same objects with the tag first, last and in between, read
//! from text, from bytes and from a `serde_json::Value`, and over malformed ones.

use std::time::{Duration, UNIX_EPOCH};

use pagent::llm::StreamEvent;
use pagent::{
    AssistantMessage, Audio, ContentBlock, Document, Image, Message, Part, Source, StopReason,
    ToolCall, ToolResultMessage, Usage, UserMessage,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What serde's derive makes of the same variants: the reference.
mod derived {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "role", rename_all = "snake_case")]
    pub enum Message {
        User(UserMessage),
        Assistant(AssistantMessage),
        ToolResult(ToolResultMessage),
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum ContentBlock {
        Text {
            text: String,
        },
        Thinking {
            thinking: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            signature: Option<String>,
        },
        ToolCall(ToolCall),
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Part {
        Text { text: String },
        Image(Image),
        Document(Document),
        Audio(Audio),
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Source {
        Url {
            url: String,
        },
        Inline {
            media_type: String,
            data: pagent::Blob,
        },
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum StreamEvent {
        TextDelta {
            text: String,
        },
        ThinkingDelta {
            text: String,
        },
        ThinkingSignature {
            signature: String,
        },
        ToolCallStart {
            id: String,
            name: String,
        },
        ToolCallDelta {
            index: usize,
            arguments: String,
        },
        Usage {
            usage: Usage,
        },
        Retry {
            attempt: u32,
            delay_ms: u64,
            error: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            at_ms: Option<u64>,
        },
    }
}

/// The serde error's text without its position: the derive's errors in a variant's fields,
/// read from its buffer, have none; the one-pass reading's say where the fault is.
fn words(e: serde_json::Error) -> String {
    let text = e.to_string();
    match text.find(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// Reads `json` as `T` and as its derived reference `R` from text, bytes and a `Value`, and
/// checks that both agree: the same value (as JSON) or the same error.
fn agree<T: DeserializeOwned + Serialize, R: DeserializeOwned + Serialize>(json: &str) -> usize {
    let as_json = |v: Result<Value, String>| v;
    let ours = [
        serde_json::from_str::<T>(json).map_err(words),
        serde_json::from_slice::<T>(json.as_bytes()).map_err(words),
    ];
    let theirs = [
        serde_json::from_str::<R>(json).map_err(words),
        serde_json::from_slice::<R>(json.as_bytes()).map_err(words),
    ];
    let mut oks = 0;
    for (ours, theirs) in ours.into_iter().zip(theirs) {
        let ours = as_json(ours.map(|v| serde_json::to_value(v).unwrap()));
        let theirs = as_json(theirs.map(|v| serde_json::to_value(v).unwrap()));
        assert_eq!(ours, theirs, "{json}");
        oks += usize::from(ours.is_ok());
    }
    if let Ok(value) = serde_json::from_str::<Value>(json) {
        let ours = serde_json::from_value::<T>(value.clone()).map_err(words);
        let theirs = serde_json::from_value::<R>(value).map_err(words);
        let ours = ours.map(|v| serde_json::to_value(v).unwrap());
        let theirs = theirs.map(|v| serde_json::to_value(v).unwrap());
        assert_eq!(ours, theirs, "{json} (as a Value)");
        oks += usize::from(ours.is_ok());
    }
    oks
}

/// An object's entries, each its key's JSON and its value's.
type Entries = Vec<(String, String)>;

/// The object's text with the keys of every object in it in the order `order` gives them.
fn reordered(value: &Value, order: &dyn Fn(Entries) -> Entries) -> String {
    match value {
        Value::Object(map) => {
            let entries = map
                .iter()
                .map(|(k, v)| (serde_json::to_string(k).unwrap(), reordered(v, order)))
                .collect();
            let inner: Vec<String> = order(entries)
                .into_iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|v| reordered(v, order)).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

/// The object as pagent writes it (the tag first) and with the keys of every object in it
/// reversed, rotated by one and by two: the tag last and in between.
fn orders(value: &impl Serialize) -> Vec<String> {
    let text = serde_json::to_string(value).unwrap();
    // The writer's own order, kept: `Value` sorts keys.
    let value: Value = serde_json::from_str(&text).unwrap();
    let mut out = vec![text];
    out.push(reordered(&value, &|mut e| {
        e.reverse();
        e
    }));
    for by in [1, 2] {
        out.push(reordered(&value, &move |mut e| {
            let n = e.len();
            if n > 0 {
                e.rotate_left(by % n);
            }
            e
        }));
    }
    out
}

fn messages() -> Vec<Message> {
    let call = {
        let mut call = ToolCall::default();
        call.id = "call_1".into();
        call.name = "look".into();
        call.arguments = r#"{"type":"x","role":"y"}"#.into();
        call
    };
    let result = ToolResultMessage::new("call_1", "look", "seen")
        .with_details(json!({"type": "tool_call", "role": "user", "nested": [{"type": 1}]}));
    let mut parts = UserMessage::new("see \"this\" \u{e9}");
    parts = parts
        .with_part(Image::new("image/png", b"\x89PNG".to_vec()))
        .with_part(Image::url("https://example.com/a.png"))
        .with_part(Document::pdf(b"%PDF-1.4".to_vec()).with_name("a.pdf"))
        .with_part(Audio::new("audio/wav", b"RIFF".to_vec()));
    vec![
        Message::user("hi"),
        Message::User(parts),
        Message::Assistant(
            AssistantMessage::new(
                vec![
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::thinking("no signature"),
                    ContentBlock::text("I will look."),
                    ContentBlock::ToolCall(call),
                ],
                StopReason::ToolUse,
            )
            .with_model("m")
            .with_usage(Usage::new(10, 2))
            .with_response_id("resp_1"),
        ),
        Message::ToolResult(result),
        Message::ToolResult(
            ToolResultMessage::new("call_2", "look", "")
                .with_parts(vec![Part::text("a"), Image::url("https://e/x.png").into()]),
        ),
    ]
}

fn stream_events() -> Vec<StreamEvent> {
    vec![
        StreamEvent::TextDelta { text: "a".into() },
        StreamEvent::ThinkingDelta { text: "b".into() },
        StreamEvent::ThinkingSignature {
            signature: "s".into(),
        },
        StreamEvent::ToolCallStart {
            id: "c".into(),
            name: "n".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 3,
            arguments: "{\"type\":".into(),
        },
        StreamEvent::Usage {
            usage: Usage::new(1, 2),
        },
        StreamEvent::Retry {
            attempt: 1,
            delay_ms: 20,
            error: "busy".into(),
            at: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
        },
        StreamEvent::Retry {
            attempt: 2,
            delay_ms: 40,
            error: "busy".into(),
            at: None,
        },
    ]
}

#[test]
fn every_variant_reads_as_the_derive_reads_it_wherever_the_tag_stands() {
    let mut read = 0;
    for message in messages() {
        for json in orders(&message) {
            assert_eq!(agree::<Message, derived::Message>(&json), 3, "{json}");
            assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), message);
            read += 1;
        }
    }
    for event in stream_events() {
        for json in orders(&event) {
            assert_eq!(agree::<StreamEvent, derived::StreamEvent>(&json), 3);
            assert_eq!(serde_json::from_str::<StreamEvent>(&json).unwrap(), event);
            read += 1;
        }
    }
    // The tag first, last and in between: each order of each object was another input.
    assert_eq!(read, 4 * (messages().len() + stream_events().len()));
}

#[test]
fn malformed_objects_fail_with_the_derives_words() {
    let cases: &[(&str, &str)] = &[
        (r#"{"content":"hi"}"#, "missing field `role`"),
        (r#"{}"#, "missing field `role`"),
        (
            r#"{"role":"system","content":"hi"}"#,
            "unknown variant `system`, expected one of `user`, `assistant`, `tool_result`",
        ),
        (
            r#"{"content":"hi","role":"robot"}"#,
            "unknown variant `robot`, expected one of `user`, `assistant`, `tool_result`",
        ),
        (
            r#"{"role":3,"content":"hi"}"#,
            "invalid type: integer `3`, expected variant identifier",
        ),
        (
            r#"{"role":null,"content":"hi"}"#,
            "invalid type: null, expected variant identifier",
        ),
        (
            r#"{"role":"user","role":"user","content":"hi"}"#,
            "duplicate field `role`",
        ),
        (
            r#"{"content":"hi","role":"user","role":"user"}"#,
            "duplicate field `role`",
        ),
        (r#"{"role":"user"}"#, "missing field `content`"),
        (
            r#"{"role":"user","content":7}"#,
            "invalid type: integer `7`, expected a string or a list of content parts",
        ),
        (
            r#"{"content":7,"role":"user"}"#,
            "invalid type: integer `7`, expected a string or a list of content parts",
        ),
        (
            r#""user""#,
            "invalid type: string \"user\", expected internally tagged enum Message",
        ),
        (
            r#"[3]"#,
            "invalid type: integer `3`, expected variant identifier",
        ),
        (r#"[]"#, "missing field `role`"),
        (
            r#"["user"]"#,
            "invalid length 0, expected struct UserMessage",
        ),
        (
            r#"{"role":"assistant","content":[{"type":"text"}],"stop_reason":"stop"}"#,
            "missing field `text`",
        ),
        (
            r#"{"role":"assistant","content":[{"text":"a","type":"image"}],"stop_reason":"stop"}"#,
            "unknown variant `image`, expected one of `text`, `thinking`, `tool_call`",
        ),
        (
            r#"{"role":"assistant","content":[{"type":"text","text":null}],"stop_reason":"stop"}"#,
            "invalid type: null, expected a string",
        ),
        (
            r#"{"role":"assistant","content":[{"text":null,"type":"text"}],"stop_reason":"stop"}"#,
            "invalid type: null, expected a string",
        ),
        (
            r#"{"role":"user","content":[{"type":"image","source":{"data":"!!","type":"inline","media_type":"image/png"}}]}"#,
            "invalid base64 data",
        ),
        (
            r#"{"role":"user","content":[{"type":"image","source":{"type":"ftp","url":"x"}}]}"#,
            "unknown variant `ftp`, expected `url` or `inline`",
        ),
        (
            r#"{"role":"user","content":"hi""#,
            "EOF while parsing an object",
        ),
    ];
    for (json, expected) in cases {
        agree::<Message, derived::Message>(json);
        let e = words(serde_json::from_str::<Message>(json).unwrap_err());
        assert!(e.starts_with(expected), "{json}: {e}");
    }
    // An error in a variant's fields says where it is: at the value, not the object's end.
    let e = serde_json::from_str::<Message>(r#"{"role":"user","content":7,"other":"padding"}"#)
        .unwrap_err();
    assert_eq!((e.line(), e.column()), (1, 26), "{e}");
    // The derive's list form: the tag, then the fields in order.
    let json = r#"["user","hi"]"#;
    assert_eq!(agree::<Message, derived::Message>(json), 3);
    assert_eq!(
        serde_json::from_str::<Message>(json).unwrap(),
        Message::user("hi")
    );
    let json = r#"["text","a"]"#;
    assert_eq!(agree::<ContentBlock, derived::ContentBlock>(json), 3);
    // An escaped tag and an escaped name read as the plain ones.
    let json = r#"{"\u0072ole":"us\u0065r","content":"hi"}"#;
    assert_eq!(agree::<Message, derived::Message>(json), 3);
    assert_eq!(
        serde_json::from_str::<Message>(json).unwrap(),
        Message::user("hi")
    );
    // A stream event with its tag missing, unknown, or a field of the wrong type before it.
    for (json, expected) in [
        (r#"{"text":"a"}"#, "missing field `type`"),
        (r#"{"type":"text","text":"a"}"#, "unknown variant `text`"),
        (
            r#"{"index":"x","type":"tool_call_delta","arguments":""}"#,
            "invalid type: string \"x\", expected usize",
        ),
    ] {
        agree::<StreamEvent, derived::StreamEvent>(json);
        let e = words(serde_json::from_str::<StreamEvent>(json).unwrap_err());
        assert!(e.starts_with(expected), "{json}: {e}");
    }
}

#[test]
fn a_block_a_part_and_a_source_read_on_their_own() {
    for part in [
        Part::text("t"),
        Image::new("image/png", b"\x89PNG".to_vec()).into(),
        Document::text("n.txt", "notes").into(),
    ] {
        for json in orders(&part) {
            assert_eq!(agree::<Part, derived::Part>(&json), 3);
            assert_eq!(serde_json::from_str::<Part>(&json).unwrap(), part);
        }
    }
    for block in [
        ContentBlock::text("t"),
        ContentBlock::thinking("h"),
        ContentBlock::Thinking {
            thinking: "h".into(),
            signature: Some("s".into()),
        },
    ] {
        for json in orders(&block) {
            assert_eq!(agree::<ContentBlock, derived::ContentBlock>(&json), 3);
            assert_eq!(serde_json::from_str::<ContentBlock>(&json).unwrap(), block);
        }
    }
    let source = Source::Url {
        url: "https://example.com".into(),
    };
    for json in orders(&source) {
        assert_eq!(agree::<Source, derived::Source>(&json), 3);
    }
}
