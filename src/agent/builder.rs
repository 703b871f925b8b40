//! `AgentBuilder` and the configuration a run uses.

use std::fmt;
use std::sync::{Arc, OnceLock};

use super::guard;
use super::hooks::{BeforeToolCall, Hooks, ToolCallRequest, ToolDecision, TurnSetup};
use super::{Agent, FinalTurn, OutputTurn, QueueMode, SteeringPolicy};
use crate::Error;
use crate::context::ContextPolicy;
use crate::llm::{Provider, ThinkingLevel, TokenCounter, ToolDefinition};
use crate::message::{Message, ToolCall, ToolResultMessage};
use crate::output::OutputSchema;
use crate::tool::Tool;

/// What a run reads of the agent's configuration (cloned at the start of each run).
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) model: String,
    pub(crate) system_prompt: String,
    pub(crate) thinking: ThinkingLevel,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    // What the model sees of `tools`, worked out when the tools are set (never under a lock:
    // `definition()` is user code).
    pub(crate) tool_defs: Arc<[ToolDefinition]>,
    // The names of `tools`, asked on first use by a run (on its own copy of the config).
    pub(crate) tool_names: ToolNames,
    pub(crate) max_turns: u32,
    pub(crate) final_turn: FinalTurn,
    pub(crate) run_timeout: Option<std::time::Duration>,
    pub(crate) max_parallel_tools: usize,
    pub(crate) max_reply_bytes: u64,
    pub(crate) repair_requests: bool,
    pub(crate) steering_policy: SteeringPolicy,
    pub(crate) steering_mode: QueueMode,
    pub(crate) follow_up_mode: QueueMode,
    pub(crate) hooks: Hooks,
    pub(crate) trace: crate::trace::Settings,
    pub(crate) context_policy: ContextPolicy,
    pub(crate) context_window: Option<u64>,
    /// The counter set on the builder, else the provider's (`Provider::token_counter`).
    pub(crate) token_counter: Option<Arc<dyn TokenCounter>>,
    pub(crate) overflow_recovery: bool,
    pub(crate) output: Option<OutputSchema>,
    pub(crate) output_turn: OutputTurn,
    pub(crate) output_repairs: u32,
}

/// The names of a run's tools, in tool order, asked once (`Tool::name` is user code, and the
/// lookup of each call would otherwise ask every tool): `Err` holds the panic of a tool whose
/// `name()` panicked, and no call finds that tool.
///
/// The agent's own config never fills it (only a run's copy does), so a `set_tools` needs no
/// reset; a run that changes its tools (`before_turn`) puts in a fresh one.
#[derive(Clone, Default)]
pub(crate) struct ToolNames(OnceLock<Arc<[Result<String, String>]>>);

impl ToolNames {
    pub(crate) fn get(&self, tools: &[Arc<dyn Tool>]) -> &[Result<String, String>] {
        self.0
            .get_or_init(|| tools.iter().map(|t| tool_name(&**t)).collect())
    }
}

/// A tool's name, or the message of the panic that came instead.
pub(crate) fn tool_name(tool: &dyn Tool) -> Result<String, String> {
    guard::catch(|| tool.name().to_owned())
}

/// A name for `Debug` output, which must not panic.
pub(crate) fn debug_name(tool: &Arc<dyn Tool>) -> String {
    tool_name(&**tool).unwrap_or_else(|_| "<name() panicked>".to_owned())
}

/// The provider's name for `Debug` output, which must not panic.
fn debug_provider(provider: &Arc<dyn Provider>) -> String {
    guard::catch(|| provider.name().to_owned()).unwrap_or_else(|_| "<name() panicked>".to_owned())
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("provider", &debug_provider(&self.provider))
            .field("model", &self.model)
            .field("thinking", &self.thinking)
            .field(
                "tools",
                &self.tools.iter().map(debug_name).collect::<Vec<_>>(),
            )
            .field("max_turns", &self.max_turns)
            .field("final_turn", &self.final_turn)
            .field("run_timeout", &self.run_timeout)
            .field("max_parallel_tools", &self.max_parallel_tools)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("repair_requests", &self.repair_requests)
            .field("steering_policy", &self.steering_policy)
            .field("steering_mode", &self.steering_mode)
            .field("follow_up_mode", &self.follow_up_mode)
            .field("hooks", &self.hooks)
            .field("context_policy", &self.context_policy)
            .field("context_window", &self.context_window)
            .field(
                "token_counter",
                &self
                    .token_counter
                    .as_ref()
                    .map(|c| guard::catch(|| c.name().to_owned()).unwrap_or_default()),
            )
            .field("overflow_recovery", &self.overflow_recovery)
            .field("output", &self.output.as_ref().map(OutputSchema::name))
            .field("output_turn", &self.output_turn)
            .field("output_repairs", &self.output_repairs)
            .finish()
    }
}

/// Builds an [`Agent`]. Only the provider is required.
#[must_use]
pub struct AgentBuilder {
    provider: Option<Arc<dyn Provider>>,
    model: String,
    system_prompt: String,
    thinking: ThinkingLevel,
    tools: Vec<Arc<dyn Tool>>,
    max_turns: u32,
    final_turn: FinalTurn,
    run_timeout: Option<std::time::Duration>,
    max_parallel_tools: usize,
    max_reply_bytes: u64,
    repair_requests: bool,
    steering_policy: SteeringPolicy,
    steering_mode: QueueMode,
    follow_up_mode: QueueMode,
    hooks: Hooks,
    messages: Vec<Message>,
    trace: crate::trace::Settings,
    context_policy: ContextPolicy,
    context_window: Option<u64>,
    token_counter: Option<Arc<dyn TokenCounter>>,
    overflow_recovery: bool,
    output: Option<OutputSchema>,
    output_turn: OutputTurn,
    output_repairs: u32,
}

impl Default for AgentBuilder {
    fn default() -> AgentBuilder {
        AgentBuilder {
            provider: None,
            model: String::new(),
            system_prompt: String::new(),
            thinking: ThinkingLevel::Off,
            tools: Vec::new(),
            max_turns: AgentBuilder::DEFAULT_MAX_TURNS,
            final_turn: FinalTurn::default(),
            run_timeout: None,
            max_parallel_tools: 8,
            max_reply_bytes: AgentBuilder::DEFAULT_MAX_REPLY_BYTES,
            repair_requests: true,
            steering_policy: SteeringPolicy::AfterBatch,
            steering_mode: QueueMode::OneAtATime,
            follow_up_mode: QueueMode::OneAtATime,
            hooks: Hooks::default(),
            messages: Vec::new(),
            trace: crate::trace::Settings::default(),
            context_policy: ContextPolicy::default(),
            context_window: None,
            token_counter: None,
            overflow_recovery: true,
            output: None,
            output_turn: OutputTurn::default(),
            output_repairs: AgentBuilder::DEFAULT_OUTPUT_REPAIRS,
        }
    }
}

impl AgentBuilder {
    /// The default of [`AgentBuilder::max_turns`]: 24, as pagent's.
    pub const DEFAULT_MAX_TURNS: u32 = 24;

    /// The default of [`AgentBuilder::max_reply_bytes`]: 64 MiB.
    pub const DEFAULT_MAX_REPLY_BYTES: u64 = 64 * 1024 * 1024;

    /// The default of [`AgentBuilder::output_repairs`]: 2.
    pub const DEFAULT_OUTPUT_REPAIRS: u32 = 2;

    /// The model server. Required.
    pub fn provider(mut self, provider: impl Provider + 'static) -> AgentBuilder {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// The model id sent with each request. Defaults to empty (the provider's default).
    pub fn model(mut self, model: impl Into<String>) -> AgentBuilder {
        self.model = model.into();
        self
    }

    /// The system prompt. Defaults to none.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> AgentBuilder {
        self.system_prompt = prompt.into();
        self
    }

    /// The thinking level. Defaults to [`ThinkingLevel::Off`].
    pub fn thinking(mut self, level: ThinkingLevel) -> AgentBuilder {
        self.thinking = level;
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> AgentBuilder {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds a shared tool.
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> AgentBuilder {
        self.tools.push(tool);
        self
    }

    /// How many turns of one run may run tools (at least 1), as pagent's `max_turns`.
    /// Defaults to [`AgentBuilder::DEFAULT_MAX_TURNS`] (24, pagent's default).
    ///
    /// Every model call is a turn (`TurnStart { turn }` counts them from 1), also one that
    /// takes a steering or follow-up message. The limit is checked after the tools of turn
    /// `turns` ran: when the model called tools there, the run makes one final answer turn
    /// (see [`AgentBuilder::final_turn`]: by default the tools are offered and the calls it
    /// makes are not run), so a run makes at most `turns + 1` model calls. A run that reaches
    /// the limit ends with `RunStopReason::MaxTurns`, or as any answer ends when the final
    /// turn answers without calling tools.
    pub fn max_turns(mut self, turns: u32) -> AgentBuilder {
        self.max_turns = turns.max(1);
        self
    }

    /// What the run does when it reaches [`max_turns`](AgentBuilder::max_turns) after a turn
    /// whose tools ran: a final answer turn with the tools offered but not run (pagent v4,
    /// [`FinalTurn::ToolsNotRun`]), with the tools withheld (pagent v5,
    /// [`FinalTurn::ToolsWithheld`]), or none (pagent v1, [`FinalTurn::Off`]). Defaults to
    /// [`FinalTurn::ToolsNotRun`].
    pub fn final_turn(mut self, final_turn: FinalTurn) -> AgentBuilder {
        self.final_turn = final_turn;
        self
    }

    /// How long one run (`prompt`, `continue_run`) may take in all. Defaults to none.
    ///
    /// At the deadline the run ends in whatever phase it is: connecting, waiting for the
    /// reply, streaming it (keep-alive comments do not extend it), waiting before a retry,
    /// in a tool that honours its cancel token, or in a `before_tool_call` hook waiting in
    /// [`ToolCallRequest::wait_for`]. It ends with `RunStopReason::Error` and
    /// [`Error::Timeout`]`(`[`TimeoutPhase::Run`](crate::TimeoutPhase::Run)`)`, and the
    /// transcript stays valid: the reply cut by the deadline keeps what streamed and ends
    /// with `StopReason::Error`, and tool calls that did not run get results saying so.
    ///
    /// The run's [`CancelToken`](crate::CancelToken) carries the deadline, so no
    /// thread watches the clock. The limit: code that ignores its token (a tool that blocks
    /// without looking at it, a hook that waits on something else, a provider that does
    /// not look at the token, a DNS lookup) holds the run until it returns.
    pub fn run_timeout(mut self, timeout: std::time::Duration) -> AgentBuilder {
        self.run_timeout = Some(timeout);
        self
    }

    /// How many tool calls of one reply run at once (at least 1; 1 makes every batch
    /// sequential). Defaults to 8.
    ///
    /// The calls of one reply run on scoped worker threads, at most this many at a time; a
    /// reply that calls a [`Tool::sequential`] tool runs all its calls one after another.
    /// Calls that run one at a time (a reply with one call, a sequential batch) run on the
    /// run thread itself, with no thread to start, unless a `run_timeout` is set (see the
    /// [tool contract](crate::tool)).
    /// Whatever the concurrency, events come from the run thread only: `ToolStart` in call
    /// order, `ToolUpdate` and `ToolEnd` as they happen (so `ToolEnd`s are in completion
    /// order), and the result messages in call order. A tool's result is in the state
    /// (`State::tool_results`, and gone from `pending_tool_calls`) as soon as its `ToolEnd` is
    /// out, while its siblings still run.
    pub fn max_parallel_tools(mut self, n: usize) -> AgentBuilder {
        self.max_parallel_tools = n.max(1);
        self
    }

    /// Whether tool calls without a result are answered for the model: a call without a
    /// result (a session cut in the middle of a tool batch, messages handed to
    /// [`AgentBuilder::messages`] or to `prompt`, a result pruned by `transform_context`) gets
    /// a synthesized error result right after its message's results, since OpenAI and
    /// Anthropic reject a request with an unanswered call. Two repairs do it, and this
    /// setting governs both: each model request is repaired before it is sent (the
    /// transcript is not changed), and a run that starts on a transcript whose last
    /// assistant message has unanswered calls first appends their results as messages.
    ///
    /// Turn it off only for a server that accepts such requests and a history that means
    /// them: the few-shot prompts that make a small local model (llama.cpp) call tools show
    /// calls without results on purpose. Off, the transcript and every request keep those
    /// calls as they are (and [`crate::Agent::continue_run`] on a transcript that ends with
    /// such a call has nothing to continue, as after any assistant message). The calls of the
    /// agent's own runs always get their results either way. Defaults to true.
    pub fn repair_requests(mut self, repair: bool) -> AgentBuilder {
        self.repair_requests = repair;
        self
    }

    /// The most bytes one model reply may stream, counted over its text, thinking and
    /// tool-call arguments (and the small ids, names and signatures) as they arrive. A reply that would grow past it is ended there
    /// with [`Error::ReplyTooLarge`]: the provider is told to stop, what arrived before the
    /// limit is kept as the reply (stop reason `Error`), its tool calls get results, and the
    /// run ends with `RunStopReason::Error`; the agent takes the next prompt as usual.
    /// Bounds the memory a misbehaving or hostile server can make a run hold. Defaults to
    /// [`AgentBuilder::DEFAULT_MAX_REPLY_BYTES`] (64 MiB).
    pub fn max_reply_bytes(mut self, bytes: u64) -> AgentBuilder {
        self.max_reply_bytes = bytes;
        self
    }

    /// When steering messages interrupt a batch of tool calls. Defaults to
    /// [`SteeringPolicy::AfterBatch`].
    ///
    /// With `AfterBatch`, every call of the current reply runs, and the steering message goes
    /// in after their results. With `AtToolBoundary`, each call not started by the time
    /// steering is queued is skipped (it still gets `ToolStart`, `ToolEnd` and a result saying
    /// it was skipped because the user sent a new message); calls already running finish and
    /// keep their results.
    pub fn steering_policy(mut self, policy: SteeringPolicy) -> AgentBuilder {
        self.steering_policy = policy;
        self
    }

    /// How many queued steering messages one model call takes. Defaults to
    /// [`QueueMode::OneAtATime`]: with three messages queued, three model calls follow, each
    /// seeing one more message; `All` sends them together in one call.
    pub fn steering_mode(mut self, mode: QueueMode) -> AgentBuilder {
        self.steering_mode = mode;
        self
    }

    /// How many queued follow-ups one new turn takes. Defaults to [`QueueMode::OneAtATime`]:
    /// each follow-up waits until the model answered the previous one.
    pub fn follow_up_mode(mut self, mode: QueueMode) -> AgentBuilder {
        self.follow_up_mode = mode;
        self
    }

    /// A transcript to start from (a restored session, say). Defaults to empty.
    ///
    /// The transcript is kept as given. Tool calls without a result are answered for the
    /// model: every request carries a synthesized error result (`no result: this tool call
    /// was never answered ..`) right after the results the call's message has. When such
    /// calls are in the last assistant message (a session cut by a crash in the middle of a
    /// tool batch), the next run appends those results as real messages first
    /// (`MessageStart` / `MessageEnd` right after its first `TurnStart`, before its input),
    /// so the transcript is whole again; `continue_run` then lets the model answer them.
    /// With [`AgentBuilder::repair_requests`] off, neither happens: the transcript and the
    /// requests keep the calls without results, as given.
    pub fn messages(mut self, messages: impl IntoIterator<Item = Message>) -> AgentBuilder {
        self.messages = messages.into_iter().collect();
        self
    }

    /// Called before each tool call runs, one call at a time in call order, after its
    /// `ToolStart` and only for calls whose arguments are valid ([`Tool::validate`]): allow
    /// it, block it with a reason the model sees (the result is an error `blocked: <reason>`),
    /// or rewrite its arguments (validated again; the transcript and `ToolStart` keep the
    /// call as the model made it, and the call's `ToolExecute` carries the rewritten
    /// arguments with `rewritten: true`). Not called for calls settled without running (unknown tool, invalid JSON or
    /// arguments, skipped, cancelled). Defaults to allowing every call.
    ///
    /// It may block waiting for a human; use [`ToolCallRequest::wait_for`] so that `abort()`
    /// releases it: the call then gets a "cancelled" result, whatever the hook returned.
    /// While it blocks, calls of the batch that already started go on, and their `ToolUpdate`
    /// and `ToolEnd` are published as they happen: the hook then runs on a helper thread of
    /// the run, and may overlap with `after_tool_call` and listeners. A panic becomes an error
    /// result for that call; the run goes on.
    pub fn before_tool_call(
        mut self,
        hook: impl Fn(&ToolCallRequest<'_>) -> ToolDecision + Send + Sync + 'static,
    ) -> AgentBuilder {
        self.hooks.before_tool_call = Some(Arc::new(hook));
        self
    }

    /// Puts `ask` around the `before_tool_call` hook set so far (`wire::serve` and the ACP
    /// server ask their client so). That hook decides first, and a call it blocks is blocked;
    /// `ask` is called for each call it lets run, with the call as it would run (its
    /// arguments rewritten where the hook rewrote them), and returns the decision that
    /// replaces the hook's, or `None` to keep it.
    pub(crate) fn ask_before_tool_call(
        self,
        ask: impl Fn(&ToolCallRequest<'_>, &ToolCall) -> Option<ToolDecision> + Send + Sync + 'static,
    ) -> AgentBuilder {
        let user: Option<Arc<BeforeToolCall>> = self.hooks.before_tool_call.clone();
        self.before_tool_call(move |request| {
            let decision = user
                .as_ref()
                .map_or(ToolDecision::Allow, |hook| hook(request));
            let call = match &decision {
                ToolDecision::Block(_) => return decision,
                ToolDecision::Allow => request.call.clone(),
                ToolDecision::Rewrite(args) => ToolCall {
                    arguments: args.to_string(),
                    ..request.call.clone()
                },
            };
            ask(request, &call).unwrap_or(decision)
        })
    }

    /// Called on the run thread when a tool ran (returned, failed or panicked), before its
    /// `ToolEnd`: returns the result the model sees (the given one, or a replacement). Not
    /// called for calls that did not run (blocked, unknown, invalid, skipped, cancelled).
    /// A panic replaces the result with an error result; the run goes on. Defaults to none.
    ///
    /// Change the result with its `with_` methods (`ToolResultMessage` is
    /// `#[non_exhaustive]`, so it is not built with a struct literal):
    ///
    /// ```
    /// # use pagent::{Agent, llm::Faux};
    /// let agent = Agent::builder()
    ///     .provider(Faux::default())
    ///     .after_tool_call(|_call, result| {
    ///         let redacted = result.text().replace("secret", "[redacted]");
    ///         result.with_content(redacted)
    ///     })
    ///     .build()?;
    /// # Ok::<(), pagent::Error>(())
    /// ```
    pub fn after_tool_call(
        mut self,
        hook: impl Fn(&ToolCall, ToolResultMessage) -> ToolResultMessage + Send + Sync + 'static,
    ) -> AgentBuilder {
        self.hooks.after_tool_call = Some(Arc::new(hook));
        self
    }

    /// Rewrites the messages sent to the model for each request (pruning, compaction) without
    /// touching the transcript: it gets the transcript's messages at each model call (shared
    /// `Arc`s, so the call copies no message), on the run thread, and returns what the
    /// request carries: keep, drop or reorder the `Arc`s, or make new messages with
    /// `Arc::new`. A tool call it leaves without a result gets a synthesized error result in
    /// the request, so pruning cannot make a request the provider rejects. A panic ends the run
    /// with `RunStopReason::Error` and [`Error::Panic`], before the model call. Defaults to none.
    ///
    /// ```
    /// use pagent::Agent;
    /// use pagent::llm::{Faux, FauxReply};
    ///
    /// // Send only the last four messages.
    /// let agent = Agent::builder()
    ///     .provider(Faux::new([FauxReply::text("ok")]))
    ///     .transform_context(|mut messages| {
    ///         let old = messages.len().saturating_sub(4);
    ///         messages.drain(..old);
    ///         messages
    ///     })
    ///     .build()?;
    /// agent.prompt("hi")?;
    /// # Ok::<(), pagent::Error>(())
    /// ```
    pub fn transform_context(
        mut self,
        hook: impl Fn(Vec<Arc<Message>>) -> Vec<Arc<Message>> + Send + Sync + 'static,
    ) -> AgentBuilder {
        self.hooks.transform_context = Some(Arc::new(hook));
        self
    }

    /// Called on the run thread before each turn's model call (the first turn's too), after
    /// the turn's input messages; may change the model, thinking level or tools for that call
    /// and the rest of the run. The state shows the change before the reply's `MessageStart`.
    /// A change stays, as with [`Agent::set_model`]: the state and later runs use it too. A
    /// panic ends the run with `RunStopReason::Error` and [`Error::Panic`], before the model
    /// call, and so does a tool it puts in place whose [`Tool::definition`] panics (the
    /// change is then not made). Defaults to none.
    pub fn before_turn(
        mut self,
        hook: impl Fn(&mut TurnSetup) + Send + Sync + 'static,
    ) -> AgentBuilder {
        self.hooks.before_turn = Some(Arc::new(hook));
        self
    }

    /// The schema of every run's structured answer: each run asks the model for an answer
    /// matching it, checks it, and puts it in [`RunResult::output`](crate::RunResult::output)
    /// (see [`OutputTurn`] for which requests carry it, and
    /// [`AgentBuilder::output_repairs`]). [`Agent::prompt_as`] and
    /// [`Agent::prompt_with_output`] give one run a schema of its own instead. Defaults to
    /// none: runs answer in text.
    pub fn output_schema(mut self, schema: OutputSchema) -> AgentBuilder {
        self.output = Some(schema);
        self
    }

    /// Which requests of a run with an output schema carry it: by default
    /// ([`OutputTurn::Answer`]) only those on which the model is to answer, so tool turns
    /// keep their tools on every server, at the cost of one more model call when a run with
    /// tools ends on an answer that is not already valid; [`OutputTurn::Every`] sends it with
    /// every request, beside the tools, for servers that honour both (OpenAI, Anthropic).
    /// See [`OutputTurn`]. Defaults to [`OutputTurn::Answer`].
    pub fn output_turn(mut self, when: OutputTurn) -> AgentBuilder {
        self.output_turn = when;
        self
    }

    /// How many repair turns an invalid structured answer gets, each telling the model what
    /// was wrong, before the run fails with
    /// [`Error::InvalidOutput`](crate::Error::InvalidOutput) (0: none). The answer turn
    /// that asks for the schema after an answer given without it is not a repair. Repair
    /// turns run no tools and do not count against `max_turns`. Defaults to
    /// [`AgentBuilder::DEFAULT_OUTPUT_REPAIRS`] (2).
    pub fn output_repairs(mut self, repairs: u32) -> AgentBuilder {
        self.output_repairs = repairs;
        self
    }

    /// The agent's name in its traces (feature `tracing`): its runs are
    /// `invoke_agent {name}` spans with `gen_ai.agent.name`, so the spans of several agents
    /// in one program tell them apart. Defaults to none (the spans are `invoke_agent`).
    #[cfg(feature = "tracing")]
    pub fn name(mut self, name: impl Into<String>) -> AgentBuilder {
        self.trace.name = Some(Arc::from(name.into()));
        self
    }

    /// Whether the spans carry contents (feature `tracing`): the system prompt, the messages
    /// sent and received, tool arguments and results, as the opt-in attributes of
    /// OpenTelemetry's GenAI conventions (see [`crate::trace`]). They are sensitive and
    /// large, so the conventions keep them off by default. Defaults to false, or to true
    /// when the environment variable `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is
    /// `true` as the builder is made.
    #[cfg(feature = "tracing")]
    pub fn trace_content(mut self, on: bool) -> AgentBuilder {
        self.trace.content = on;
        self
    }

    /// How the agent keeps what it sends within the model's context window: the whole
    /// transcript ([`ContextPolicy::Unbounded`]), a sliding window by tokens
    /// ([`SlidingWindow`](crate::context::SlidingWindow)), or compaction into a summary
    /// ([`Compaction`](crate::context::Compaction)). Defaults to
    /// [`ContextPolicy::Unbounded`].
    ///
    /// The policy decides before each model call, after the turn's input and steering
    /// messages; [`AgentBuilder::transform_context`] then gets what the policy sends (see
    /// the [context docs](crate::context) for the order). The transcript is never
    /// shortened: a slide only changes what is sent, a compaction appends its summary.
    pub fn context_policy(mut self, policy: impl Into<ContextPolicy>) -> AgentBuilder {
        self.context_policy = policy.into();
        self
    }

    /// The model's context window in tokens. Defaults to what the server reports (asked once
    /// per model, only when the context policy needs the window: see
    /// [`Provider::context_window`]), else the window of a well-known model
    /// ([`context::known_window`](crate::context::known_window)), else unknown until an
    /// overflow error names it. A window set here wins over all of these, except a smaller
    /// one an overflow error names.
    pub fn context_window(mut self, tokens: u64) -> AgentBuilder {
        self.context_window = Some(tokens);
        self
    }

    /// What counts tokens for the context figures and the policy: a tokenizer of the model
    /// (its [`TokenCounter::text_tokens`]) or a server's exact count
    /// ([`TokenCounter::request_tokens`]). Defaults to the provider's counter
    /// ([`Provider::token_counter`]: llama.cpp's `/tokenize`, Anthropic's `count_tokens`),
    /// asked only when a decision of the policy is near, and the built-in estimate for
    /// every message.
    pub fn token_counter(mut self, counter: impl TokenCounter + 'static) -> AgentBuilder {
        self.token_counter = Some(Arc::new(counter));
        self
    }

    /// Whether a request the server refuses as larger than the context window
    /// ([`ErrorKind::ContextOverflow`](crate::ErrorKind::ContextOverflow), before any of the
    /// reply arrived) is compacted (or slid, with a [`SlidingWindow`](crate::context::SlidingWindow)
    /// policy) and sent again, once, whatever the policy. The refused reply stays in the
    /// transcript (an empty reply with `StopReason::Error`, which requests leave out), its
    /// turn ends `Continuing`, and the next turn compacts and calls the model again; that
    /// turn does not count against [`AgentBuilder::max_turns`]. A second overflow ends the
    /// run with the error. Defaults to true.
    pub fn overflow_recovery(mut self, recover: bool) -> AgentBuilder {
        self.overflow_recovery = recover;
        self
    }

    /// Builds the agent.
    ///
    /// # Errors
    /// [`Error::Config`] when no provider was set, the provider's
    /// [`check`](crate::llm::Provider::check) fails (an HTTP provider's base URL does not
    /// parse: no scheme, no host, a port outside 1-65535...), two tools share a name, or a
    /// tool's [`Tool::name`] or [`Tool::definition`] panics.
    pub fn build(self) -> Result<Agent, Error> {
        let provider = self
            .provider
            .ok_or_else(|| Error::Config("no provider set on the builder".into()))?;
        guard::catch(|| provider.check()).map_err(|panic| {
            Error::Config(format!("the provider's `check()` panicked: {panic}"))
        })??;
        let mut names = std::collections::HashSet::new();
        for (i, t) in self.tools.iter().enumerate() {
            let name = tool_name(&**t).map_err(|panic| {
                Error::Config(format!("the `name()` of tool {} panicked: {panic}", i + 1))
            })?;
            if !names.insert(name.clone()) {
                return Err(Error::Config(format!("two tools are named `{name}`")));
            }
        }
        let tool_defs = try_definitions(&self.tools).map_err(|(name, panic)| {
            Error::Config(format!(
                "the `definition()` of tool `{name}` panicked: {panic}"
            ))
        })?;
        let token_counter = match self.token_counter {
            Some(counter) => Some(counter),
            None => guard::catch(|| provider.token_counter()).map_err(|panic| {
                Error::Config(format!(
                    "the provider's `token_counter()` panicked: {panic}"
                ))
            })?,
        };
        let config = Config {
            context_policy: self.context_policy,
            context_window: self.context_window,
            token_counter,
            overflow_recovery: self.overflow_recovery,
            provider,
            model: self.model,
            system_prompt: self.system_prompt,
            thinking: self.thinking,
            tool_defs,
            tool_names: ToolNames::default(),
            tools: self.tools,
            max_turns: self.max_turns,
            final_turn: self.final_turn,
            run_timeout: self.run_timeout,
            max_parallel_tools: self.max_parallel_tools,
            max_reply_bytes: self.max_reply_bytes,
            repair_requests: self.repair_requests,
            steering_policy: self.steering_policy,
            steering_mode: self.steering_mode,
            follow_up_mode: self.follow_up_mode,
            hooks: self.hooks,
            trace: self.trace,
            output: self.output,
            output_turn: self.output_turn,
            output_repairs: self.output_repairs,
        };
        Ok(Agent::from_config(config, self.messages))
    }
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("provider", &self.provider.as_ref().map(debug_provider))
            .field("model", &self.model)
            .field(
                "tools",
                &self.tools.iter().map(debug_name).collect::<Vec<_>>(),
            )
            .field("max_turns", &self.max_turns)
            .finish_non_exhaustive()
    }
}

impl TurnSetup {
    pub(crate) fn from_config(turn: u32, c: &Config) -> TurnSetup {
        TurnSetup {
            turn,
            model: c.model.clone(),
            thinking: c.thinking,
            tools: c.tools.clone(),
        }
    }
}

/// The definitions the model sees, in tool order, leaving out the tools whose
/// `definition()` panics (the model is not offered a tool that cannot describe itself; a
/// call to it gets an error result). `build` and `before_turn` refuse such tools instead
/// (see [`try_definitions`]); this is for `Agent::set_tools`, which cannot fail.
pub(crate) fn definitions(tools: &[Arc<dyn Tool>]) -> Arc<[ToolDefinition]> {
    tools
        .iter()
        .filter_map(|t| guard::catch(|| t.definition()).ok())
        .collect()
}

/// The definitions the model sees, in tool order; `Err` holds the name of the first tool
/// whose `definition()` panicked (or `?` when its name panics too), and the panic.
pub(crate) fn try_definitions(
    tools: &[Arc<dyn Tool>],
) -> Result<Arc<[ToolDefinition]>, (String, String)> {
    tools
        .iter()
        .map(|t| {
            guard::catch(|| t.definition())
                .map_err(|panic| (tool_name(&**t).unwrap_or_else(|_| "?".to_owned()), panic))
        })
        .collect()
}
