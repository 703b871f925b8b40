//! The agent the app drives: the model server the environment names, else an offline demo on
//! the scripted provider, paced so that streaming is visible.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pagent::llm::{Faux, FauxReply, FromEnv, Provider, ReplyEnd, Request, StreamEvent};
use pagent::{Agent, CancelToken, Error, Message, ToolOutput, Usage, tool};

/// How fast the offline demo streams.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pace {
    /// Chunks a second (`None`: as fast as the agent takes them).
    pub chunks_per_second: Option<f64>,
    /// How long the weather tool works, reporting progress in five steps.
    pub tool_time: Duration,
    /// How long the demo's one rate-limit retry waits (see [`Flaky`]); zero for none.
    pub retry_wait: Duration,
}

impl Pace {
    /// Paced for a person to watch: about 40 chunks of three characters a second, a tool
    /// that works for two seconds, and one retry of 1.5 s on the first request.
    pub const VISIBLE: Pace = Pace {
        chunks_per_second: Some(40.0),
        tool_time: Duration::from_secs(2),
        retry_wait: Duration::from_millis(1_500),
    };

    /// As fast as it goes, no retry: for tests that do not wait for the clock.
    pub const FAST: Pace = Pace {
        chunks_per_second: None,
        tool_time: Duration::ZERO,
        retry_wait: Duration::ZERO,
    };
}

/// The agent of the app: the provider the environment names (`OPENAI_*`, `ANTHROPIC_*`,
/// `PAGENT_MODEL`, see the README), else the offline demo at `pace`. Returns the agent and a
/// line that says which it is.
///
/// # Errors
/// What `pagent::llm::from_env_or` returns for a configuration that is set but wrong (a bad
/// base URL, say), or what `build` returns.
pub fn agent_from_env(pace: Pace) -> Result<(Agent, String), Error> {
    let mut offline = false;
    let chosen = pagent::llm::from_env_or(|| {
        offline = true;
        FromEnv::new(demo_provider(pace), "faux-demo")
    })?;
    let source = if offline {
        "offline demo (the scripted provider); set OPENAI_BASE_URL or ANTHROPIC_API_KEY for a real model".to_owned()
    } else {
        format!("{} ({})", chosen.model, chosen.provider.name())
    };
    let agent = builder(pace)
        .provider(chosen.provider)
        .model(chosen.model)
        .build()?;
    Ok((agent, source))
}

/// The offline demo agent at `pace`, whatever the environment says (what the tests drive).
///
/// # Panics
/// Never: the demo's configuration is valid.
pub fn demo_agent(pace: Pace) -> Agent {
    builder(pace)
        .provider(demo_provider(pace))
        .model("faux-demo")
        .build()
        // OK because the scripted provider and the tool are always accepted.
        .expect("the demo agent builds")
}

fn builder(pace: Pace) -> pagent::AgentBuilder {
    Agent::builder()
        .system_prompt("You are a weather assistant. Use the weather tool for any city.")
        .tool(weather(pace.tool_time))
}

/// The weather tool's arguments.
#[derive(serde::Deserialize, pagent::schemars::JsonSchema)]
#[schemars(crate = "pagent::schemars")]
struct City {
    /// The city, e.g. "Oslo".
    city: String,
}

/// A weather tool that takes `time`, reporting its progress in five steps, and stops early on
/// abort.
fn weather(time: Duration) -> impl pagent::Tool {
    tool::typed(
        "weather",
        "The current weather in a city.",
        move |args: City, ctx| {
            for step in 1..=5 {
                if ctx.sleep(time / 5) {
                    return Err("cancelled".into());
                }
                ctx.update(format!("asking the stations: {}%", step * 20));
            }
            Ok(ToolOutput::text(format!(
                "{}: 21 °C, sunny, light wind from the west",
                args.city
            )))
        },
    )
}

/// The scripted model of the demo, wrapped so that its first request meets a rate limit.
fn demo_provider(pace: Pace) -> impl Provider {
    let mut faux = Faux::default().chunk_chars(3).otherwise(reply);
    if let Some(chunks) = pace.chunks_per_second {
        faux = faux.tokens_per_second(chunks);
    }
    Flaky {
        inner: faux,
        wait: pace.retry_wait,
        requests: AtomicUsize::new(0),
    }
}

/// What the demo model answers `request`: a weather lookup for a question, the answer once
/// the tool's result is in, a word on a steering message, a failure when asked to fail.
fn reply(request: &Request) -> FauxReply {
    let messages = &request.messages;
    let last = messages.last().map(|m| m.text()).unwrap_or_default();
    let usage = Usage::new(40 + 12 * messages.len() as u64, 60);
    match messages.last().map(|m| &**m) {
        Some(Message::ToolResult(_)) => FauxReply::text(format!(
            "Here is what the stations say: {last}. A fine day to be outside; take a light \
             jacket for the wind, and sunglasses. Ask me about another city whenever you like."
        ))
        .usage(usage),
        Some(Message::User(_)) if last.to_lowercase().contains("fail") => {
            FauxReply::fail("the demo model failed, as it was asked to")
        }
        // A steering message goes in after the tool results of the turn it interrupted.
        Some(Message::User(_))
            if messages.len() > 1
                && matches!(&*messages[messages.len() - 2], Message::ToolResult(_)) =>
        {
            FauxReply::text(format!("Understood: \"{last}\". I will keep that in mind."))
                .usage(usage)
        }
        _ => {
            let city = city_in(&last);
            FauxReply::default()
                .then_thinking(format!(
                    "The user asks: \"{last}\". The weather tool knows about {city}; \
                     I will ask it before I answer."
                ))
                .then_text(format!("Let me look up the weather in {city}."))
                .then_tool_call("weather", serde_json::json!({ "city": city }))
                .usage(usage)
        }
    }
}

/// The last capitalized word of `text` (the city of "Weather in Bergen?"), else "Oslo".
fn city_in(text: &str) -> String {
    text.split(|c: char| !c.is_alphabetic())
        .rev()
        .find(|w| {
            w.chars().next().is_some_and(char::is_uppercase)
                && !matches!(*w, "What" | "How" | "Is" | "The" | "Weather" | "I")
        })
        .unwrap_or("Oslo")
        .to_owned()
}

/// A provider whose first request meets a rate limit, as a real server's may: it announces
/// a retry, waits it out (ending early on abort), then lets `inner` answer. Shows a UI's
/// retry countdown offline; real providers retry on their own (see `RetryPolicy`).
pub struct Flaky<P> {
    /// The provider that answers.
    pub inner: P,
    /// The wait of the one retry; zero for none.
    pub wait: Duration,
    /// Requests so far.
    pub requests: AtomicUsize,
}

impl<P: Provider> Provider for Flaky<P> {
    fn stream(
        &self,
        request: &Request,
        cancel: &CancelToken,
        on_event: &mut pagent::llm::OnEvent<'_>,
    ) -> Result<ReplyEnd, Error> {
        if self.requests.fetch_add(1, Ordering::SeqCst) == 0 && !self.wait.is_zero() {
            on_event(StreamEvent::retry(
                1,
                self.wait,
                "http status 429: rate limited (the demo's one retry)",
            ))?;
            if cancel.wait_timeout(self.wait) {
                return Err(Error::Aborted);
            }
        }
        self.inner.stream(request, cancel, on_event)
    }

    fn name(&self) -> &str {
        "faux"
    }
}

#[cfg(test)]
mod tests {
    use super::city_in;

    #[test]
    fn the_city_is_the_last_capitalized_word() {
        assert_eq!(city_in("What is the weather in Bergen?"), "Bergen");
        assert_eq!(city_in("how warm is it"), "Oslo");
        assert_eq!(city_in("Weather in São Paulo"), "Paulo");
    }
}
