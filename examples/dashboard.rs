//! A terminal dashboard whose UI thread never subscribes: it polls `snapshot()` every frame.
//!
//! ```sh
//! cargo run --example dashboard --features dashboard      # interactive
//! cargo run --example dashboard --features dashboard -- --script "tell me about owls" --steer "be brief"
//! ```
//!
//! (The `dashboard` feature builds ratatui, which no other example needs.)
//!
//! Type and press Enter to prompt (the run happens on a worker thread). While it runs, Enter
//! steers, Ctrl-F queues a follow-up, Esc aborts; Ctrl-C quits.
//!
//! Each frame (~30 per second) takes one `Arc<State>` and draws all of it: the transcript, the
//! reply as it streams, the thinking text, the pending tool calls with their progress, usage,
//! and the run's state. One snapshot is one instant, so the panels always agree with each
//! other, and drawing never slows the run: the UI holds no lock the run needs. An
//! immediate-mode GUI (egui, iced) does exactly the same in its frame function.
//!
//! `--script PROMPT` runs the same loop without a terminal, on ratatui's `TestBackend`: it
//! types the prompt, optionally steers (`--steer MSG`), queues a follow-up (`--follow-up MSG`)
//! or aborts (`--abort`) at the right moments, and after the run prints a summary and the
//! last frame. `--tps N` sets the demo model's pace in chunks per second (0: unpaced).

use std::error::Error;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pagent::llm::{Faux, FauxReply, Request};
use pagent::{Agent, Message, RunResult, State, ToolOutput, tool};
use ratatui::backend::{Backend, TestBackend};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, LineGauge, Paragraph};
use ratatui::{Frame, Terminal};
// `schemars` in scope for the derive: pagent's own, so no version to match by hand.
use pagent::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::json;

const FRAME: Duration = Duration::from_millis(33);
/// A scripted session that takes longer than this has gone wrong.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(60);

fn main() -> Result<(), Box<dyn Error>> {
    let options = Options::parse(std::env::args().skip(1))?;
    let mut app = App::new(agent(options.tps));
    match options.script.clone() {
        Some(prompt) => {
            let mut terminal = Terminal::new(TestBackend::new(100, 32))?;
            let mut keys = Script::new(prompt, &options);
            run(&mut terminal, &mut app, &mut keys)?;
            println!("{}", app.summary());
            println!("--- last frame");
            println!("{}", screen(terminal.backend()));
        }
        None => {
            let mut terminal = ratatui::try_init()?;
            let outcome = run(&mut terminal, &mut app, &mut Keyboard);
            ratatui::restore();
            outcome?;
            println!("{}", app.summary());
        }
    }
    Ok(())
}

/// The frame loop: snapshot, draw, handle the keys that arrive until the next frame.
fn run<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    keys: &mut dyn Keys,
) -> Result<(), Box<dyn Error>>
where
    B::Error: Error + 'static,
{
    while !app.quit {
        let started = Instant::now();
        app.reap_worker();
        // The only way the UI learns anything: one consistent snapshot per frame.
        let state = app.agent.snapshot();
        terminal.draw(|frame| draw(frame, app, &state))?;
        app.frames += 1;
        if state.is_streaming_reply {
            app.frames_streaming += 1;
        }
        app.slowest_frame = app.slowest_frame.max(started.elapsed());
        let deadline = started + FRAME;
        while let Some(key) = keys.next(deadline, app, &state)? {
            app.handle(key);
        }
    }
    app.abort_and_wait();
    Ok(())
}

/// The agent: a demo model that thinks, calls two tools with progress, and streams an answer.
fn agent(tps: f64) -> Arc<Agent> {
    let builder = match pagent::llm::from_env() {
        // A server named in the environment (OPENAI_*, ANTHROPIC_*, PAGENT_MODEL).
        Ok(configured) => Agent::builder()
            .provider(configured.provider)
            .model(configured.model),
        Err(e) if e.is_not_configured() => demo(tps),
        Err(e) => {
            eprintln!("dashboard: {e}; using the offline demo");
            demo(tps)
        }
    };
    let agent = builder
        .system_prompt("You are a research assistant.")
        .tool(survey())
        .tool(letter_count())
        .build()
        // OK because the builder has a provider and two differently named tools.
        .expect("the demo agent builds");
    Arc::new(agent)
}

/// The offline demo model, paced at `tps` chunks a second (0: as fast as it goes).
fn demo(tps: f64) -> pagent::AgentBuilder {
    let faux = Faux::default().otherwise(demo_reply);
    let faux = if tps > 0.0 {
        faux.tokens_per_second(tps)
    } else {
        faux
    };
    Agent::builder().provider(faux)
}

fn demo_reply(request: &Request) -> FauxReply {
    let n = request.messages.len();
    let last = request.messages.last().map(|m| &**m);
    let before = n
        .checked_sub(2)
        .and_then(|i| request.messages.get(i))
        .map(|m| &**m);
    let topic = request
        .messages
        .iter()
        .rev()
        .find_map(|m| match &**m {
            Message::User(u) => Some(u.text()),
            _ => None,
        })
        .unwrap_or_default();
    match (last, before) {
        // Steering arrives after the tool results of the batch it interrupted.
        (Some(Message::User(steer)), Some(Message::ToolResult(_))) => FauxReply::text(format!(
            "You steered me: \"{}\". Taking that into account, here is the short version: \
             the sources agree, and the letters are counted.",
            steer.text()
        )),
        (Some(Message::User(_)), _) => FauxReply::default()
            .then_thinking(format!(
                "The user asks about \"{topic}\". I should survey a few sources and count the \
                 letters of the question, both at once, then write a summary."
            ))
            .then_text("Let me look into that.")
            .then_tool_call("survey", json!({ "topic": topic, "sources": 8 }))
            .then_tool_call("letter_count", json!({ "text": topic })),
        _ => {
            let mut results: Vec<String> = request
                .messages
                .iter()
                .rev()
                .map_while(|m| m.as_tool_result().map(|r| r.text()))
                .collect();
            results.reverse();
            FauxReply::text(format!(
                "Here is what I found about \"{topic}\".\n\n{}\n\nThe sources were mostly \
                 consistent with each other. They describe the subject from several angles: \
                 its history, how it works today, and what is likely to change. Where they \
                 disagreed, the newer sources were more careful with their claims.\n\nIn \
                 short: there is more to \"{topic}\" than meets the eye, and the details \
                 reward a closer look. Ask a follow-up to dig into any part of it.",
                results.join("\n")
            ))
        }
    }
}

#[derive(Deserialize, JsonSchema)]
struct SurveyArgs {
    /// What to read about.
    topic: String,
    /// How many sources to read.
    sources: u32,
}

/// A slow tool that reports its progress (and stops early on abort).
fn survey() -> impl pagent::Tool {
    tool::typed(
        "survey",
        "Reads sources about a topic.",
        |args: SurveyArgs, ctx| {
            let total = args.sources.max(1);
            for done in 1..=total {
                if ctx.sleep(Duration::from_millis(60)) {
                    return Err("aborted".into());
                }
                ctx.update(
                    ToolOutput::text(format!("read {done} of {total} sources"))
                        .with_details(json!({ "ratio": f64::from(done) / f64::from(total) })),
                );
            }
            Ok(ToolOutput::text(format!(
                "Read {total} sources about \"{}\".",
                args.topic
            )))
        },
    )
}

#[derive(Deserialize, JsonSchema)]
struct LetterArgs {
    /// The text to count.
    text: String,
}

fn letter_count() -> impl pagent::Tool {
    tool::typed(
        "letter_count",
        "Counts the letters of a text.",
        |args: LetterArgs, _| {
            let letters = args.text.chars().filter(|c| c.is_alphabetic()).count();
            Ok(ToolOutput::text(format!(
                "The question has {letters} letters."
            )))
        },
    )
}

/// What the UI keeps besides the agent's state: the input line and the worker.
struct App {
    agent: Arc<Agent>,
    input: String,
    worker: Option<JoinHandle<Result<RunResult, pagent::RunError>>>,
    last_error: Option<String>,
    frames: u64,
    frames_streaming: u64,
    slowest_frame: Duration,
    quit: bool,
}

enum Queue {
    Steer,
    FollowUp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Key {
    Char(char),
    Backspace,
    Enter,
    FollowUp,
    Abort,
    Quit,
}

impl App {
    fn new(agent: Arc<Agent>) -> App {
        App {
            agent,
            input: String::new(),
            worker: None,
            last_error: None,
            frames: 0,
            frames_streaming: 0,
            slowest_frame: Duration::ZERO,
            quit: false,
        }
    }

    fn busy(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| !w.is_finished())
    }

    fn handle(&mut self, key: Key) {
        match key {
            Key::Char(c) => self.input.push(c),
            Key::Backspace => {
                self.input.pop();
            }
            Key::Enter if self.input.trim().is_empty() => {}
            Key::Enter if self.busy() => self.queue(Queue::Steer),
            Key::Enter => {
                self.reap_worker();
                let prompt = std::mem::take(&mut self.input);
                let agent = self.agent.clone();
                // `prompt` blocks until the run ends, so it gets a thread of its own.
                self.worker = Some(thread::spawn(move || agent.prompt(prompt)));
            }
            Key::FollowUp if !self.input.trim().is_empty() => self.queue(Queue::FollowUp),
            Key::FollowUp => {}
            Key::Abort => {
                self.agent.abort();
            }
            Key::Quit => self.quit = true,
        }
    }

    fn queue(&mut self, queue: Queue) {
        let message = std::mem::take(&mut self.input);
        let queued = match queue {
            Queue::Steer => self.agent.steer(message),
            Queue::FollowUp => self.agent.follow_up(message),
        };
        // An `Agent` (not a handle) is alive by definition, so this never refuses.
        if let Err(refused) = queued {
            self.last_error = Some(refused.to_string());
        }
    }

    fn reap_worker(&mut self) {
        if self.worker.as_ref().is_some_and(|w| w.is_finished()) {
            self.join_worker();
        }
    }

    fn abort_and_wait(&mut self) {
        self.agent.abort();
        self.join_worker();
    }

    fn join_worker(&mut self) {
        if let Some(worker) = self.worker.take() {
            self.last_error = match worker.join() {
                Ok(Ok(_)) => None,
                Ok(Err(failed)) => Some(format!("{} ({})", failed, failed.kind())),
                Err(_) => Some("the run thread panicked".into()),
            };
        }
    }

    fn summary(&self) -> String {
        let state = self.agent.snapshot();
        let stop = state.stop_reason.map_or("none", |r| r.as_str());
        let reply = state
            .messages
            .iter()
            .rev()
            .find_map(|m| m.as_assistant().map(|a| a.text()))
            .unwrap_or_default();
        format!(
            "frames drawn: {} ({} while streaming), slowest frame: {:.1} ms\n\
             stop reason: {stop}\nmessages: {}\nusage: {} in, {} out\nlast reply: {}",
            self.frames,
            self.frames_streaming,
            self.slowest_frame.as_secs_f64() * 1e3,
            state.messages.len(),
            state.usage.input,
            state.usage.output,
            reply.lines().next().unwrap_or(""),
        )
    }
}

/// Where keys come from: the keyboard, or a script.
trait Keys {
    /// The next key before `deadline`, or `None` when there is none by then.
    fn next(
        &mut self,
        deadline: Instant,
        app: &App,
        state: &State,
    ) -> Result<Option<Key>, Box<dyn Error>>;
}

struct Keyboard;

impl Keys for Keyboard {
    fn next(
        &mut self,
        deadline: Instant,
        _: &App,
        _: &State,
    ) -> Result<Option<Key>, Box<dyn Error>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        if !event::poll(wait)? {
            return Ok(None);
        }
        let Event::Key(key) = event::read()? else {
            return Ok(None);
        };
        if key.kind != KeyEventKind::Press {
            return Ok(None);
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        Ok(match key.code {
            KeyCode::Char('c') if ctrl => Some(Key::Quit),
            KeyCode::Char('f') if ctrl => Some(Key::FollowUp),
            KeyCode::Char(c) if !ctrl => Some(Key::Char(c)),
            KeyCode::Enter => Some(Key::Enter),
            KeyCode::Backspace => Some(Key::Backspace),
            KeyCode::Esc => Some(Key::Abort),
            _ => None,
        })
    }
}

/// A scripted session: keys, and moments to wait for before pressing them.
struct Script {
    steps: std::collections::VecDeque<Step>,
    started: Instant,
}

enum Step {
    Press(Key),
    /// Waits until the condition holds for the app and the frame's snapshot.
    Until(fn(&App, &State) -> bool),
}

impl Script {
    fn new(prompt: String, options: &Options) -> Script {
        let mut steps = std::collections::VecDeque::new();
        let type_in = |steps: &mut std::collections::VecDeque<Step>, text: &str, end: Key| {
            steps.extend(text.chars().map(|c| Step::Press(Key::Char(c))));
            steps.push_back(Step::Press(end));
        };
        type_in(&mut steps, &prompt, Key::Enter);
        if let Some(follow_up) = &options.follow_up {
            steps.push_back(Step::Until(|app, state| app.busy() && state.is_streaming));
            type_in(&mut steps, follow_up, Key::FollowUp);
        }
        if let Some(steer) = &options.steer {
            // Steer while the first batch of tools runs; it goes in before the next call.
            steps.push_back(Step::Until(|_, state| !state.pending_tool_calls.is_empty()));
            type_in(&mut steps, steer, Key::Enter);
        }
        if options.abort {
            steps.push_back(Step::Until(|_, state| !state.pending_tool_calls.is_empty()));
            steps.push_back(Step::Press(Key::Abort));
        }
        steps.push_back(Step::Until(|app, _| !app.busy()));
        steps.push_back(Step::Press(Key::Quit));
        Script {
            steps,
            started: Instant::now(),
        }
    }
}

impl Keys for Script {
    fn next(
        &mut self,
        deadline: Instant,
        app: &App,
        state: &State,
    ) -> Result<Option<Key>, Box<dyn Error>> {
        if self.started.elapsed() > SCRIPT_DEADLINE {
            return Err(format!("the script did not finish within {SCRIPT_DEADLINE:?}").into());
        }
        match self.steps.front() {
            Some(Step::Press(key)) => {
                let key = *key;
                self.steps.pop_front();
                Ok(Some(key))
            }
            Some(Step::Until(ready)) if ready(app, state) => {
                self.steps.pop_front();
                Ok(None)
            }
            _ => {
                // Nothing to press yet: idle until the next frame, as a person would.
                thread::sleep(deadline.saturating_duration_since(Instant::now()));
                Ok(None)
            }
        }
    }
}

fn draw(frame: &mut Frame<'_>, app: &App, state: &State) {
    let tools_height =
        (state.pending_tool_calls.len() + state.tool_results.len()).clamp(1, 6) as u16 + 2;
    let [transcript, thinking, tools, status, input] = Layout::vertical([
        Constraint::Min(5),
        Constraint::Length(4),
        Constraint::Length(tools_height),
        Constraint::Length(1),
        Constraint::Length(3),
    ])
    .areas(frame.area());
    draw_transcript(frame, transcript, state);
    draw_thinking(frame, thinking, state);
    draw_tools(frame, tools, state);
    frame.render_widget(Paragraph::new(status_line(app, state)), status);
    let title = if app.busy() {
        " Enter: steer · Ctrl-F: follow-up · Esc: abort · Ctrl-C: quit "
    } else {
        " Enter: prompt · Ctrl-C: quit "
    };
    frame.render_widget(
        Paragraph::new(format!("{}▏", app.input)).block(Block::bordered().title(title)),
        input,
    );
}

/// The tail of the transcript that fits, with the streaming reply at the bottom. Only the
/// messages that show are laid out, so a long transcript costs nothing per frame.
fn draw_transcript(frame: &mut Frame<'_>, area: Rect, state: &State) {
    let block = Block::bordered().title(" transcript ");
    let inner = block.inner(area);
    let (width, height) = (usize::from(inner.width.max(1)), usize::from(inner.height));
    let mut lines: Vec<Line<'_>> = Vec::new();
    if let Some(partial) = &state.streaming_message {
        let text = format!("{}▌", partial.text());
        push_front(
            &mut lines,
            "agent: ",
            &text,
            Style::default().fg(Color::Yellow),
            width,
        );
    }
    for message in state.messages.iter().rev() {
        if lines.len() >= height {
            break;
        }
        match &**message {
            Message::User(u) => push_front(
                &mut lines,
                "you: ",
                &u.text(),
                Style::default().fg(Color::Cyan),
                width,
            ),
            Message::Assistant(a) => {
                for call in a.tool_calls().collect::<Vec<_>>().into_iter().rev() {
                    let text = format!("{} {}", call.name, call.arguments);
                    push_front(
                        &mut lines,
                        "→ ",
                        &text,
                        Style::default().fg(Color::DarkGray),
                        width,
                    );
                }
                if !a.text().is_empty() {
                    push_front(&mut lines, "agent: ", &a.text(), Style::default(), width);
                }
            }
            Message::ToolResult(r) => {
                let color = if r.is_error { Color::Red } else { Color::Green };
                let label = format!("← {}: ", r.tool_name);
                push_front(
                    &mut lines,
                    &label,
                    &r.text(),
                    Style::default().fg(color),
                    width,
                );
            }
            // A message kind added in a later pagent release.
            _ => {}
        }
    }
    let skip = lines.len().saturating_sub(height);
    let visible: Vec<Line<'_>> = lines.into_iter().skip(skip).collect();
    frame.render_widget(Paragraph::new(visible).block(block), area);
}

/// Puts `label` + `text`, wrapped to `width`, before the lines already there.
fn push_front(lines: &mut Vec<Line<'static>>, label: &str, text: &str, style: Style, width: usize) {
    let wrapped = wrap(&format!("{label}{text}"), width);
    let new: Vec<Line<'static>> = wrapped
        .into_iter()
        .map(|l| Line::styled(l, style))
        .collect();
    lines.splice(0..0, new);
}

fn draw_thinking(frame: &mut Frame<'_>, area: Rect, state: &State) {
    let block = Block::bordered().title(" thinking ");
    let thinking = match &state.streaming_message {
        Some(partial) => partial.thinking(),
        None => state
            .messages
            .iter()
            .rev()
            .filter_map(|m| m.as_assistant().map(|a| a.thinking()))
            .find(|t| !t.is_empty())
            .unwrap_or_default(),
    };
    let inner = block.inner(area);
    let lines = wrap(&thinking, usize::from(inner.width.max(1)));
    let skip = lines.len().saturating_sub(usize::from(inner.height));
    let text: Vec<Line<'_>> = lines.into_iter().skip(skip).map(Line::from).collect();
    let style = Style::default()
        .add_modifier(Modifier::ITALIC)
        .fg(Color::Magenta);
    frame.render_widget(Paragraph::new(text).style(style).block(block), area);
}

/// Pending calls with a gauge of their progress, then the calls of this turn that ended.
fn draw_tools(frame: &mut Frame<'_>, area: Rect, state: &State) {
    let block = Block::bordered().title(format!(
        " tools ({} running) ",
        state.pending_tool_calls.len()
    ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let rows =
        Layout::vertical(vec![Constraint::Length(1); usize::from(inner.height)]).split(inner);
    let mut rows = rows.iter();
    for pending in &state.pending_tool_calls {
        let Some(row) = rows.next() else { return };
        let progress = pending.progress.as_ref();
        let ratio = progress
            .and_then(|p| p.details.as_ref())
            .and_then(|d| d["ratio"].as_f64())
            .unwrap_or(0.0);
        let label = format!(
            "⟳ {} {}",
            pending.call.name,
            progress.map_or_else(|| "starting".to_owned(), |p| p.to_text())
        );
        let gauge = LineGauge::default()
            .ratio(ratio.clamp(0.0, 1.0))
            .label(label)
            .filled_style(Style::default().fg(Color::Blue));
        frame.render_widget(gauge, *row);
    }
    for result in &state.tool_results {
        let Some(row) = rows.next() else { return };
        let (mark, color) = if result.is_error {
            ("✗", Color::Red)
        } else {
            ("✓", Color::Green)
        };
        let line = Line::from(vec![
            Span::styled(
                format!("{mark} {} ", result.tool_name),
                Style::default().fg(color),
            ),
            Span::raw(result.text()),
        ]);
        frame.render_widget(Paragraph::new(line), *row);
    }
}

fn status_line(app: &App, state: &State) -> Line<'static> {
    let phase = if state.is_streaming_reply {
        "streaming"
    } else if !state.pending_tool_calls.is_empty() {
        "running tools"
    } else if state.is_streaming {
        "running"
    } else {
        "idle"
    };
    let mut parts = vec![
        format!("● {phase}"),
        format!("turn {}", state.turn),
        format!(
            "tokens {} in / {} out",
            state.usage.input, state.usage.output
        ),
        format!(
            "queued: {} steer, {} follow-up",
            state.steering_queue.len(),
            state.follow_up_queue.len()
        ),
    ];
    if let Some(reason) = state.stop_reason {
        parts.push(format!("stop: {reason}"));
    }
    // The kind (auth, rate_limited, timeout...) is what a user acts on; the message explains.
    match (state.error_kind, state.error_message.as_deref()) {
        (Some(kind), Some(error)) => parts.push(format!("error ({kind}): {error}")),
        _ => {
            if let Some(error) = state.error_message.as_deref().or(app.last_error.as_deref()) {
                parts.push(format!("error: {error}"));
            }
        }
    }
    Line::styled(
        parts.join(" │ "),
        Style::default().add_modifier(Modifier::BOLD),
    )
}

/// Greedy word wrap to `width` characters; long words are cut.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for paragraph in text.split('\n') {
        let mut line = String::new();
        let mut len = 0;
        for word in paragraph.split(' ') {
            let mut word: Vec<char> = word.chars().collect();
            if len > 0 && len + 1 + word.len() > width {
                out.push(std::mem::take(&mut line));
                len = 0;
            }
            if len > 0 {
                line.push(' ');
                len += 1;
            }
            while len + word.len() > width {
                let rest = word.split_off(width - len);
                line.extend(word);
                out.push(std::mem::take(&mut line));
                len = 0;
                word = rest;
            }
            len += word.len();
            line.extend(word);
        }
        out.push(line);
    }
    out
}

/// The screen of a `TestBackend` as plain text lines.
fn screen(backend: &TestBackend) -> String {
    let buffer = backend.buffer();
    let width = usize::from(buffer.area.width.max(1));
    buffer
        .content
        .chunks(width)
        .map(|row| {
            row.iter()
                .map(|c| c.symbol())
                .collect::<String>()
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Command-line options.
#[derive(Debug, Default)]
struct Options {
    script: Option<String>,
    steer: Option<String>,
    follow_up: Option<String>,
    abort: bool,
    tps: f64,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut options = Options {
            tps: 150.0,
            ..Options::default()
        };
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--script" => options.script = Some(value()?),
                "--steer" => options.steer = Some(value()?),
                "--follow-up" => options.follow_up = Some(value()?),
                "--abort" => options.abort = true,
                "--tps" => {
                    options.tps = value()?.parse().map_err(|e| format!("--tps: {e}"))?;
                }
                _ => {
                    return Err(format!(
                        "unknown argument {arg}; usage: dashboard [--script PROMPT \
                         [--steer MSG] [--follow-up MSG] [--abort]] [--tps N]"
                    ));
                }
            }
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_at_spaces_and_cuts_long_words() {
        assert_eq!(wrap("the quick brown fox", 9), ["the quick", "brown fox"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("a\n\nb", 5), ["a", "", "b"]);
    }
}
