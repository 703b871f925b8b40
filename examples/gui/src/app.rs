//! The window: every frame draws one snapshot of the agent, whole; the buttons call the
//! agent from the UI thread (a prompt goes to a worker thread, as it blocks).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use eframe::egui;
use egui::{Color32, RichText};
use pagent::{Agent, Message, State, Waker};

use crate::text;

/// How often a frame is asked for while something counts (a retry's wait, a tool's running
/// time). Nothing else repaints on a timer: the agent's waker asks for the frames.
const TICK: Duration = Duration::from_millis(100);

/// The app: an agent, what the user is typing, and the state the last frame drew.
pub struct App {
    agent: Arc<Agent>,
    waker: Waker,
    source: String,
    input: String,
    drawn: Arc<State>,
    runs: Vec<JoinHandle<()>>,
}

impl App {
    /// An app on `agent`, drawing into `ctx`. `source` says which model it talks to.
    ///
    /// The waker is the app's repaint rule: the agent asks `ctx` for a frame whenever its
    /// state changes after the last frame drew it, from whatever thread changed it. So the
    /// first event of a run started by the Send button (on a worker thread, a moment after
    /// that frame) gets its frame, an idle agent costs no frame at all, and a reply of a
    /// thousand deltas that stream during one frame costs one more frame, not a thousand.
    pub fn new(agent: Agent, source: impl Into<String>, ctx: &egui::Context) -> App {
        let ctx = ctx.clone();
        let waker = agent.waker(move || ctx.request_repaint());
        let drawn = waker.snapshot();
        App {
            agent: Arc::new(agent),
            waker,
            source: source.into(),
            input: String::new(),
            drawn,
            runs: Vec::new(),
        }
    }

    /// The agent.
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// The state the last frame drew (the tests compare the window with it).
    pub fn drawn(&self) -> &Arc<State> {
        &self.drawn
    }

    /// Draws one frame into `ui`: takes one snapshot and draws all of it.
    pub fn draw(&mut self, ui: &mut egui::Ui) {
        // One snapshot a frame: the transcript, the reply, the tools and the queues all from
        // one instant. Taking it re-arms the waker for the next change.
        let state = self.waker.snapshot();
        let now = SystemTime::now();
        if state.retry.is_some() || !state.pending_tool_calls.is_empty() {
            // A countdown or a running time to move on, with no event meanwhile.
            ui.ctx().request_repaint_after(TICK);
        }
        egui::Panel::top("status").show(ui, |ui| self.status(ui, &state));
        egui::Panel::bottom("controls").show(ui, |ui| self.controls(ui, &state));
        egui::Panel::right("run")
            .default_size(330.0)
            .show(ui, |ui| run_panel(ui, &state, now));
        egui::CentralPanel::default().show(ui, |ui| transcript(ui, &state));
        self.drawn = state;
    }

    fn status(&self, ui: &mut egui::Ui, state: &State) {
        ui.horizontal(|ui| {
            ui.heading("pagent");
            ui.label(format!("Model: {}", self.source));
        });
        ui.horizontal(|ui| {
            ui.label(text::status(state));
            ui.separator();
            ui.label(text::usage(state));
        });
        if let Some(error) = text::error(state) {
            ui.label(RichText::new(error).color(Color32::LIGHT_RED));
        }
    }

    fn controls(&mut self, ui: &mut egui::Ui, state: &State) {
        let running = state.is_streaming;
        ui.add_space(4.0);
        let label = ui.label("Message");
        let field = ui.add(
            egui::TextEdit::multiline(&mut self.input)
                .desired_rows(2)
                .desired_width(f32::INFINITY)
                .hint_text("Ask about the weather in a city"),
        );
        let field = field.labelled_by(label.id);
        let typed = !self.input.trim().is_empty();
        ui.horizontal(|ui| {
            // Enter sends (Shift+Enter makes a new line), as chat programs do.
            let enter = field.has_focus()
                && ui.input(|i| i.key_pressed(egui::Key::Enter) && !i.modifiers.shift);
            let send = ui.add_enabled(!running && typed, egui::Button::new("Send"));
            if send.clicked() || (enter && !running && typed) {
                self.send();
            }
            if ui
                .add_enabled(running && typed, egui::Button::new("Steer"))
                .on_hover_text("Delivered before the next model call of this run")
                .clicked()
            {
                let text = self.take_input();
                // OK to ignore: it fails only once the agent is gone, and the app holds it.
                let _ = self.agent.steer(Message::user(text));
            }
            if ui
                .add_enabled(running && typed, egui::Button::new("Follow up"))
                .on_hover_text("Delivered when the run would otherwise stop")
                .clicked()
            {
                let text = self.take_input();
                let _ = self.agent.follow_up(Message::user(text));
            }
            if ui.add_enabled(running, egui::Button::new("Stop")).clicked() {
                self.agent.abort();
            }
            if ui
                .add_enabled(!running, egui::Button::new("New conversation"))
                .clicked()
            {
                // Refused only while a run holds the agent, which the button excludes.
                let _ = self.agent.reset();
            }
        });
        ui.add_space(4.0);
    }

    fn take_input(&mut self) -> String {
        std::mem::take(&mut self.input).trim().to_owned()
    }

    /// Starts a run on the typed message, on a worker thread: `prompt` blocks until the run
    /// ends, and the UI thread must not. How the run goes shows in the state.
    fn send(&mut self) {
        let text = self.take_input();
        let agent = self.agent.clone();
        self.runs.retain(|run| !run.is_finished());
        self.runs.push(std::thread::spawn(move || {
            // A failed run is in the state (`error_message`, `error_kind`), which the window
            // shows; a `Busy` (a second Send in the instant before the first run started)
            // leaves the text unsent.
            let _ = agent.prompt(text);
        }));
    }
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.draw(ui);
    }
}

impl Drop for App {
    /// Ends the run in progress and waits for its thread: no thread outlives the window.
    fn drop(&mut self) {
        self.agent.abort();
        for run in self.runs.drain(..) {
            let _ = run.join();
        }
    }
}

/// The right-hand panel: what the run is doing beside the transcript.
fn run_panel(ui: &mut egui::Ui, state: &State, now: SystemTime) {
    egui::ScrollArea::vertical()
        .id_salt("run panel")
        .show(ui, |ui| {
            if let Some(retry) = &state.retry {
                ui.label(RichText::new(text::retry(retry, now)).color(Color32::GOLD));
            }
            section(ui, "Tools running", state.pending_tool_calls.is_empty());
            for call in &state.pending_tool_calls {
                ui.label(text::pending(call, now));
            }
            section(
                ui,
                "Tools done this turn",
                state.finished_tool_calls.is_empty(),
            );
            for done in &state.finished_tool_calls {
                let line = RichText::new(text::finished(done));
                ui.label(if done.result.is_error {
                    line.color(Color32::LIGHT_RED)
                } else {
                    line
                });
            }
            section(ui, "Steering queued", state.steering_queue.is_empty());
            for m in &state.steering_queue {
                ui.label(format!("Steer: {}", m.text()));
            }
            section(ui, "Follow-ups queued", state.follow_up_queue.is_empty());
            for m in &state.follow_up_queue {
                ui.label(format!("Follow-up: {}", m.text()));
            }
        });
}

/// A section heading, with "none" under it when it is empty.
fn section(ui: &mut egui::Ui, title: &str, empty: bool) {
    ui.add_space(6.0);
    ui.strong(title);
    if empty {
        ui.weak("none");
    }
}

/// The transcript, then the reply as far as it streamed.
fn transcript(ui: &mut egui::Ui, state: &State) {
    egui::ScrollArea::vertical()
        .id_salt("transcript")
        .stick_to_bottom(true)
        .auto_shrink([false, false])
        .show(ui, |ui| {
            for message in &state.messages {
                message_view(ui, message);
            }
            if let Some(reply) = &state.streaming_message {
                ui.separator();
                ui.strong("assistant (streaming)");
                for block in reply.blocks() {
                    let line = text::block(block);
                    match block {
                        pagent::PartialBlock::Text(_) => ui.label(line),
                        _ => ui.label(RichText::new(line).weak().italics()),
                    };
                }
            }
        });
}

fn message_view(ui: &mut egui::Ui, message: &Message) {
    ui.separator();
    match message {
        Message::Assistant(reply) => {
            ui.strong("assistant");
            let thinking = reply.thinking();
            if !thinking.is_empty() {
                ui.label(
                    RichText::new(format!("Thinking: {thinking}"))
                        .weak()
                        .italics(),
                );
            }
            let said = reply.text();
            if !said.is_empty() {
                ui.label(said);
            }
            for call in reply.tool_calls() {
                ui.label(RichText::new(format!("Called {} {}", call.name, call.arguments)).weak());
            }
            if let Some(error) = &reply.error_message {
                ui.label(RichText::new(error.as_str()).color(Color32::LIGHT_RED));
            }
        }
        Message::ToolResult(result) => {
            ui.strong(format!("{} result", result.tool_name));
            ui.label(result.text());
        }
        other => {
            ui.strong(other.role());
            ui.label(other.text());
        }
    }
}
