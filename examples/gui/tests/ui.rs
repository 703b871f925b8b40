//! The window driven without a display, the way egui tests its own widgets (`egui_kittest`):
//! frames are run one by one, widgets are found by their accessible labels, clicked and typed
//! into, and what each frame shows is compared with the snapshot that frame drew.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, RunStopReason, State, ToolOutput, tool};
use pagent_gui::{App, Pace, demo_agent, text};

/// The longest any wait of these tests may take.
const PATIENCE: Duration = Duration::from_secs(20);

/// The demo, slow enough that a frame sees each phase, fast enough for a test.
const QUICK: Pace = Pace {
    chunks_per_second: Some(150.0),
    tool_time: Duration::from_millis(500),
    retry_wait: Duration::from_millis(300),
};

fn harness(agent: Agent) -> Harness<'static, Option<App>> {
    let mut harness = Harness::builder()
        .with_size([1000.0, 700.0])
        .build_ui_state(
            |ui, app: &mut Option<App>| {
                if let Some(app) = app {
                    app.draw(ui);
                }
            },
            None,
        );
    let ctx = harness.ctx.clone();
    *harness.state_mut() = Some(App::new(agent, "test", &ctx));
    harness.run();
    harness
}

fn app<'h>(harness: &'h Harness<'_, Option<App>>) -> &'h App {
    harness.state().as_ref().expect("the app")
}

/// Runs frames until the state the last one drew satisfies `done`, checking after each that
/// the window shows that state (`check`). Fails after `PATIENCE`.
fn frames_until(
    harness: &mut Harness<'_, Option<App>>,
    mut check: impl FnMut(&Harness<'_, Option<App>>, &State),
    done: impl Fn(&State) -> bool,
) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        harness.step();
        let drawn = app(harness).drawn().clone();
        check(harness, &drawn);
        if done(&drawn) {
            return;
        }
        assert!(Instant::now() < deadline, "never reached: {drawn:#?}");
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// What every frame shows, whatever the phase: the status and the usage of the state it
/// drew, the error if there is one, the reply as far as it streamed, block by block.
fn shows_its_state(harness: &Harness<'_, Option<App>>, state: &State) {
    harness.get_by_label(&text::status(state));
    harness.get_by_label(&text::usage(state));
    if let Some(error) = text::error(state) {
        harness.get_by_label(&error);
    }
    if let Some(reply) = &state.streaming_message {
        for block in reply.blocks() {
            let line = text::block(block);
            if !line.is_empty() {
                harness.get_by_label(&line);
            }
        }
    }
    for call in &state.pending_tool_calls {
        harness.get_by_label_contains(&format!(
            "Running {} {}",
            call.call.name, call.call.arguments
        ));
    }
    for done in &state.finished_tool_calls {
        harness.get_by_label(&text::finished(done));
    }
    for m in &state.steering_queue {
        harness.get_by_label(&format!("Steer: {}", m.text()));
    }
    for m in &state.follow_up_queue {
        harness.get_by_label(&format!("Follow-up: {}", m.text()));
    }
}

fn type_into_message(harness: &mut Harness<'_, Option<App>>, text: &str) {
    harness.get_by_label("Message").focus();
    harness.step();
    harness.get_by_label("Message").type_text(text);
    harness.step();
    assert_eq!(
        harness.get_by_label("Message").value().as_deref(),
        Some(text)
    );
}

fn enabled(harness: &Harness<'_, Option<App>>, label: &str) -> bool {
    !harness.get_by_label(label).accesskit_node().is_disabled()
}

#[test]
fn a_prompt_streams_into_the_window_through_every_phase() {
    let mut harness = harness(demo_agent(QUICK));
    harness.get_by_label("Status: idle");
    assert!(!enabled(&harness, "Send"), "nothing typed yet");
    type_into_message(&mut harness, "What is the weather in Bergen?");
    assert!(enabled(&harness, "Send") && !enabled(&harness, "Stop"));
    harness.get_by_label("Send").click();
    // Each phase of the run, as some frame drew it and showed it.
    let (mut retry, mut thinking, mut args, mut progress, mut answer) =
        (false, false, false, false, false);
    frames_until(
        &mut harness,
        |h, s| {
            shows_its_state(h, s);
            if s.retry.is_some() {
                // A countdown while the wait lasts, then "sent again": which one depends on
                // the clock at the frame, the attempt does not.
                retry = true;
                h.get_by_label_contains("Retry 1");
                h.get_by_label_contains("http status 429: rate limited");
            }
            if let Some(reply) = &s.streaming_message {
                thinking |= !reply.thinking().is_empty();
                // A call's arguments show as they stream.
                args |= reply.tool_calls().iter().any(|c| !c.arguments.is_empty());
                answer |= reply.text().starts_with("Here is what the stations say");
            }
            progress |= s.pending_tool_calls.iter().any(|p| p.progress.is_some());
            if s.is_streaming {
                assert!(enabled(h, "Stop") && !enabled(h, "Send"));
            }
        },
        |s| s.stop_reason.is_some(),
    );
    assert!(
        retry && thinking && args && progress && answer,
        "retry {retry} thinking {thinking} args {args} progress {progress} answer {answer}"
    );
    let drawn = app(&harness).drawn().clone();
    assert_eq!(drawn.stop_reason, Some(RunStopReason::NoToolCalls));
    harness.get_by_label("Status: answered");
    // The transcript: the question, the reply with its call, the result, the answer.
    harness.get_by_label("What is the weather in Bergen?");
    harness.get_by_label(r#"Called weather {"city":"Bergen"}"#);
    harness.get_by_label("Bergen: 21 °C, sunny, light wind from the west");
    harness.get_by_label(&drawn.messages.last().unwrap().text());
    harness.run();
    harness.check_accessibility();
}

/// The test tools' arguments.
#[derive(serde::Deserialize, pagent::schemars::JsonSchema)]
#[schemars(crate = "pagent::schemars")]
struct N {
    #[allow(dead_code)] // The model sends it; the tools do not need it.
    n: u32,
}

/// An agent whose reply calls a quick tool and a slow one that waits for `release`.
fn two_tools(release: Arc<AtomicBool>) -> Agent {
    Agent::builder()
        .provider(
            Faux::default()
                .reply(
                    FauxReply::tool_call("quick", serde_json::json!({"n": 1}))
                        .then_tool_call("slow", serde_json::json!({"n": 2})),
                )
                .otherwise(|_| FauxReply::text("Both are done.")),
        )
        .tool(tool::typed("quick", "Answers at once.", |_: N, _| {
            Ok(ToolOutput::text("quick answer"))
        }))
        .tool(tool::typed(
            "slow",
            "Answers when let go.",
            move |_: N, ctx| {
                ctx.update("halfway");
                while !release.load(Ordering::SeqCst) {
                    if ctx.sleep(Duration::from_millis(5)) {
                        break;
                    }
                }
                Ok(ToolOutput::text("slow answer"))
            },
        ))
        .build()
        .unwrap()
}

#[test]
fn a_finished_tool_shows_its_result_and_time_while_its_sibling_runs() {
    let release = Arc::new(AtomicBool::new(false));
    let mut harness = harness(two_tools(release.clone()));
    type_into_message(&mut harness, "go");
    harness.get_by_label("Send").click();
    frames_until(&mut harness, shows_its_state, |s| {
        s.finished_tool_calls.len() == 1
            && s.pending_tool_calls.iter().any(|p| p.progress.is_some())
    });
    let drawn = app(&harness).drawn().clone();
    let done = &drawn.finished_tool_calls[0];
    assert_eq!(done.call.name, "quick");
    let line = text::finished(done);
    assert!(line.starts_with(r#"quick {"n":1} done in "#), "{line}");
    assert!(line.ends_with(": quick answer"), "{line}");
    harness.get_by_label_contains(r#"Running slow {"n":2} for "#);
    harness.get_by_label_contains(": halfway");
    harness.get_by_label("Status: running tools (turn 1)");
    release.store(true, Ordering::SeqCst);
    frames_until(&mut harness, shows_its_state, |s| s.stop_reason.is_some());
    harness.get_by_label("Both are done.");
}

#[test]
fn stop_ends_the_run_and_the_window_says_so() {
    let mut harness = harness(demo_agent(Pace {
        tool_time: Duration::from_secs(30),
        ..QUICK
    }));
    type_into_message(&mut harness, "What is the weather in Oslo?");
    harness.get_by_label("Send").click();
    frames_until(&mut harness, shows_its_state, |s| {
        !s.pending_tool_calls.is_empty()
    });
    let started = Instant::now();
    harness.get_by_label("Stop").click();
    frames_until(&mut harness, shows_its_state, |s| !s.is_streaming);
    // The 30 s tool honoured the abort.
    assert!(started.elapsed() < Duration::from_secs(15));
    let drawn = app(&harness).drawn().clone();
    assert_eq!(drawn.stop_reason, Some(RunStopReason::Cancelled));
    harness.get_by_label("Status: stopped (cancelled)");
    harness.get_by_label("weather result");
    assert!(!enabled(&harness, "Stop"));
    // The agent takes the next prompt.
    type_into_message(&mut harness, "please fail");
    harness.get_by_label("Send").click();
    frames_until(&mut harness, shows_its_state, |s| {
        s.stop_reason == Some(RunStopReason::Error)
    });
    let error = text::error(app(&harness).drawn()).expect("an error");
    assert!(error.contains("the demo model failed"), "{error}");
    harness.get_by_label(&error);
}

#[test]
fn a_steer_typed_during_the_run_is_queued_then_answered() {
    let mut harness = harness(demo_agent(Pace {
        tool_time: Duration::from_millis(1_500),
        ..QUICK
    }));
    type_into_message(&mut harness, "Weather in Paris?");
    harness.get_by_label("Send").click();
    frames_until(&mut harness, shows_its_state, |s| {
        !s.pending_tool_calls.is_empty()
    });
    assert!(!enabled(&harness, "Steer"), "nothing typed");
    type_into_message(&mut harness, "be brief");
    harness.get_by_label("Steer").click();
    harness.step();
    harness.step();
    let drawn = app(&harness).drawn().clone();
    assert_eq!(drawn.steering_queue.len(), 1, "{drawn:#?}");
    harness.get_by_label("Steer: be brief");
    assert_eq!(harness.get_by_label("Message").value().as_deref(), Some(""));
    type_into_message(&mut harness, "And Rome?");
    harness.get_by_label("Follow up").click();
    frames_until(&mut harness, shows_its_state, |s| s.stop_reason.is_some());
    let drawn = app(&harness).drawn().clone();
    assert!(drawn.steering_queue.is_empty() && drawn.follow_up_queue.is_empty());
    // The steer went in after the tool's result and got its answer; the follow-up then
    // started a new turn of the same run, which asked about Rome.
    harness.get_by_label("be brief");
    harness.get_by_label(r#"Understood: "be brief". I will keep that in mind."#);
    harness.get_by_label("And Rome?");
    harness.get_by_label(r#"Called weather {"city":"Rome"}"#);
    harness.get_by_label("Status: answered");
}

/// The tutorial's rule used to be "repaint while `is_streaming`": the frame that started a
/// run saw the idle agent and asked for no other frame, so the run went unseen until some
/// input came. The app's waker asks for a frame from the run itself.
#[test]
fn a_run_started_elsewhere_asks_the_idle_window_for_a_frame() {
    let mut harness = harness(demo_agent(Pace::FAST));
    harness.run();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !harness.ctx.has_requested_repaint(),
        "an idle agent asks for no frame"
    );
    let agent = app(&harness).agent().clone();
    let run = std::thread::spawn(move || agent.prompt("Weather in Oslo?").unwrap());
    let deadline = Instant::now() + PATIENCE;
    while !harness.ctx.has_requested_repaint() {
        assert!(Instant::now() < deadline, "the run asked for no frame");
        std::thread::sleep(Duration::from_millis(1));
    }
    run.join().unwrap();
    // The frames it asked for draw the whole run.
    harness.run();
    let drawn = app(&harness).drawn().clone();
    assert_eq!(drawn.stop_reason, Some(RunStopReason::NoToolCalls));
    harness.get_by_label("Status: answered");
    std::thread::sleep(Duration::from_millis(50));
    assert!(!harness.ctx.has_requested_repaint(), "idle again");
}
