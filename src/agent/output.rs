//! Structured answers in the loop: which requests carry the schema, the check of the answer,
//! and the answer and repair turns.
//!
//! # Which turn is the answer turn
//!
//! A schema sent with a request that also offers tools makes some servers stop calling
//! tools: llama.cpp's server turns the schema into a grammar and the model can then only
//! answer, so an agent that needs a tool never gets to run it. So by default
//! ([`OutputTurn::Answer`]) the schema goes only with a request on which the model is to
//! answer:
//! - a request that offers no tools (an agent without tools: its first reply is the answer,
//!   at no extra cost; the final turn under [`FinalTurn::ToolsWithheld`]);
//! - the final answer turn after `max_turns` (see [`FinalTurn`]), which offers the tools but
//!   runs none of their calls;
//! - the answer turn: when the model answered without calling tools on a turn that did not
//!   carry the schema, that answer is checked first, and it ends the run if it is already a
//!   valid answer; else one more turn asks for the answer in the schema (its user message
//!   says so, with the schema).
//!
//! The cost: one extra model call for a run with tools whose final answer is not already a
//! valid value, and none otherwise. [`OutputTurn::Every`] sends the schema with every
//! request instead, beside the tools, for servers that honour both (OpenAI, Anthropic): no
//! extra call, and the model calls tools or answers in the schema as it sees fit.
//!
//! On a request where the model is to answer, the provider also asks for no tool call where
//! its API can (`tool_choice: "none"`) while still listing the tools, so that the prompt
//! cache keeps its prefix; tool calls made all the same are not run (their results say so).
//!
//! # Repairs
//!
//! An answer that does not match the schema on a turn that carried it gets a repair turn:
//! a user message that says exactly what was wrong (`at /score: 300 is above the maximum
//! 255`), with the schema the first time. At most
//! [`output_repairs`](super::AgentBuilder::output_repairs) of them; then the run fails with
//! [`Error::InvalidOutput`](crate::Error::InvalidOutput), which keeps the last answer's text. Answer and repair turns run
//! no tools and do not count against `max_turns`.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::run::{self, Run, Start};
use super::{Agent, Prompt, RunResult};
use crate::event::{AgentEvent, RunStopReason};
use crate::message::{AssistantMessage, Message, StopReason};
use crate::output::{OutputCheck, OutputRequest, OutputSchema};
use crate::{Error, RunError};

/// When a run with an [`OutputSchema`] sends the schema with a request; see the
/// [`AgentBuilder::output_turn`](super::AgentBuilder::output_turn) docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutputTurn {
    /// Only with a request on which the model is to answer: one that offers no tools, the
    /// final turn after `max_turns`, and the answer turn that follows an answer given
    /// without the schema (when that answer is not already valid). Tool turns keep their
    /// tools on every server; a run with tools may cost one model call more.
    #[default]
    Answer,
    /// With every request, beside the tools: for servers that honour both (OpenAI,
    /// Anthropic). No extra model call; a server that lets the schema win over the tools
    /// (llama.cpp's) then never calls a tool.
    Every,
}

/// A run's structured answer, as it goes.
pub(crate) struct RunOutput {
    schema: OutputSchema,
    when: OutputTurn,
    repairs_left: u32,
    attempts: u32,
    /// This turn asks for the answer (an answer or repair turn): its calls are not run.
    answering: bool,
    /// This turn's request carried the schema.
    sent: bool,
    /// An agent message of this run showed the model the schema.
    shown: bool,
    value: Option<Value>,
}

impl RunOutput {
    pub(crate) fn new(schema: OutputSchema, when: OutputTurn, repairs: u32) -> RunOutput {
        RunOutput {
            schema,
            when,
            repairs_left: repairs,
            attempts: 0,
            answering: false,
            sent: false,
            shown: false,
            value: None,
        }
    }

    /// The valid answer, once there is one.
    pub(crate) fn into_value(self) -> Option<Value> {
        self.value
    }

    /// The user message of an answer turn (`repair` false: the schema was not asked for)
    /// or a repair turn.
    fn prompt(&mut self, problem: &str, repair: bool) -> String {
        let name = self.schema.name();
        let mut text = if repair {
            format!(
                "Your answer does not match the JSON Schema `{name}`: {problem}. Answer again \
                 with only a JSON value that matches the schema, and no other text."
            )
        } else {
            format!(
                "Now give your final answer as only a JSON value that matches the JSON Schema \
                 `{name}`, with no other text."
            )
        };
        if !self.shown {
            self.shown = true;
            text.push_str("\n\n");
            text.push_str(&self.schema.schema().to_string());
        }
        text
    }
}

impl Run<'_> {
    /// Whether this turn asks for the answer: an answer or repair turn, whose calls are not
    /// run (as the final turn's are not).
    pub(crate) fn answering(&self) -> bool {
        self.output.as_ref().is_some_and(|o| o.answering)
    }

    /// What this turn's request asks of the answer, given whether it offers tools; notes
    /// whether it carries the schema.
    pub(crate) fn output_request(&mut self, offers_tools: bool) -> Option<OutputRequest> {
        let final_turn = self.final_turn;
        let o = self.output.as_mut()?;
        let answer_now = final_turn || o.answering || !offers_tools;
        o.sent = answer_now || o.when == OutputTurn::Every;
        o.sent
            .then(|| OutputRequest::new(o.schema.clone(), answer_now))
    }

    /// Checks the answer where the run would stop after this turn, emitting
    /// `OutputChecked`: a valid answer lets it stop (`stop` as it is); an invalid one queues
    /// an answer or repair turn (`Continuing`, its message in `input`) or, with no repair
    /// left, fails the run (`Error`, with the error in `error`). A turn whose tools ran, or
    /// that failed or was cancelled, has no answer to check.
    pub(crate) fn settle_answer(
        &mut self,
        reply: &AssistantMessage,
        had_calls: bool,
        stop: RunStopReason,
        input: &mut Vec<Message>,
        error: &mut Option<Error>,
    ) -> RunStopReason {
        let final_turn = self.final_turn;
        let turn = self.turn;
        let Some(o) = self.output.as_mut() else {
            return stop;
        };
        let answers = matches!(
            stop,
            RunStopReason::NoToolCalls | RunStopReason::EmptyResponse | RunStopReason::MaxTurns
        ) && (final_turn || !had_calls);
        if !answers {
            o.answering = false;
            return stop;
        }
        o.attempts += 1;
        let mut check = if had_calls {
            let mut check = OutputCheck::new(&o.schema, o.attempts, "");
            check.value = Err("the reply called tools instead of answering".into());
            check
        } else {
            OutputCheck::new(&o.schema, o.attempts, reply.text())
        };
        if reply.stop_reason == StopReason::Length
            && let Err(problem) = &mut check.value
        {
            problem.push_str(" (the reply was cut at its output token limit)");
        }
        let check = Arc::new(check);
        let (problem, raw) = match &check.value {
            Ok(value) => {
                o.value = Some(value.clone());
                o.answering = false;
                (None, String::new())
            }
            Err(problem) => (Some(problem.clone()), check.raw.clone()),
        };
        let repair = o.sent;
        let next = match problem {
            None => stop,
            Some(problem) if repair && o.repairs_left == 0 => {
                o.answering = false;
                *error = Some(Error::InvalidOutput {
                    message: problem,
                    raw,
                });
                RunStopReason::Error
            }
            Some(problem) => {
                if repair {
                    o.repairs_left -= 1;
                }
                o.answering = true;
                input.push(Message::user(o.prompt(&problem, repair)));
                RunStopReason::Continuing
            }
        };
        self.emit(AgentEvent::OutputChecked { turn, check });
        next
    }
}

/// A run's typed answer and the run itself: what [`Agent::prompt_as`] returns.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TypedRun<T> {
    /// The answer, deserialized.
    pub value: T,
    /// The run: its messages (the answer is the last reply's text), stop reason, usage, and
    /// the answer as JSON in `output`.
    pub result: RunResult,
}

impl Agent {
    /// Runs the agent on `input` as [`Agent::prompt`] does, and returns its answer as a `T`:
    /// the run asks the model for a structured answer in `T`'s JSON Schema (its
    /// `schemars::JsonSchema` derive, see [`OutputSchema::of`]), checks it, and gives the
    /// model repair turns while it does not match, as the agent's
    /// [`output_turn`](super::AgentBuilder::output_turn) and
    /// [`output_repairs`](super::AgentBuilder::output_repairs) say (see
    /// [`OutputTurn`] for which request carries the schema). This run's schema replaces the
    /// agent's own [`output_schema`](super::AgentBuilder::output_schema), if any.
    ///
    /// Blocks as [`Agent::prompt`] does.
    ///
    /// ```
    /// use pagent::llm::{Faux, FauxReply};
    /// use pagent::schemars::{self, JsonSchema};
    /// use pagent::Agent;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema, Debug, PartialEq)]
    /// struct City {
    ///     name: String,
    ///     population: u32,
    /// }
    ///
    /// let faux = Faux::default().reply(FauxReply::json(serde_json::json!(
    ///     {"name": "Oslo", "population": 709037}
    /// )));
    /// let agent = Agent::builder().provider(faux.clone()).build()?;
    /// let city = agent.prompt_as::<City>("The largest city of Norway?")?.value;
    /// assert_eq!(city, City { name: "Oslo".into(), population: 709037 });
    /// // The request asked for the schema (no tools: the first reply is the answer).
    /// let asked = faux.requests()[0].output.clone().unwrap();
    /// assert_eq!(asked.schema.name(), "City");
    /// # Ok::<(), pagent::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Agent::prompt`]; and, with the run's result, [`Error::InvalidOutput`] when the
    /// answer still did not match after the repair turns (the error holds its text) or the
    /// run ended without an answer (at `max_turns` with [`FinalTurn::Off`](crate::FinalTurn::Off), say), and
    /// [`Error::Aborted`] for a run aborted before its answer.
    pub fn prompt_as<T: DeserializeOwned + schemars::JsonSchema>(
        &self,
        input: impl Into<Prompt>,
    ) -> Result<TypedRun<T>, RunError> {
        let result = self.prompt_with_output(input, OutputSchema::of::<T>())?;
        match result.output_as::<T>() {
            Ok(value) => Ok(TypedRun { value, result }),
            Err(_) if result.stop_reason == RunStopReason::Cancelled => {
                Err(RunError::new(Error::Aborted, result))
            }
            Err(error) => Err(RunError::new(error, result)),
        }
    }

    /// Runs the agent on `input` as [`Agent::prompt`] does, asking for a structured answer
    /// matching `schema` (a schema known at run time: [`OutputSchema::new`]), as
    /// [`Agent::prompt_as`] does; the answer is in [`RunResult::output`]. This run's schema
    /// replaces the agent's own, if any.
    ///
    /// # Errors
    /// As [`Agent::prompt`]; and [`Error::InvalidOutput`], with the run's result, when the
    /// answer still did not match after the repair turns. A run that ended as asked without
    /// an answer (aborted, or at `max_turns` with [`FinalTurn::Off`](crate::FinalTurn::Off)) is `Ok`, with no
    /// `output`.
    pub fn prompt_with_output(
        &self,
        input: impl Into<Prompt>,
        schema: OutputSchema,
    ) -> Result<RunResult, RunError> {
        let input = input.into().0;
        if input.is_empty() {
            return Err(RunError::refused(Error::NothingToContinue(
                "the prompt has no message".into(),
            )));
        }
        run::run_with(&self.inner, Start::Prompt(input), Some(schema))
    }
}

impl RunResult {
    /// The run's structured answer as a `T` (deserialized from [`RunResult::output`]).
    ///
    /// # Errors
    /// [`Error::InvalidOutput`] when the run has no answer (it had no
    /// [`OutputSchema`], or ended without a valid answer), or when the answer does not
    /// deserialize into `T`.
    pub fn output_as<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let raw = || self.final_message().map(|m| m.text()).unwrap_or_default();
        let Some(value) = &self.output else {
            return Err(Error::InvalidOutput {
                message: format!("the run ended ({}) without an answer", self.stop_reason),
                raw: raw(),
            });
        };
        T::deserialize(value).map_err(|e| Error::InvalidOutput {
            message: format!("the answer does not fit: {e}"),
            raw: raw(),
        })
    }
}

/// The tool results of an answer turn's calls, which do not run.
pub(crate) const NOT_RUN: &str = "not run: the answer was asked for on this turn, and its \
                                  tool calls are not run";
