//! Picking a provider and a model from the environment, with the ecosystem's names.

use std::fmt;
use std::sync::Arc;

use super::{Anthropic, OpenAiCompat, OpenAiResponses, Provider};
use crate::Error;

/// The model used with Anthropic when `PAGENT_MODEL` is not set.
const DEFAULT_ANTHROPIC_MODEL: &str = "claude-haiku-4-5";
/// The model used with an OpenAI-compatible server when `PAGENT_MODEL` is not set.
const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";

/// A provider and a model chosen by [`from_env`].
#[derive(Clone)]
#[non_exhaustive]
pub struct FromEnv {
    /// The provider, ready for `Agent::builder().provider(..)`.
    pub provider: Arc<dyn Provider>,
    /// `PAGENT_MODEL`, or the provider's default model.
    pub model: String,
}

impl FromEnv {
    /// A provider and a model, for the fallback of [`from_env_or`].
    pub fn new(provider: impl Provider + 'static, model: impl Into<String>) -> FromEnv {
        FromEnv {
            provider: Arc::new(provider),
            model: model.into(),
        }
    }
}

impl fmt::Debug for FromEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FromEnv")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish()
    }
}

/// What to set, when nothing is.
const NOTHING_SET: &str = "no provider in the environment: set OPENAI_API_KEY (or \
                           OPENAI_BASE_URL for a local server) or ANTHROPIC_API_KEY (or \
                           ANTHROPIC_BASE_URL)";

/// The variable that caps the tokens of each reply (`max_tokens`), read by [`from_env`].
pub const MAX_TOKENS_VAR: &str = "PAGENT_MAX_TOKENS";

/// The variable that picks the OpenAI API [`from_env`] speaks: `responses` for the Responses
/// API ([`OpenAiResponses`]), `chat` (or unset) for Chat Completions ([`OpenAiCompat`]).
pub const OPENAI_API_VAR: &str = "OPENAI_API";

/// The variable of the custom headers of an OpenAI provider from the environment
/// ([`OpenAiCompat::from_env`] and `OpenAiResponses::from_env`): one `Name: Value` per line,
/// as in `OPENAI_CUSTOM_HEADERS=$'api-key: ...\nX-Title: my app'`. See the `header` setter of
/// each provider for what is sent and redacted.
pub const OPENAI_HEADERS_VAR: &str = "OPENAI_CUSTOM_HEADERS";

/// The variable of the custom headers of [`Anthropic::from_env`]: one `Name: Value` per line,
/// as in `ANTHROPIC_CUSTOM_HEADERS='anthropic-beta: context-1m-2025-08-07'`.
pub const ANTHROPIC_HEADERS_VAR: &str = "ANTHROPIC_CUSTOM_HEADERS";

/// The provider and model the environment names.
///
/// - `ANTHROPIC_API_KEY` or `ANTHROPIC_BASE_URL` set: [`Anthropic::from_env`], model
///   `PAGENT_MODEL` or `claude-haiku-4-5`.
/// - else `OPENAI_API_KEY` or `OPENAI_BASE_URL` set: [`OpenAiCompat::from_env`] (OpenAI, or
///   a local server such as Ollama or llama.cpp at `OPENAI_BASE_URL`), model
///   `PAGENT_MODEL` or `gpt-4o-mini`; with `OPENAI_API=responses` ([`OPENAI_API_VAR`]),
///   [`OpenAiResponses::from_env`] instead, the Responses API of the same server.
/// - else [`Error::NotConfigured`]: use [`from_env_or`] to fall back to something offline,
///   such as the scripted [`Faux`](super::Faux) provider.
///
/// `PAGENT_MAX_TOKENS` ([`MAX_TOKENS_VAR`]), when set, caps the tokens of each reply: the
/// provider's `max_tokens` (a small local model may otherwise stream thousands of tokens
/// for "a short story"; `max_output_tokens` for the Responses API). Unset, OpenAI-compatible
/// servers use their own limit and Anthropic 8192.
///
/// `OPENAI_CUSTOM_HEADERS` ([`OPENAI_HEADERS_VAR`]) and `ANTHROPIC_CUSTOM_HEADERS`
/// ([`ANTHROPIC_HEADERS_VAR`]) add headers to every request of the provider chosen: one
/// `Name: Value` per line.
///
/// # Empty variables
/// A variable set to an empty (or blank) value counts as unset, as the official SDKs and
/// `docker compose` (which passes `${VAR}` of an unset `VAR` as empty) mean it: with
/// `OPENAI_API_KEY` set and `OPENAI_BASE_URL=""` the base URL is OpenAI's, and with nothing
/// but empty variables nothing is configured. The [`Error::NotConfigured`] then names the
/// empty variables, so that a fallback is never a mystery.
///
/// ```no_run
/// use pagent::Agent;
///
/// let chosen = pagent::llm::from_env()?;
/// let agent = Agent::builder()
///     .provider(chosen.provider)
///     .model(chosen.model)
///     .build()?;
/// # Ok::<(), pagent::Error>(())
/// ```
///
/// # Errors
/// [`Error::NotConfigured`] when none of the variables is set ([`Error::is_not_configured`]);
/// [`Error::Config`] when the chosen provider cannot be set up (a base URL that does not
/// parse: no scheme, no host, a port outside 1-65535...), its custom headers cannot be sent
/// (a line without `:`, a name that is not an HTTP token), `OPENAI_API` names another API
/// than `responses` or `chat`, or `PAGENT_MAX_TOKENS` is not a whole number above 0.
pub fn from_env() -> Result<FromEnv, Error> {
    let model = |default: &str| env_var("PAGENT_MODEL").unwrap_or_else(|| default.to_owned());
    let max_tokens = max_tokens()?;
    if env_var("ANTHROPIC_API_KEY").is_some() || env_var("ANTHROPIC_BASE_URL").is_some() {
        let mut provider = Anthropic::from_env()?;
        if let Some(tokens) = max_tokens {
            provider = provider.max_tokens(tokens);
        }
        return Ok(FromEnv::new(provider, model(DEFAULT_ANTHROPIC_MODEL)));
    }
    if env_var("OPENAI_API_KEY").is_some() || env_var("OPENAI_BASE_URL").is_some() {
        let api = env_var(OPENAI_API_VAR).map(|api| api.trim().to_ascii_lowercase());
        if api.as_deref() == Some("responses") {
            let mut provider = OpenAiResponses::from_env()?;
            if let Some(tokens) = max_tokens {
                provider = provider.max_output_tokens(tokens);
            }
            return Ok(FromEnv::new(provider, model(DEFAULT_OPENAI_MODEL)));
        }
        if let Some(other) = api.filter(|api| !matches!(api.as_str(), "chat" | "chat_completions"))
        {
            return Err(Error::Config(format!(
                "{OPENAI_API_VAR} must be `responses` or `chat`, not `{}`",
                super::error_text::clip(other, None, 40)
            )));
        }
        let mut provider = OpenAiCompat::from_env()?;
        if let Some(tokens) = max_tokens {
            provider = provider.max_tokens(tokens);
        }
        return Ok(FromEnv::new(provider, model(DEFAULT_OPENAI_MODEL)));
    }
    Err(not_configured(
        NOTHING_SET,
        &[
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
        ],
    ))
}

/// `PAGENT_MAX_TOKENS`, when set.
fn max_tokens() -> Result<Option<u32>, Error> {
    let Some(value) = env_var(MAX_TOKENS_VAR) else {
        return Ok(None);
    };
    match value.trim().parse::<u32>() {
        Ok(tokens) if tokens > 0 => Ok(Some(tokens)),
        _ => Err(Error::Config(format!(
            "{MAX_TOKENS_VAR} must be a whole number of tokens above 0, not `{}`",
            super::error_text::clip(value, None, 40)
        ))),
    }
}

/// [`Error::NotConfigured`] saying `hint`, and which of `vars` are set but empty.
fn not_configured(hint: &str, vars: &[&str]) -> Error {
    let empty: Vec<&str> = vars
        .iter()
        .copied()
        .filter(|name| std::env::var_os(name).is_some() && env_var(name).is_none())
        .collect();
    if empty.is_empty() {
        return Error::NotConfigured(hint.to_owned());
    }
    Error::NotConfigured(format!(
        "{hint} ({} set but empty, which counts as unset)",
        empty.join(" and ")
    ))
}

/// The provider and model the environment names (see [`from_env`]), else `fallback()`.
///
/// ```
/// use pagent::Agent;
/// use pagent::llm::{Faux, FauxReply, FromEnv};
///
/// let chosen = pagent::llm::from_env_or(|| {
///     FromEnv::new(Faux::default().reply(FauxReply::text("offline")), "demo")
/// })?;
/// let agent = Agent::builder().provider(chosen.provider).model(chosen.model).build()?;
/// # Ok::<(), pagent::Error>(())
/// ```
///
/// # Errors
/// [`Error::Config`] when the environment names a provider that cannot be set up (a base
/// URL that does not parse, a bad `PAGENT_MAX_TOKENS`): a mistake is reported, not papered
/// over by the fallback. Empty variables count as unset (see [`from_env`]), so nothing but
/// empty variables takes the fallback.
pub fn from_env_or(fallback: impl FnOnce() -> FromEnv) -> Result<FromEnv, Error> {
    match from_env() {
        Err(Error::NotConfigured(_)) => Ok(fallback()),
        chosen => chosen,
    }
}

/// The variable's value, `None` when it is unset, empty or not Unicode.
pub(crate) fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The base URL (from `base_var`, else `default`) and key (from `key_var`) of a provider.
///
/// # Errors
/// [`Error::NotConfigured`] saying `hint` when neither variable is set.
pub(crate) fn base_and_key(
    base_var: &str,
    key_var: &str,
    default: &str,
    hint: &str,
) -> Result<(String, Option<String>), Error> {
    let base = env_var(base_var);
    let key = env_var(key_var);
    if base.is_none() && key.is_none() {
        return Err(not_configured(hint, &[key_var, base_var]));
    }
    Ok((base.unwrap_or_else(|| default.to_owned()), key))
}

/// The custom headers of the variable `var`: one `Name: Value` per line (the format of
/// `ANTHROPIC_CUSTOM_HEADERS` elsewhere in the ecosystem); blank lines are skipped, and the
/// name and value are trimmed. Unset or empty: none.
///
/// # Errors
/// [`Error::Config`] naming `var` and the line number for a line without a `:`; the value
/// is never shown (it may be a key).
pub(crate) fn headers(var: &str) -> Result<Vec<(String, String)>, Error> {
    let Some(text) = env_var(var) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Error::Config(format!(
                "{var}: line {} is not `Name: Value` (one header per line)",
                n + 1
            )));
        };
        out.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(out)
}
