//! Slash commands a program registers ([`Options::command`](super::Options::command)): the
//! client shows them (`available_commands_update`), and a prompt that starts with
//! `/<name>` goes through the command's handler, which may rewrite it.

use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

type Handler = dyn Fn(&str) -> String + Send + Sync;

/// A slash command: a name, a description for the client's menu, and a handler that turns
/// what the user typed after `/<name>` into the prompt the agent gets.
///
/// ```
/// use pagent::acp::{self, Command};
///
/// let review = Command::new("review", "Reviews the changes", |rest: &str| {
///     format!("Review the uncommitted changes. Focus: {rest}")
/// })
/// .hint("what to focus on");
/// let options = acp::Options::new().command(review);
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct Command {
    name: String,
    description: String,
    hint: Option<String>,
    handler: Arc<Handler>,
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("hint", &self.hint)
            .finish_non_exhaustive()
    }
}

impl Command {
    /// The command `/<name>`. `handler` gets the text after the name (trimmed; empty when
    /// nothing follows) and returns the prompt to run instead. It is called on the server's
    /// reading thread as the prompt is read, so it must not block: a quick rewrite, not work.
    /// A panic in it refuses the prompt with -32603.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Command {
        Command {
            name: name.into(),
            description: description.into(),
            hint: None,
            handler: Arc::new(handler),
        }
    }

    /// The hint the client shows for the command's input (ACP's unstructured input).
    /// Defaults to none: the command takes no input.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> Command {
        self.hint = Some(hint.into());
        self
    }

    fn to_json(&self) -> Value {
        let mut v = json!({"name": self.name, "description": self.description});
        if let Some(hint) = &self.hint {
            v["input"] = json!({ "hint": hint });
        }
        v
    }
}

/// The commands as `available_commands_update` lists them.
pub(super) fn listed(commands: &[Command]) -> Vec<Value> {
    commands.iter().map(Command::to_json).collect()
}

/// `text` rewritten by the command it invokes (`/<name> rest`), or as it is.
///
/// # Errors
/// The handler panicked: the reason.
pub(super) fn rewrite(commands: &[Command], text: String) -> Result<String, String> {
    let Some(invoked) = text.strip_prefix('/') else {
        return Ok(text);
    };
    let (name, rest) = invoked
        .split_once(char::is_whitespace)
        .unwrap_or((invoked, ""));
    let Some(command) = commands.iter().find(|c| c.name == name) else {
        return Ok(text);
    };
    let rest = rest.trim();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (command.handler)(rest)))
        .map_err(|_| format!("the command `/{name}` failed (its handler panicked)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_naming_a_command_is_rewritten_and_others_are_not() {
        let commands = [
            Command::new("plan", "Plans", |rest: &str| {
                format!("Make a plan for: {rest}")
            })
            .hint("the goal"),
            Command::new("boom", "Panics", |_: &str| panic!("no")),
        ];
        let run = |t: &str| rewrite(&commands, t.to_owned());
        assert_eq!(
            run("/plan  the release \n"),
            Ok("Make a plan for: the release".into())
        );
        assert_eq!(run("/plan"), Ok("Make a plan for: ".into()));
        assert_eq!(run("/planner x"), Ok("/planner x".into()));
        assert_eq!(run("plan x"), Ok("plan x".into()));
        assert!(run("/boom").is_err());
        assert_eq!(
            listed(&commands),
            [
                json!({"name": "plan", "description": "Plans", "input": {"hint": "the goal"}}),
                json!({"name": "boom", "description": "Panics"}),
            ]
        );
    }
}
