//! A terminal chat agent: reads lines from stdin, streams each reply as it arrives, shows the
//! tool calls and their results, and exits cleanly at the end of input.
//!
//! Ctrl-C while a reply streams interrupts that reply (the agent is aborted from the signal's
//! thread; what streamed is kept in the conversation) and the chat reads on; Ctrl-C at the
//! prompt ends the chat. Lines that start with `/` are commands: `/help`, `/new` (a new
//! conversation), `/quit` (or `/exit`, or the end of input).
//!
//! ```sh
//! cargo run --example chat                                  # interactive
//! printf 'hi\nwhat is 17*23?\n' | cargo run --example chat  # piped
//! ```
//!
//! Offline it talks to a scripted demo model (the `Faux` provider) that answers whatever you
//! type: arithmetic goes to the `calculator` tool, questions about the time to the `clock`
//! tool (both really computed), anything else gets a short streamed reply. With a server named
//! in the environment it talks to that server instead:
//!
//! ```sh
//! OPENAI_API_KEY=sk-... cargo run --example chat                                  # OpenAI
//! OPENAI_API=responses OPENAI_API_KEY=sk-... cargo run --example chat             # OpenAI, Responses API
//! ANTHROPIC_API_KEY=sk-ant-... cargo run --example chat                           # Anthropic
//! OPENAI_BASE_URL=http://localhost:11434/v1 PAGENT_MODEL=llama3.2 cargo run --example chat  # Ollama
//! ```
//!
//! The one place that chooses the model server is [`provider`]. The demo streams 60 tokens a
//! second on a terminal and as fast as it can when piped; `PAGENT_DEMO_SPEED=<tokens a second>`
//! sets its pace.

use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use pagent::llm::{Faux, FauxReply, Provider, Request, StreamEvent};
use pagent::{Agent, AgentEvent, Message, PartialBlock, RunStopReason, ToolOutput, tool};
// `schemars` in scope for the derive: pagent's own, so no version to match by hand.
use pagent::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let interactive = io::stdin().is_terminal();
    let (provider, model) = provider()?;
    let agent = Agent::builder()
        .provider(provider)
        .model(model)
        .system_prompt("You are a helpful assistant. Use the tools for arithmetic and the time.")
        .tool(calculator())
        .tool(clock())
        .build()?;
    let _printer = agent.subscribe(print_event);
    interrupt_with_ctrl_c(&agent)?;

    let mut lines = io::stdin().lock().lines();
    loop {
        if interactive {
            print!("> ");
            io::stdout().flush()?;
        }
        let Some(line) = lines.next().transpose()? else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if !interactive {
            // Echo the piped input so the output reads as a transcript.
            println!("> {line}");
        }
        match line {
            "/quit" | "/exit" => break,
            "/help" => {
                println!("{HELP}");
                continue;
            }
            "/new" => {
                agent.reset()?;
                println!("[a new conversation]");
                continue;
            }
            _ if line.starts_with('/') => {
                println!("[unknown command {line}; /help lists them]");
                continue;
            }
            _ => {}
        }
        // Blocks until the reply (and the tools it asks for) are done; `print_event` streams
        // it meanwhile, on this very thread.
        // A failed run (the server unreachable, a 401, a timeout) is an `Err`; the chat
        // reports it and reads on. `?` would end the program instead.
        match agent.prompt(line) {
            Ok(run) if run.stop_reason == RunStopReason::Cancelled => println!("[interrupted]"),
            Ok(_) => {}
            Err(failed) => eprintln!("[error ({}): {failed}]", failed.kind()),
        }
    }
    if interactive {
        println!();
    }
    Ok(())
}

const HELP: &str = "Type a message and press Enter. Ctrl-C interrupts a reply; at the prompt \
                    it ends the chat.\n  /new   a new conversation\n  /quit  end the chat \
                    (also /exit, or the end of input)";

/// Ctrl-C: aborts the run in progress (`abort` may be called from any thread: here the
/// signal handler's own), or ends the chat when none runs. The handle does not keep the
/// agent alive.
fn interrupt_with_ctrl_c(agent: &Agent) -> Result<(), ctrlc::Error> {
    let handle = agent.handle();
    ctrlc::set_handler(move || {
        if !handle.abort() {
            println!();
            std::process::exit(130);
        }
    })
}

/// The model server and model: the one the environment names (`OPENAI_*`, `OPENAI_API=responses`
/// for the Responses API, `ANTHROPIC_*`, `PAGENT_MODEL`), else the offline demo. Everything else works the same with any `Provider`.
fn provider() -> Result<(Arc<dyn Provider>, String), pagent::Error> {
    match pagent::llm::from_env() {
        Ok(configured) => {
            eprintln!(
                "pagent chat: {} model `{}`, configured from the environment",
                configured.provider.name(),
                configured.model
            );
            return Ok((configured.provider, configured.model));
        }
        // Nothing set: the offline demo. A variable set wrong is an error, not a fallback.
        Err(e) if e.is_not_configured() => {}
        Err(e) => return Err(e),
    }
    eprintln!(
        "pagent chat: offline demo on the scripted provider. To use a real server set \
         OPENAI_API_KEY (and OPENAI_BASE_URL for Ollama, llama.cpp or another compatible \
         server; OPENAI_API=responses for the Responses API) or ANTHROPIC_API_KEY (and \
         ANTHROPIC_BASE_URL), and PAGENT_MODEL."
    );
    let demo = Faux::default().chunk_chars(3).otherwise(demo_reply);
    // Stream visibly when a person watches; as fast as possible when piped; as
    // `PAGENT_DEMO_SPEED` (tokens a second) says when set.
    let speed = std::env::var("PAGENT_DEMO_SPEED")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .or(io::stdout().is_terminal().then_some(60.0));
    let demo: Arc<dyn Provider> = match speed {
        Some(speed) => Arc::new(demo.tokens_per_second(speed)),
        None => Arc::new(demo),
    };
    Ok((demo, "pagent-demo".to_owned()))
}

/// Listener: runs on the thread that called `prompt`, for every event, in order.
fn print_event(event: &AgentEvent) {
    let mut out = io::stdout().lock();
    // A closed stdout (`| head`) is not worth a panic in a listener.
    let _ = match event {
        AgentEvent::MessageUpdate { message, delta } => {
            // A delta as long as the last block opened that block: mark the change of kind.
            let opens = |len: usize| message.blocks().last().is_some_and(|b| block_len(b) == len);
            match delta {
                StreamEvent::ThinkingDelta { text } if opens(text.len()) => {
                    write!(out, "(thinking) {text}")
                }
                StreamEvent::TextDelta { text }
                    if opens(text.len()) && message.block_count() > 1 =>
                {
                    write!(out, "\n{text}")
                }
                StreamEvent::TextDelta { text } | StreamEvent::ThinkingDelta { text } => {
                    write!(out, "{text}")
                }
                _ => Ok(()),
            }
        }
        AgentEvent::MessageStart { message } if message.as_assistant().is_some() => Ok(()),
        AgentEvent::MessageEnd { message } => match message.as_assistant() {
            Some(reply) if !reply.text().is_empty() || !reply.thinking().is_empty() => {
                writeln!(out)
            }
            _ => Ok(()),
        },
        AgentEvent::ToolStart { call, .. } => writeln!(out, "  [{}] {}", call.name, call.arguments),
        AgentEvent::ToolEnd { result, .. } => {
            let mark = if result.is_error { "failed" } else { "=" };
            writeln!(out, "  [{}] {mark} {}", result.tool_name, result.text())
        }
        _ => Ok(()),
    };
    let _ = out.flush();
}

fn block_len(block: &PartialBlock) -> usize {
    match block {
        PartialBlock::Text(text) | PartialBlock::Thinking { text, .. } => text.len(),
        _ => 0,
    }
}

#[derive(Deserialize, JsonSchema)]
struct CalculatorArgs {
    /// An arithmetic expression: numbers, + - * / ^, parentheses. Example: "(2 + 3) * 4".
    expression: String,
}

fn calculator() -> impl pagent::Tool {
    tool::typed(
        "calculator",
        "Evaluates an arithmetic expression exactly as written.",
        |args: CalculatorArgs, _ctx| {
            // `?` turns any error (here a `String`) into the `ToolError` the model reads.
            let value = eval(&args.expression)?;
            Ok(ToolOutput::text(format_number(value)))
        },
    )
}

#[derive(Deserialize, JsonSchema)]
struct ClockArgs {}

fn clock() -> impl pagent::Tool {
    tool::typed(
        "clock",
        "The current date and time in UTC.",
        |_: ClockArgs, _ctx| {
            let secs = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            Ok(ToolOutput::text(utc(secs)))
        },
    )
}

/// The offline demo model: answers from the last message of the request.
fn demo_reply(request: &Request) -> FauxReply {
    match request.messages.last().map(|m| &**m) {
        Some(Message::ToolResult(result)) if result.is_error => FauxReply::text(format!(
            "The {} could not do that: {}.",
            result.tool_name,
            result.text()
        )),
        Some(Message::ToolResult(result)) => match result.tool_name.as_str() {
            "clock" => FauxReply::text(format!("It is {}.", result.text())),
            _ => FauxReply::text(format!("The answer is {}.", result.text())),
        },
        Some(Message::User(user)) => {
            let said = &user.text();
            let lower = said.to_lowercase();
            if let Some(expression) = find_arithmetic(said) {
                FauxReply::default()
                    .then_thinking("Arithmetic: the calculator gets it exactly right. ")
                    .then_tool_call("calculator", json!({ "expression": expression }))
            } else if ["time", "clock", "date", "day"]
                .iter()
                .any(|w| lower.contains(w))
            {
                FauxReply::text("Let me look at the clock.").then_tool_call("clock", json!({}))
            } else {
                FauxReply::text(format!(
                    "You said \"{said}\". I am pagent's offline demo model, so my talents are \
                     limited: ask me to compute something (what is 17*23?) or what time it is, \
                     and I will use a real tool. Point me at a real server to chat for real."
                ))
            }
        }
        _ => FauxReply::text("I am pagent's offline demo model. Say something!"),
    }
}

/// The first run of arithmetic in `text` that has a digit and an operator: "what is 17*23?"
/// gives "17*23".
fn find_arithmetic(text: &str) -> Option<String> {
    let is_math = |c: char| c.is_ascii_digit() || " .+-*/^()".contains(c);
    text.split(|c: char| !is_math(c))
        .map(str::trim)
        .find(|run| {
            run.contains(|c: char| c.is_ascii_digit())
                && run
                    .trim_start_matches('-')
                    .contains(['+', '-', '*', '/', '^'])
        })
        .map(str::to_owned)
}

/// Evaluates `+ - * / ^` and parentheses over decimal numbers, with the usual precedence.
fn eval(expression: &str) -> Result<f64, String> {
    let tokens: Vec<char> = expression.chars().filter(|c| !c.is_whitespace()).collect();
    let mut parser = Parser { tokens, pos: 0 };
    let value = parser.sum()?;
    match parser.peek() {
        None if value.is_finite() => Ok(value),
        None => Err(format!("`{expression}` has no finite value")),
        Some(c) => Err(format!("unexpected `{c}` in `{expression}`")),
    }
}

struct Parser {
    tokens: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.tokens.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        self.pos += usize::from(hit);
        hit
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        loop {
            if self.eat('+') {
                value += self.product()?;
            } else if self.eat('-') {
                value -= self.product()?;
            } else {
                return Ok(value);
            }
        }
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.power()?;
        loop {
            if self.eat('*') {
                value *= self.power()?;
            } else if self.eat('/') {
                value /= self.power()?;
            } else {
                return Ok(value);
            }
        }
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        // Right-associative: 2^3^2 is 2^9.
        if self.eat('^') {
            Ok(base.powf(self.power()?))
        } else {
            Ok(base)
        }
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.eat('-') {
            return Ok(-self.unary()?);
        }
        if self.eat('(') {
            let value = self.sum()?;
            return if self.eat(')') {
                Ok(value)
            } else {
                Err("a `(` is not closed".into())
            };
        }
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
            self.pos += 1;
        }
        let number: String = self.tokens[start..self.pos].iter().collect();
        match (number.parse(), self.peek()) {
            (Ok(n), _) => Ok(n),
            (Err(_), Some(c)) if number.is_empty() => {
                Err(format!("expected a number, found `{c}`"))
            }
            (Err(_), None) if number.is_empty() => Err("the expression ends too early".into()),
            (Err(_), _) => Err(format!("`{number}` is not a number")),
        }
    }
}

/// Whole numbers without a fraction; others with up to 10 decimals.
fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        let s = format!("{value:.10}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// `secs` since the Unix epoch as "2024-05-01 13:45:07 UTC".
fn utc(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3_600, rem % 3_600 / 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_found_and_evaluated() {
        assert_eq!(find_arithmetic("what is 17*23?").as_deref(), Some("17*23"));
        assert_eq!(find_arithmetic("hi there"), None);
        assert_eq!(find_arithmetic("I am 42"), None);
        assert_eq!(eval("17*23"), Ok(391.0));
        assert_eq!(eval("2 + 3 * (4 - 1) ^ 2"), Ok(29.0));
        assert_eq!(format_number(eval("1/4").unwrap()), "0.25");
        assert!(eval("2 +").is_err());
        assert!(eval("(1").is_err());
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }
}
