//! The wire: an agent's events as line-delimited JSON-RPC 2.0, for programs in any language,
//! browsers (over an SSE or WebSocket bridge) and log files.
//!
//! Each event is one line: a JSON-RPC 2.0 notification
//! `{"jsonrpc":"2.0","method":"<EventName>","params":{..}}`, UTF-8, ended by `\n`. A line never
//! holds a raw line break (JSON escapes those inside strings), so splitting a stream on `\n`
//! always gives whole events. What goes over the wire is exactly the timeline a Rust listener
//! sees, in the same order.
//!
//! - [`encode_event_line`] / [`decode_event_line`]: one event to one line and back;
//!   [`Decoder`] for a whole stream (see [`MessageUpdate`](#messageupdate-carries-the-delta)),
//!   which also [reads pagent's own lines](#reading-pagent-lines).
//! - [`Writer`]: a listener that appends the lines to any `io::Write`, flushed per event; it
//!   also writes the two [`pagent` dialects](#the-pagent-dialects).
//! - [`DialectEncoder`]: the per-event encoder of any [`Dialect`] (pagent's
//!   `encode_event_line`), for a program that moves the lines itself.
//! - [`Mirror`]: decodes lines and folds them with [`State::apply`](crate::State::apply), so
//!   a remote UI rebuilds the snapshots the agent published; it reads native, pagent v1 and
//!   pagent v4 lines, told from the first line (a Rust UI follows a Python pagent agent).
//! - [`serve`]: a stdio agent server: JSON-RPC requests in, responses, event notifications
//!   and tool approval requests out.
//!
//! # The native dialect
//!
//! Members of the envelope: `jsonrpc` (the string `"2.0"`), `method` (the event name),
//! `params` (an object). No `id`: events are notifications. Messages, tool calls, results,
//! usage and deltas inside `params` use the crate's serde shapes:
//!
//! - a message is tagged by `role`: `{"role":"user","content":<parts>}`,
//!   `{"role":"assistant","content":[block..],"stop_reason":"stop|length|tool_use|error|aborted",
//!   "usage":{..},"model":"..","error_message":".." (optional)}`,
//!   `{"role":"tool_result","tool_call_id":"..","tool_name":"..","content":<parts>,
//!   "is_error":false,"details":{..} (optional)}`;
//! - `<parts>`, what a user message or a tool result carries, is a string when it is one text
//!   part (`"content":"Say hi."`), else a list of parts tagged by `type`:
//!   `{"type":"text","text":".."}`, `{"type":"image","source":<source>}`,
//!   `{"type":"document","source":<source>,"name":"report.pdf" (optional)}`, where a source is
//!   `{"type":"url","url":".."}` or `{"type":"inline","media_type":"image/png","data":"<base64>"}`
//!   (standard base64; see [the size policy](#images-and-documents-the-size-policy));
//! - an assistant content block is tagged by `type`: `{"type":"text","text":".."}`,
//!   `{"type":"thinking","thinking":"..","signature":".." (optional)}`,
//!   `{"type":"tool_call","id":"..","name":"..","arguments":"<raw JSON text>"}`;
//! - a tool call is `{"id":"..","name":"..","arguments":"<raw JSON text>"}`;
//! - a compaction's summary is a user message with a `summary` mark:
//!   `{"role":"user","content":"[Previous conversation summary]\n..","summary":{"replaces":12,"tokens":3100}}`
//!   (see [`Summary`](crate::context::Summary));
//! - context figures are `{"used":1834,"window":4096,"share":0.4477...,"estimated":212,"omitted":0}`
//!   ([`ContextUsage`](crate::context::ContextUsage)): `window` and `share` are left out
//!   when the window is unknown, and a reader works `share` out from `used` and `window`;
//! - usage is `{"input":0,"output":0,"cache_read":0,"cache_write":0,"reasoning":0,"total":0}`
//!   (each count may be left out and reads as 0);
//! - a run stop reason is one of `"continuing"` (on `TurnEnd` only), `"no_tool_calls"`,
//!   `"empty_response"`, `"max_turns"`, `"cancelled"`, `"error"`;
//! - an error is `{"kind":"<kind>","message":".."}` ([`ErrorInfo`](crate::ErrorInfo)), the
//!   kind one of `"auth"`, `"rate_limited"`, `"timeout"`, `"connection"`, `"server"`,
//!   `"context_overflow"`, `"invalid_request"`, `"stream"`, `"reply_too_large"`, `"aborted"`,
//!   `"busy"`, `"provider"`, `"panic"`, `"wire"`, `"io"` (see
//!   [`ErrorKind`](crate::ErrorKind)); a `timeout` adds `"phase"` (`"connect"`,
//!   `"first_byte"`, `"idle"`, `"run"`), a `server` or `invalid_request` error adds the HTTP
//!   `"status"` when it has one:
//!   `{"kind":"rate_limited","message":"http status 429: slow down"}`,
//!   `{"kind":"timeout","phase":"first_byte","message":"timed out waiting for the first byte"}`,
//!   `{"kind":"server","status":503,"message":"http status 503: overloaded"}`.
//!
//! | method | params | when |
//! |---|---|---|
//! | `AgentStart` | `{}` | a run begins |
//! | `TurnStart` | `turn`: integer, from 1 | a turn (one model call and its tools) begins |
//! | `MessageStart` | `message`: message | a message begins; an assistant reply starts empty, with its `model` |
//! | `MessageUpdate` | `delta`: delta (below) | a piece of the assistant reply arrived |
//! | `MessageEnd` | `message`: message | a message is complete and appended to the transcript |
//! | `ToolStart` | `call`: tool call, `at_ms`: integer, when it started (milliseconds since the Unix epoch; optional) | a tool call starts, arguments final as the model wrote them (raw JSON text) |
//! | `ToolExecute` | `call_id`: string, `tool_name`: string, `arguments`: the JSON value the tool runs with, `rewritten`: bool | the call passed validation and `before_tool_call`: its tool runs now, with the model's arguments parsed or (`rewritten: true`) those the hook put in their place |
//! | `ToolUpdate` | `call_id`: string, `tool_name`: string, `partial`: `{"content":<parts>,"details":{..} (optional)}` | a running tool published progress |
//! | `ElicitationStart` | `id`: string, `tool_call_id`: string, `request`: `{"server","message","mode":"form","requested_schema":{..}}` or `{"server","message","mode":"url","url","elicitation_id" (optional)}` | a running tool call asks the user a question and waits (answer it with the wire server's `elicitation/answer`) |
//! | `ElicitationEnd` | `id`: string, `tool_call_id`: string, `answer`: `{"action":"accept","content":{..}}` (`content` only for a form), `{"action":"decline"}` or `{"action":"cancel"}` | the question was answered, or given up (`cancel`) |
//! | `ToolEnd` | `result`: tool result (as the `tool_result` message, without `role`), `duration_us`: integer, how long the call took in microseconds since its `ToolStart` (optional) | a tool call ended |
//! | `CompactionStart` | `reason`: `"threshold"` or `"overflow"`, `messages`: integer, the transcript messages being summarized, `context`: context figures | before a model call, the context is compacted; the summary follows as a `MessageStart` / `MessageEnd` of a user message with a `summary` mark, unless it fails |
//! | `CompactionEnd` | `reason`, `context`: the figures after it, `usage`: the summary calls' usage, `error`: error (present exactly when it failed) | the compaction ended |
//! | `OutputChecked` | `turn`: integer, `schema`: the output schema's name, `attempt`: integer from 1, `raw`: the answer's text, then `value`: the answer as JSON (present also when it is `null`) or `error`: what is wrong with it, exactly one of the two | a run with an output schema checked its structured answer |
//! | `TurnEnd` | `turn`: integer, `message`: the turn's assistant message, `tool_results`: the list of tool results, `stop_reason`: run stop reason, `context`: context figures (a line without it reads as zeros) | a turn ended |
//! | `AgentEnd` | `messages`: the list of messages the run appended, `stop_reason`, `usage`, `error`: error (present exactly when the run failed: `stop_reason` is `"error"`) | the run ended (exactly once per run) |
//! | `MessagesReplaced` | `messages`: the whole new transcript | between runs: `Agent::reset` (empty) or `Agent::replace_messages` replaced the transcript |
//!
//! A `MessageUpdate` delta is tagged by `type`:
//!
//! | `type` | fields |
//! |---|---|
//! | `text_delta` | `text` |
//! | `thinking_delta` | `text` (reasoning) |
//! | `thinking_signature` | `signature` |
//! | `tool_call_start` | `id`, `name` |
//! | `tool_call_delta` | `index` (which call of the reply, counting `tool_call_start`s from 0), `arguments` (the next piece of the raw JSON text) |
//! | `usage` | `usage` (replaces the previous report) |
//! | `retry` | `attempt`, `delay_ms`, `error`, `at_ms` (when the wait began, milliseconds since the Unix epoch; optional): the request failed and is sent again |
//!
//! One example line per method (a run that calls a tool, then answers):
//!
//! ```text
//! {"jsonrpc":"2.0","method":"AgentStart","params":{}}
//! {"jsonrpc":"2.0","method":"TurnStart","params":{"turn":1}}
//! {"jsonrpc":"2.0","method":"MessageStart","params":{"message":{"role":"user","content":"Say hi."}}}
//! {"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"thinking_delta","text":"User wants"}}}
//! {"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"text_delta","text":"Let me check."}}}
//! {"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"tool_call_start","id":"call_1","name":"echo"}}}
//! {"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"tool_call_delta","index":0,"arguments":"{\"text\":\"hi\"}"}}}
//! {"jsonrpc":"2.0","method":"MessageUpdate","params":{"delta":{"type":"usage","usage":{"input":12,"output":8,"cache_read":0,"cache_write":0,"reasoning":0,"total":20}}}}
//! {"jsonrpc":"2.0","method":"MessageEnd","params":{"message":{"role":"assistant","content":[{"type":"thinking","thinking":"User wants"},{"type":"text","text":"Let me check."},{"type":"tool_call","id":"call_1","name":"echo","arguments":"{\"text\":\"hi\"}"}],"stop_reason":"tool_use","usage":{"input":12,"output":8,"cache_read":0,"cache_write":0,"reasoning":0,"total":20},"model":"faux-1"}}}
//! {"jsonrpc":"2.0","method":"ToolStart","params":{"call":{"id":"call_1","name":"echo","arguments":"{\"text\":\"hi\"}"},"at_ms":1764583200000}}
//! {"jsonrpc":"2.0","method":"ToolExecute","params":{"call_id":"call_1","tool_name":"echo","arguments":{"text":"hi"},"rewritten":false}}
//! {"jsonrpc":"2.0","method":"ToolUpdate","params":{"call_id":"call_1","tool_name":"echo","partial":{"content":"half"}}}
//! {"jsonrpc":"2.0","method":"ToolEnd","params":{"result":{"tool_call_id":"call_1","tool_name":"echo","content":"hi","is_error":false},"duration_us":1250}}
//! {"jsonrpc":"2.0","method":"TurnEnd","params":{"turn":1,"message":{"role":"assistant","content":[{"type":"text","text":"Let me check."}],"stop_reason":"tool_use","usage":{"input":12,"output":8,"cache_read":0,"cache_write":0,"reasoning":0,"total":20},"model":"faux-1"},"tool_results":[{"tool_call_id":"call_1","tool_name":"echo","content":"hi","is_error":false}],"stop_reason":"continuing","context":{"used":47,"estimated":7,"omitted":0}}}
//! {"jsonrpc":"2.0","method":"AgentEnd","params":{"messages":[{"role":"user","content":"Say hi."}],"stop_reason":"no_tool_calls","usage":{"input":42,"output":12,"cache_read":0,"cache_write":0,"reasoning":0,"total":54}}}
//! ```
//!
//! (The `TurnEnd` and `AgentEnd` lines are shortened here: they carry the whole messages.)
//!
//! ## `MessageUpdate` carries the delta
//!
//! In Rust, [`AgentEvent::MessageUpdate`](crate::AgentEvent::MessageUpdate) holds both the
//! partial reply so far (cheap to share in-process) and the delta. On the wire a
//! `MessageUpdate` line carries only the delta, so a reply of n deltas costs O(n) bytes,
//! not O(n²). A reader rebuilds the partial: start from the assistant `MessageStart`'s
//! message, apply each delta (append text to the last block of its kind or start one, start
//! a tool call block, append argument text to call `index`, replace the usage), drop it at
//! `MessageEnd`. [`Decoder`] does exactly that and gives back the very events the agent
//! emitted; [`decode_event_line`] decodes one line with a fresh decoder, so a `MessageUpdate`
//! decoded alone carries a partial built from its own delta only.
//!
//! ## Strict decoding
//!
//! [`Decoder::decode_line`] accepts one line (a trailing `\n` or `\r\n` is allowed) and
//! rejects, with an [`Error::Wire`](crate::Error::Wire) naming the problem: invalid JSON or
//! trailing garbage after the object, a line that is not an object, `jsonrpc` missing or not
//! the string `"2.0"`, an `id` member, any other unexpected member, a missing or unknown
//! `method`, `params` that is not an object, a missing required field or a field of the wrong
//! type, a line break inside the line, and a line over [`MAX_LINE_LEN`] bytes (64 MiB; see [`Decoder::max_line_len`]).
//! Inside an error: a missing `kind` or `message`, an unknown kind or timeout phase, a
//! timeout without its `phase`, a `phase` on another kind, a `status` on a kind other than
//! `server` and `invalid_request` or outside 100..=599.
//! Unknown fields *inside* `params` are ignored, so a newer writer can add fields without
//! breaking older readers. Fields marked optional above may be left out; a tool result's
//! `"details": null` reads back as no details.
//!
//! ## Images and documents: the size policy
//!
//! Inline bytes are written inline, as base64, in every line that carries their message:
//! each line stands alone, so [`decode_event_line`] decodes any line by itself, a
//! [`Mirror`] may join a stream at any line (a Redis event log read from the middle, a
//! client attaching to a running agent), and the mirror rebuilds the very state the agent
//! published. The cost is the bytes times 4/3 times the lines that carry the message: a
//! user message with an image rides in its `MessageStart`, its `MessageEnd` and the run's
//! `AgentEnd` (three times); a tool result in its `ToolEnd`, `MessageStart`, `MessageEnd`,
//! the turn's `TurnEnd` and the `AgentEnd` (five times). A URL source is written as its URL.
//! Lines over [`MAX_LINE_LEN`] (64 MiB) are refused by a default [`Decoder`]: raise
//! [`Decoder::max_line_len`] for runs that carry more. To keep a wire log small, give the
//! model URLs, or strip the bytes from what you log in a listener of your own.
//!
//! In the agent, the bytes of a message exist once, however many snapshots, events and
//! requests hold it ([`Blob`](crate::Blob)); a mirror decodes each line's copy, and its state
//! keeps the one of the `MessageEnd`.
//!
//! ## What the wire does not carry
//!
//! Only events are on the wire. The steering and follow-up queues and the listener-panic
//! counters of a [`State`](crate::State) change without an event, and so do the settings
//! (`set_system_prompt`, `set_model`, `set_tools`, `set_thinking`, and what a `before_turn`
//! hook changes; only each reply's model rides on its `MessageStart`). A [`Mirror`] therefore
//! matches [`State::timeline`](crate::State::timeline) of the agent's snapshots, which
//! leaves those out, not the snapshots themselves; start it from the agent's snapshot to get
//! the settings as they were. A mirror that joins in the middle of a run (a client attaching
//! to a running agent) keeps the state's invariants from what the lines it read say; see
//! [`Mirror`]'s `# Consistency`.
//!
//! # The `pagent` dialects
//!
//! [`Dialect::PagentV1`] and [`Dialect::PagentV4`] write the methods and params of the Python
//! pagent wire (`pagent` 0.7.30: `pagent.wire` and `pagentv4.adapters.acp`), so consumers
//! written for pagent read our stream unchanged. The mapping:
//!
//! | ours | pagent |
//! |---|---|
//! | `AgentStart` and the prompt's `MessageStart` | `RunBegin` `{user_input}`: the text parts of the first user message of the run (`""` when it has none) |
//! | `TurnStart { turn }` | `TurnBegin` `{turn}`, counted from 0 |
//! | `MessageUpdate` text / thinking delta | `TextDelta` / `ReasoningDelta` `{text}`; other deltas are not written |
//! | assistant `MessageEnd` | v1 `StepEnd`, v4 `TurnResult`: `{content, tool_calls, reasoning_content, usage}`; v1 tool calls are `{"id","type":"function","function":{"name","arguments"}}`, v4 `{"type":"function","id","name","arguments"}`; usage is the OpenAI SDK's `CompletionUsage` as pagent dumps it: `{"completion_tokens","prompt_tokens","total_tokens","completion_tokens_details","prompt_tokens_details"}`, the reasoning count in `completion_tokens_details.reasoning_tokens` and the cache counts in `prompt_tokens_details.cached_tokens` / `cache_write_tokens` (each details object `null` when it has no count), and `usage` itself `null` when the reply has no counts (the provider reported none) |
//! | `ToolStart` + `ToolEnd` | `ToolCallBegin` `{tool_call_id, name, arguments}` then `ToolResult` `{tool_call_id, name, content, ok}`, `content` the text parts of the result, `ok` = not `is_error` |
//! | `TurnEnd` | `TurnEnd` `{turn, stopped}` (+ v4 `stop_reason`) |
//! | `CompactionStart`, `CompactionEnd`, the summary message | not written: pagent's decoders refuse a method they do not know, and pagent has no compaction event; the requests after it are what changed |
//! | `AgentEnd` | `RunEnd`: v1 the fields of the last `StepEnd`; v4 `{turn, stop_reason}` of the last `TurnEnd` |
//! | `ElicitationStart`, `ElicitationEnd` | not written: pagent's wire has no questions for the user |
//! | `OutputChecked` | not written: pagent has no structured answers (the answer is the text of its reply's `StepEnd` / `TurnResult`, and a repair turn a turn like any other) |
//!
//! Our streams are regular where pagent's own are not: every `TurnBegin` has one `TurnEnd`,
//! every `ToolCallBegin` is followed by its `ToolResult`. Where the two models differ:
//!
//! - pagent's `user_input` and `ToolResult.content` are strings: the dialects write the text
//!   parts of a message, and its images and documents are not written (pagent has no field
//!   for them; a pagent consumer never sees them, and a mirror of the lines has the text
//!   only). A steering or follow-up message is not written at all, as before.
//! - pagent runs a turn's tools one after the other, each `ToolCallBegin` followed by its
//!   `ToolResult`; ours run in parallel and end in completion order. The dialect writes the
//!   pairs in call order: a call's `ToolCallBegin` when it starts (or, while an earlier call
//!   of the batch still runs, once that one's `ToolResult` is written), its `ToolResult`
//!   when it ended. Everything is written as it comes.
//! - pagent goes on to another turn only after tool calls. When our run goes on after a final
//!   answer because a steering or follow-up message waits, the dialect ends the pagent run
//!   there (`TurnEnd` stopped, `RunEnd`) and the next turn opens a new one, whose `RunBegin`
//!   carries the waiting message; turns count from 0 again.
//! - v1: a turn is `stopped` exactly when its reply called no tools. A run that ends on a
//!   turn that called tools (`max_turns`, an abort) ends with `stopped: false`, as pagent v1
//!   writes a `max_turns` ending.
//! - v4: `stop_reason` is ours, except that a reply without tool calls is a final answer
//!   (`no_tool_calls` or `empty_response`).
//! - `max_turns` ([`FinalTurn`](crate::FinalTurn)): tools that ran are always written. The
//!   calls of a final answer turn do not run and have no `ToolStart`: v4 writes them in the
//!   turn's `TurnResult` only and ends it `max_turns`, as pagent v4 writes its synthesis turn
//!   (the default `FinalTurn::ToolsNotRun` is that turn, line for line); v1, which has no
//!   final turn, writes each with its result (`ok: false`, "not run: ..."), since a v1 turn
//!   whose calls have no results is one pagent v1 never writes. `FinalTurn::Off` is pagent
//!   v1's `max_turns`, line for line; in v4, which never runs tools on a turn that stops,
//!   that run's last turn writes its tool pairs and then `TurnEnd {stopped: true,
//!   stop_reason: "max_turns"}` (pagent's grammar checker flags that turn, and only that).
//! - v4, an abort: the run ends with `TurnEnd {stopped: true, stop_reason: "cancelled"}` and
//!   `RunEnd {stop_reason: "cancelled"}` of the same turn, after the tool pairs of the calls
//!   that started (a call the abort cut short ends `ok: false`; pagent writes its
//!   `ToolCallBegin` alone). A reply the abort cut (or that never came) has no `TurnResult`,
//!   as in pagent, and its calls, which never run, no tool pairs. An abort between turns (after a
//!   `continuing` `TurnEnd`) opens the next turn and ends it so; pagent 0.7.30 writes a second
//!   `TurnEnd` for the last turn instead, and one without any `TurnBegin` for an abort right
//!   after `RunBegin`.
//! - A failed run (`RunStopReason::Error`: a provider error, a panic in the loop) breaks off,
//!   in both dialects: the deltas and the tool pairs written so far stay, and the failed
//!   reply's `StepEnd` / `TurnResult`, its `TurnEnd` and the `RunEnd` are not written. That is
//!   what pagent's stream does when its provider fails (v1 `Agent.arun_wire` and v4
//!   `Runner.run` raise the exception out of the event iterator; neither has an `error`
//!   stop reason), so a pagent consumer tells a failed run by its missing `RunEnd`. The next
//!   run, if any, starts with its `RunBegin`. The native stream has the error.
//!
//! The tests check both dialects with pagent's own decoders and its sequence grammar
//! (`check_wire.py --strict-fields --strict-turns`) on every scenario of the suite (aborts at
//! every checkpoint included; a failed run's only complaint is its missing `RunEnd`), and
//! compare the method sequences with captures of pagent itself.
//!
//! ## Byte for byte
//!
//! The lines are pagent's to the byte: Python's `json.dumps` defaults (`", "` between
//! items, `": "` after keys, raw UTF-8 as `ensure_ascii=False` writes it, the same string
//! escapes), the envelope as `{"jsonrpc", "method", "params"}` and the params in the order of
//! pagent's dataclass fields (usage in the OpenAI SDK's field order). An unknown tool's
//! result is pagent's text, `error: unknown tool 'nope'; available: ['echo']` (the names as
//! Python writes a sorted list of strings), in the native stream too.
//!
//! A test runs every scenario of pagent's `make_captures.py` (text, reasoning, one and two
//! tools, an unknown tool, `max_turns`, and in v4 cancels at four points and a steer) against
//! pagent's own mock server (`tests/data/pagent-wire/mock_openai_server.py`, Python's
//! standard library), configured as pagent was, and compares our lines with pagent 0.7.30's
//! captures as bytes. "Configured as pagent was": v1 with `FinalTurn::Off` and a request
//! without `stream_options` (pagent v1 sends none, so the server reports no usage and it
//! writes `"usage": null`; set it with `OpenAiCompat::extra_body(json!({"stream_options":
//! {"include_usage": false}}))`), v4 as the defaults are. pagent's lines carry no ids or
//! times, so no field is normalized; only pagent's irregular v4 framing is made regular in
//! the captures before comparing, one rule per difference:
//!
//! - `max_turns`: pagent leaves out the `TurnEnd` of the last tool turn, before its synthesis
//!   turn; ours writes `TurnEnd {stopped: false, stop_reason: "continuing"}` there.
//! - A cancel right after `RunBegin`: pagent writes `TurnEnd {turn: 0, cancelled}` without a
//!   `TurnBegin`; ours writes `TurnBegin {turn: 0}` first.
//! - A cancel right after a `continuing` `TurnEnd`: pagent ends the same turn k a second time
//!   (`cancelled`); ours opens turn k + 1 and ends it `cancelled`, and `RunEnd` names k + 1.
//! - A cancel while a tool runs: pagent writes that call's `ToolCallBegin` alone; ours
//!   follows it with the result the call got (`ok: false`, `cancelled: the run was aborted
//!   before this tool call ran`).
//!
//! ## Reading pagent lines
//!
//! [`Decoder::for_dialect`] with [`Dialect::PagentV1`] or [`Dialect::PagentV4`] reads
//! pagent's own lines (pagent 0.7.30's v1 `Agent.arun_wire`, v4
//! `Runner.run(return_type="acp")`) and ours in those dialects; [`Decoder::detecting`], which
//! [`Mirror::new`] uses, tells native, v1 and v4 apart from the lines. A pagent line stands
//! for zero or more of our events ([`Decoder::decode_events`], [`Mirror::apply_line`]), in
//! the order of [`AgentEvent`](crate::AgentEvent)'s grammar, so a [`Mirror`] rebuilds the
//! transcript, the streaming reply and the run state of a pagent run. pagent carries less
//! than our events; the rest is synthesized from the lines before, the same way every time:
//!
//! | pagent | ours |
//! |---|---|
//! | `RunBegin` `{user_input}` | `AgentStart`; the prompt waits for the run's first turn |
//! | `TurnBegin` `{turn: k}` | `TurnStart {turn: k + 1}`; in the run's first turn then the prompt's `MessageStart` / `MessageEnd` (a user message of `user_input`; none for `""`) |
//! | `TextDelta` / `ReasoningDelta` | `MessageUpdate` with a `text_delta` / `thinking_delta`, the first of a reply after the reply's `MessageStart` (an empty assistant message, model `""`) |
//! | v1 `StepEnd`, v4 `TurnResult` | the reply's `MessageEnd` (after its `MessageStart` when no delta came): a thinking block of `reasoning_content`, a text block of `content`, then the tool calls (blocks only where not empty; calls in v1's OpenAI shape or v4's flat one); stop reason `tool_use` with calls, else `stop`; usage from the OpenAI object: `prompt_tokens`, `completion_tokens`, `total_tokens`, `prompt_tokens_details.cached_tokens` / `cache_write_tokens`, `completion_tokens_details.reasoning_tokens`, `null` as zeros |
//! | `ToolCallBegin` | `ToolStart` with the call `{tool_call_id, name, arguments}` |
//! | `ToolResult` | `ToolEnd` (`is_error` = not `ok`, no details); once every call of the reply has its result, the result messages' `MessageStart` / `MessageEnd` in call order, where our loop appends them |
//! | v4 `TurnEnd` `{turn, stop_reason}` | `TurnEnd {turn + 1, the reply, the results in call order, stop_reason}` |
//! | v1 `TurnEnd` `{stopped: true}` | `TurnEnd` with `no_tool_calls` (`empty_response` when the reply had no text, reasoning or call) |
//! | v1 `TurnEnd` `{stopped: false}` | held for the next line: `TurnEnd` `continuing` before a `TurnBegin`, `max_turns` before a `RunEnd` (how pagent v1 ends a `max_turns` run) |
//! | `RunEnd` | `AgentEnd`: the messages the run appended, the usage summed over its replies, the stop reason of v4's `RunEnd` (v1: of the last `TurnEnd`), no error |
//!
//! pagent's irregular framings read as regular runs:
//!
//! - a `TurnBegin` while a turn is open (pagent v4 writes no `TurnEnd` for the turn before
//!   its `max_turns` synthesis turn) ends that turn `continuing` first;
//! - a second `TurnEnd` for a turn that ended (v4 cancelled after a `continuing` `TurnEnd`)
//!   adds no event: the run ends there, its `RunEnd` says why;
//! - a `TurnEnd` without its `TurnBegin` (v4 cancelled right after `RunBegin`) opens the
//!   turn first. A turn that ends without a reply has an empty assistant message in its
//!   `TurnEnd` (stop reason `aborted` when cancelled), which is not put in the transcript;
//! - a reply still streaming when its turn ends (or a tool starts) is ended as it stands
//!   (`aborted` when the turn is cancelled);
//! - a call that started and has no `ToolResult` (cancelled while the tool ran) stays
//!   without a result, as in pagent's session; `AgentEnd` takes it off
//!   `pending_tool_calls`.
//!
//! A failed pagent run breaks off without its `RunEnd` (see above). At the next `RunBegin`,
//! or at the end of the stream ([`Decoder::finish`], [`Mirror::finish`], which
//! [`Mirror::read_lines`] calls), a run still open ends as failed: the reply streaming ends
//! with stop reason `error`, then `TurnEnd` and `AgentEnd` with `error`, the error
//! `{"kind":"provider","message":"the pagent run ended without its RunEnd: .."}`. So does a
//! live stream whose producer died mid-run.
//!
//! What does not come back, because pagent does not carry it: images and documents, a
//! reply's model and response id, thinking signatures, tool progress (`ToolUpdate`) and result details, retries,
//! tool-call and usage deltas (a reply's calls and usage come with its `StepEnd` /
//! `TurnResult`), the `length` stop reason, and messages pagent adds without a line (a v4
//! `steer()`, and the "not run" results of a v4 final answer turn at `max_turns`, whose
//! calls pagent v4 writes in its `TurnResult` only). Turns count from 1 in each pagent run, so a run of ours that the dialect
//! split into several pagent runs (it went on after a final answer, for a steering or
//! follow-up message) reads back as several. Our own dialect lines read back to events the
//! dialect writes as the same lines; the tests check that for every recorded run, and that
//! every capture of pagent itself mirrors to the conversation it holds.
//!
//! Errors ([`Error::Wire`](crate::Error::Wire)): the envelope is checked as for the native
//! dialect; then an unknown method, a method of the other pagent version (once the version
//! is chosen or detected), a missing field pagent's own decoder requires (`user_input`,
//! `turn`, `text`, `StepEnd`'s `content`, `tool_calls` and `reasoning_content`, the
//! `ToolCallBegin` and `ToolResult` fields but `ok`, `TurnEnd`'s `stopped` and v4
//! `stop_reason`, v4 `RunEnd`'s `turn` and `stop_reason`, v1 `RunEnd`'s `content`), a field
//! of the wrong type (pagent checks none; our events need them typed), a `stop_reason` that
//! is not one of pagent's five. Unknown fields are ignored, as pagent does.
//!
//! # The stdio server
//!
//! [`serve`] drives an agent over any pair of pipes (stdin/stdout in
//! `examples/wire_server.rs`): `initialize`, `prompt`, `steer`, `follow_up`, `abort` and
//! `snapshot` requests; between runs `reset` and `replace_messages` (the transcript, as
//! [`Agent::reset`](crate::Agent::reset) and
//! [`Agent::replace_messages`](crate::Agent::replace_messages)), and at any time
//! `clear_steering_queue`, `clear_follow_up_queue` and `clear_queues`; the run's events as
//! native notifications, tool approval as a request from the server to the client. Its docs hold the whole protocol;
//! `examples/wire_client.py` is a client in Python's standard library.
//!
//! Errors are JSON-RPC error responses with the codes of [`codes`]. A `steer` or `follow_up`
//! whose queue is full ([`ServeOptions::max_queued`] messages, default [`MAX_QUEUED`], or
//! [`ServeOptions::max_queued_bytes`] bytes, default [`MAX_QUEUED_BYTES`]) is answered with
//! code [`codes::QUEUE_FULL`] (-32001) and the message `the steering queue is full (<n> of
//! <max> messages, <b> of <max bytes> bytes waiting): this message of <m> bytes was not
//! queued` (`follow-up queue` for the other one); the server goes on serving, and the client
//! may send it again once the run has taken some.

pub(crate) mod codec;
pub(crate) mod lines;
mod mirror;
mod pagent;
mod pagent_read;
pub(crate) mod serve;
mod writer;

pub use codec::{Decoder, MAX_LINE_LEN, METHODS, decode_event_line, encode_event_line};
pub use mirror::Mirror;
pub use serve::{
    MAX_QUEUED, MAX_QUEUED_BYTES, MAX_UNREAD_BYTES, PROTOCOL_VERSION, STALL_TIMEOUT, ServeOptions,
    codes, serve,
};
pub use writer::{Dialect, DialectEncoder, Writer};
