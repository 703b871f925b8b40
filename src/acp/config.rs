//! A session's settings as ACP's config options (the client's pickers): the model (from the
//! list the program gives), the thinking level, and the mode, when the program defines
//! modes. A [`Mode`] is a named system prompt, set of tools and approval policy.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::map::Refusal;
use super::{AskFn, Options, codes};
use crate::Agent;
use crate::message::ToolCall;
use crate::tool::Tool;
use crate::types::ThinkingLevel;

/// A mode of the agent the client can pick (`session/set_mode`, or the `mode` config
/// option): a system prompt, the tools the agent may use, and which calls need the client's
/// permission.
///
/// ```
/// use pagent::acp::{self, Mode};
///
/// let options = acp::Options::new()
///     .mode(Mode::new("ask", "Ask").description("Answers, changes nothing").tools(["read_file"]))
///     .mode(Mode::new("code", "Code").ask_permission(|call| call.name != "read_file"));
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct Mode {
    pub(super) id: String,
    name: String,
    description: Option<String>,
    system_prompt: Option<String>,
    tools: Option<HashSet<String>>,
    ask: Option<Arc<AskFn>>,
}

impl fmt::Debug for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mode")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("description", &self.description)
            .field("system_prompt", &self.system_prompt)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl Mode {
    /// The mode `id`, shown as `name`.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Mode {
        Mode {
            id: id.into(),
            name: name.into(),
            description: None,
            system_prompt: None,
            tools: None,
            ask: None,
        }
    }

    /// What the client shows about the mode. Defaults to none.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Mode {
        self.description = Some(description.into());
        self
    }

    /// The system prompt in this mode. Defaults to the one the factory's agent has.
    #[must_use]
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Mode {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// The names of the tools the agent has in this mode (of those the session's agent was
    /// built with, its MCP servers' included). Defaults to all of them.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Mode {
        self.tools = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Which calls need the client's permission in this mode (as
    /// [`Options::ask_permission`], which it replaces while the mode holds). Defaults to the
    /// options' policy.
    #[must_use]
    pub fn ask_permission(
        mut self,
        ask: impl Fn(&ToolCall) -> bool + Send + Sync + 'static,
    ) -> Mode {
        self.ask = Some(Arc::new(ask));
        self
    }
}

/// The settings of one session, and what they were built from.
pub(super) struct Settings {
    model: String,
    thinking: ThinkingLevel,
    mode: Option<String>,
    /// The factory's system prompt and tools, for the modes that keep them.
    base_prompt: String,
    all_tools: Vec<Arc<dyn Tool>>,
    /// The approval policy of the mode, read by the permission hook.
    pub(super) ask: Arc<Mutex<Option<Arc<AskFn>>>>,
}

const LEVELS: [(ThinkingLevel, &str, &str); 5] = [
    (ThinkingLevel::Off, "off", "Off"),
    (ThinkingLevel::Minimal, "minimal", "Minimal"),
    (ThinkingLevel::Low, "low", "Low"),
    (ThinkingLevel::Medium, "medium", "Medium"),
    (ThinkingLevel::High, "high", "High"),
];

impl Settings {
    /// The settings of a session whose agent was just built; the first mode is applied.
    pub(super) fn new(
        options: &Options,
        agent: &Agent,
        ask: Arc<Mutex<Option<Arc<AskFn>>>>,
    ) -> Settings {
        let state = agent.snapshot();
        let mut settings = Settings {
            model: state.model.to_string(),
            thinking: state.thinking,
            mode: None,
            base_prompt: state.system_prompt.to_string(),
            all_tools: agent.tools(),
            ask,
        };
        if let Some(first) = options.modes.first() {
            settings.apply_mode(first, agent);
        }
        settings
    }

    fn apply_mode(&mut self, mode: &Mode, agent: &Agent) {
        agent.set_system_prompt(
            mode.system_prompt
                .clone()
                .unwrap_or_else(|| self.base_prompt.clone()),
        );
        let tools = self.all_tools.iter().filter(|t| {
            mode.tools
                .as_ref()
                .is_none_or(|names| names.contains(t.name()))
        });
        agent.set_tools(tools.cloned().collect());
        *self.ask.lock() = mode.ask.clone();
        self.mode = Some(mode.id.clone());
    }

    /// The current mode, for `session/new`'s `modes`; `None` without modes.
    pub(super) fn modes(&self, options: &Options) -> Option<Value> {
        let current = self.mode.as_ref()?;
        let available: Vec<Value> = options
            .modes
            .iter()
            .map(|m| {
                let mut v = json!({"id": m.id, "name": m.name});
                if let Some(d) = &m.description {
                    v["description"] = json!(d);
                }
                v
            })
            .collect();
        Some(json!({"currentModeId": current, "availableModes": available}))
    }

    /// The config options as the client shows them.
    pub(super) fn options(&self, options: &Options) -> Vec<Value> {
        let select = |id: &str, name: &str, category: &str, current: &str, values: Vec<Value>| {
            json!({"id": id, "name": name, "category": category, "type": "select",
                "currentValue": current, "options": values})
        };
        let mut out = Vec::new();
        if let Some(mode) = &self.mode {
            let values = options
                .modes
                .iter()
                .map(|m| json!({"value": m.id, "name": m.name}))
                .collect();
            out.push(select("mode", "Mode", "mode", mode, values));
        }
        if !options.models.is_empty() {
            let mut values: Vec<Value> = options
                .models
                .iter()
                .map(|(id, name)| json!({"value": id, "name": name}))
                .collect();
            if !options.models.iter().any(|(id, _)| *id == self.model) {
                values.insert(0, json!({"value": self.model, "name": self.model}));
            }
            out.push(select("model", "Model", "model", &self.model, values));
        }
        let current = LEVELS
            .iter()
            .find(|(l, ..)| *l == self.thinking)
            .map_or("off", |(_, v, _)| v);
        let values = LEVELS
            .iter()
            .map(|(_, v, n)| json!({"value": v, "name": n}))
            .collect();
        out.push(select(
            "thinking",
            "Thinking",
            "thought_level",
            current,
            values,
        ));
        out
    }

    /// Sets config option `id` to `value`: applied to the agent for its next run. Returns
    /// whether the mode changed.
    ///
    /// # Errors
    /// No such option, or no such value of it: -32602.
    pub(super) fn set(
        &mut self,
        options: &Options,
        agent: &Agent,
        id: &str,
        value: &Value,
    ) -> Result<bool, Refusal> {
        let bad = |why: String| (codes::INVALID_PARAMS, why);
        let Some(value) = value.as_str() else {
            return Err(bad(format!(
                "config option `{id}` takes a value id, a string"
            )));
        };
        match id {
            "mode" if self.mode.is_some() => {
                self.set_mode(options, agent, value)?;
                Ok(true)
            }
            "model" if !options.models.is_empty() => {
                if value != self.model && !options.models.iter().any(|(m, _)| m == value) {
                    return Err(bad(format!("no model `{value}`")));
                }
                agent.set_model(value);
                self.model = value.to_owned();
                Ok(false)
            }
            "thinking" => {
                let Some((level, ..)) = LEVELS.iter().find(|(_, v, _)| *v == value) else {
                    return Err(bad(format!("no thinking level `{value}`")));
                };
                agent.set_thinking(*level);
                self.thinking = *level;
                Ok(false)
            }
            other => Err(bad(format!("no config option `{other}`"))),
        }
    }

    /// Switches to mode `id`.
    ///
    /// # Errors
    /// No such mode: -32602.
    pub(super) fn set_mode(
        &mut self,
        options: &Options,
        agent: &Agent,
        id: &str,
    ) -> Result<(), Refusal> {
        let Some(mode) = options.modes.iter().find(|m| m.id == id) else {
            return Err((codes::INVALID_PARAMS, format!("no mode `{id}`")));
        };
        self.apply_mode(mode, agent);
        Ok(())
    }
}
