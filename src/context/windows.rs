//! The context windows of common models, and what an overflow error says of the window.

/// Known context windows, by model id prefix (the longest matching prefix wins). Only
/// windows the providers document for the plain API, without beta headers.
const KNOWN: &[(&str, u64)] = &[
    // OpenAI
    ("gpt-3.5-turbo", 16_385),
    ("gpt-4", 8_192),
    ("gpt-4-32k", 32_768),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.5", 128_000),
    ("gpt-5", 400_000),
    ("gpt-5-chat", 128_000),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    ("gpt-oss", 131_072),
    // Anthropic
    ("claude-", 200_000),
    // Google
    ("gemini-1.5-flash", 1_048_576),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini-2", 1_048_576),
    // DeepSeek
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
    // Mistral
    ("mistral-large", 128_000),
    ("mistral-medium", 128_000),
    ("codestral", 256_000),
    // Moonshot
    ("kimi-k2", 131_072),
    ("moonshot-v1-8k", 8_192),
    ("moonshot-v1-32k", 32_768),
    ("moonshot-v1-128k", 131_072),
    // xAI
    ("grok-3", 131_072),
    ("grok-4", 256_000),
    // Meta
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3.3", 131_072),
];

/// The context window of a well-known model, from pagent's table: OpenAI (`gpt-4o`,
/// `gpt-4.1`, `gpt-5`, `o3`...), Anthropic (`claude-*`), Google (`gemini-*`), DeepSeek,
/// Mistral, Moonshot, xAI and Llama 3.1+ ids. A provider prefix (`openai/gpt-4o`, as
/// OpenRouter writes it) is ignored, and so is case; a dated id (`gpt-4o-2024-08-06`)
/// matches its family. `None` for a model the table does not know.
///
/// ```
/// use pagent::context::known_window;
/// assert_eq!(known_window("gpt-4o-mini"), Some(128_000));
/// assert_eq!(known_window("anthropic/claude-sonnet-4-5"), Some(200_000));
/// assert_eq!(known_window("smollm2"), None);
/// ```
pub fn known_window(model: &str) -> Option<u64> {
    let id = model.rsplit('/').next().unwrap_or(model).as_bytes();
    // The prefixes are lower case; the id is compared without case, and not copied (the
    // agent asks twice a turn).
    KNOWN
        .iter()
        .filter(|(prefix, _)| {
            id.len() >= prefix.len() && id[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
        })
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, window)| *window)
}

/// What an overflow error's message says: the tokens of the request and the window, where it
/// names them. llama.cpp: "request (3033 tokens) exceeds the available context size (2048
/// tokens)"; OpenAI: "maximum context length is 128000 tokens. However, your messages
/// resulted in 130000 tokens"; Anthropic: "prompt is too long: 210000 tokens > 200000
/// maximum".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Overflow {
    pub(crate) prompt: Option<u64>,
    pub(crate) window: Option<u64>,
}

pub(crate) fn parse_overflow(message: &str) -> Overflow {
    let m = message.to_ascii_lowercase();
    // The numbers followed by "tokens" (or by "maximum" for Anthropic), in order.
    let numbers = numbers(&m);
    let near = |cue: &str| -> Option<u64> {
        let at = m.find(cue)?;
        numbers.iter().find(|(pos, _)| *pos >= at).map(|(_, n)| *n)
    };
    let mut out = Overflow::default();
    if m.contains("exceeds the available context size") {
        // llama.cpp
        out.prompt = near("request");
        out.window = near("context size");
    } else if m.contains("maximum context length") {
        // OpenAI, vLLM
        out.window = near("maximum context length");
        out.prompt = near("resulted in").or_else(|| near("requested"));
    } else if m.contains("prompt is too long") {
        // Anthropic: "N tokens > M maximum"
        out.prompt = near("prompt is too long");
        out.window = near(">");
    }
    out
}

/// Every whole number in `text`, with its byte position.
fn numbers(text: &str) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b',') {
                i += 1;
            }
            let digits: String = text[start..i]
                .chars()
                .filter(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                out.push((start, n));
            }
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_windows_match_by_the_longest_prefix() {
        assert_eq!(known_window("gpt-4"), Some(8_192));
        assert_eq!(known_window("gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(known_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_window("GPT-5-mini"), Some(400_000));
        assert_eq!(known_window("o3-mini"), Some(200_000));
        assert_eq!(known_window("claude-3-5-haiku-latest"), Some(200_000));
        assert_eq!(known_window("openrouter/openai/o1-mini"), Some(128_000));
        assert_eq!(known_window(""), None);
        assert_eq!(known_window("qwen2.5:0.5b"), None);
        // Matched without case against lower-case prefixes.
        for (prefix, window) in KNOWN {
            assert_eq!(prefix.to_ascii_lowercase(), *prefix);
            assert_eq!(known_window(&prefix.to_ascii_uppercase()), Some(*window));
        }
    }

    #[test]
    fn overflow_messages_name_the_prompt_and_the_window() {
        let llama = "request (3033 tokens) exceeds the available context size (2048 tokens), \
                     try increasing it (POST http://127.0.0.1:8096/v1/chat/completions)";
        assert_eq!(
            parse_overflow(llama),
            Overflow {
                prompt: Some(3033),
                window: Some(2048)
            }
        );
        let openai = "This model's maximum context length is 128000 tokens. However, your \
                      messages resulted in 130,512 tokens. Please reduce the length.";
        assert_eq!(
            parse_overflow(openai),
            Overflow {
                prompt: Some(130_512),
                window: Some(128_000)
            }
        );
        let anthropic = "prompt is too long: 210000 tokens > 200000 maximum";
        assert_eq!(
            parse_overflow(anthropic),
            Overflow {
                prompt: Some(210_000),
                window: Some(200_000)
            }
        );
        assert_eq!(
            parse_overflow("context length exceeded"),
            Overflow::default()
        );
    }
}
