//! Choosing a provider from the environment. Alone in their binary, because they change the
//! process environment, and one at a time (`env_lock`).

mod support;

use pagent::llm::{
    ANTHROPIC_HEADERS_VAR, Anthropic, Faux, FromEnv, MAX_TOKENS_VAR, OPENAI_API_VAR,
    OPENAI_HEADERS_VAR, OpenAiCompat, from_env, from_env_or,
};

const VARS: [&str; 9] = [
    OPENAI_API_VAR,
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "PAGENT_MODEL",
    MAX_TOKENS_VAR,
    OPENAI_HEADERS_VAR,
    ANTHROPIC_HEADERS_VAR,
];

fn set(vars: &[(&str, &str)]) {
    for name in VARS {
        // SAFETY: the tests of this binary hold `env_lock` while they use the environment,
        // and no other thread reads it meanwhile.
        unsafe { std::env::remove_var(name) };
    }
    for (name, value) in vars {
        // SAFETY: as above.
        unsafe { std::env::set_var(name, value) };
    }
}

fn chosen() -> Option<(String, String)> {
    match from_env() {
        Ok(c) => Some((c.provider.name().to_owned(), c.model)),
        Err(e) if e.is_not_configured() => None,
        Err(e) => panic!("{e}"),
    }
}

/// What `from_env_or` picks, with the scripted provider as the fallback.
fn chosen_or_faux() -> (String, String) {
    let c = from_env_or(|| FromEnv::new(Faux::default(), "offline")).unwrap();
    (c.provider.name().to_owned(), c.model)
}

#[test]
fn the_environment_picks_the_provider_and_model() {
    let _env = env_lock();
    set(&[]);
    assert!(chosen().is_none());
    let nothing = from_env().unwrap_err();
    assert!(
        matches!(nothing, pagent::Error::NotConfigured(_)),
        "{nothing}"
    );
    assert!(nothing.to_string().contains("OPENAI_API_KEY"), "{nothing}");
    assert_eq!(chosen_or_faux(), ("faux".into(), "offline".into()));
    assert!(OpenAiCompat::from_env().unwrap_err().is_not_configured());
    assert!(Anthropic::from_env().unwrap_err().is_not_configured());

    set(&[("OPENAI_API_KEY", "sk-env-secret")]);
    assert_eq!(chosen(), Some(("openai".into(), "gpt-4o-mini".into())));
    assert_eq!(chosen_or_faux(), ("openai".into(), "gpt-4o-mini".into()));
    let openai = OpenAiCompat::from_env().unwrap();
    assert_eq!(openai.base_url(), "https://api.openai.com/v1");
    assert!(!format!("{openai:?}").contains("sk-env-secret"));

    // A local server: a base URL and no key, the model from PAGENT_MODEL.
    set(&[
        ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1/"),
        ("PAGENT_MODEL", "qwen3:4b"),
    ]);
    assert_eq!(chosen(), Some(("openai".into(), "qwen3:4b".into())));
    assert_eq!(
        OpenAiCompat::from_env().unwrap().base_url(),
        "http://127.0.0.1:11434/v1"
    );

    // Anthropic wins when both are named; empty variables count as unset.
    set(&[
        ("OPENAI_API_KEY", "sk-1"),
        ("ANTHROPIC_API_KEY", "sk-ant-1"),
        ("PAGENT_MODEL", " "),
    ]);
    assert_eq!(
        chosen(),
        Some(("anthropic".into(), "claude-haiku-4-5".into()))
    );
    assert_eq!(
        Anthropic::from_env().unwrap().base_url(),
        "https://api.anthropic.com"
    );
    set(&[]);
}

/// Every test here changes the process environment: one at a time.
static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn env_lock() -> std::sync::MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|e| e.into_inner())
}

/// `from_env_or` took a scheme-less base URL, which failed only at the first prompt (a port
/// out of range went to port 80). A mistake in the environment is an error at once, naming
/// the variable, never the fallback.
#[test]
fn a_bad_base_url_in_the_environment_is_an_error_not_a_late_failure() {
    let _env = env_lock();
    for (var, url, why) in [
        (
            "OPENAI_BASE_URL",
            "127.0.0.1:8080/v1",
            "the base URL `127.0.0.1:8080/v1` has no scheme: start it with http:// or https://",
        ),
        (
            "ANTHROPIC_BASE_URL",
            "http://127.0.0.1:99999",
            "the base URL `http://127.0.0.1:99999` has the port `99999`, outside 1-65535",
        ),
    ] {
        set(&[(var, url)]);
        let expected = pagent::Error::Config(format!("{var}: {why}"));
        assert_eq!(from_env().unwrap_err(), expected);
        let fallback = from_env_or(|| FromEnv::new(Faux::default(), "offline"));
        assert_eq!(fallback.unwrap_err(), expected);
    }
    set(&[]);
}

/// `OPENAI_BASE_URL=""` fell back to the offline demo without a word. Empty counts as unset
/// (as the SDKs and `docker compose` mean it, and as documented), and the `NotConfigured`
/// error says which variables were empty.
#[test]
fn an_empty_variable_counts_as_unset_and_is_named_when_nothing_is_configured() {
    let _env = env_lock();
    set(&[("OPENAI_BASE_URL", ""), ("ANTHROPIC_API_KEY", " ")]);
    let nothing = from_env().unwrap_err();
    assert!(nothing.is_not_configured(), "{nothing}");
    assert!(
        nothing.to_string().ends_with(
            "(OPENAI_BASE_URL and ANTHROPIC_API_KEY set but empty, which counts as unset)"
        ),
        "{nothing}"
    );
    assert!(
        OpenAiCompat::from_env()
            .unwrap_err()
            .to_string()
            .ends_with("(OPENAI_BASE_URL set but empty, which counts as unset)")
    );
    assert_eq!(chosen_or_faux(), ("faux".into(), "offline".into()));
    // With a key, the empty base URL is OpenAI's own.
    set(&[("OPENAI_API_KEY", "sk-1"), ("OPENAI_BASE_URL", "")]);
    assert_eq!(
        OpenAiCompat::from_env().unwrap().base_url(),
        "https://api.openai.com/v1"
    );
    set(&[]);
}

/// `from_env` offered no cap on reply tokens: SmolLM2 streamed 2,494 tokens for "a short
/// story". `PAGENT_MAX_TOKENS` is sent as `max_tokens` by both providers.
#[test]
fn pagent_max_tokens_caps_the_replies_of_a_provider_from_the_environment() {
    let _env = env_lock();
    let openai_sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let anthropic_sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n\
                         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
                         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    for (var, sse) in [
        ("OPENAI_BASE_URL", openai_sse),
        ("ANTHROPIC_BASE_URL", anthropic_sse),
    ] {
        for (cap, sent) in [
            (Some("64"), serde_json::json!(64)),
            (None, serde_json::Value::Null),
        ] {
            let server = support::Server::start_exact(vec![support::Reply::sse(sse)]);
            let mut vars = vec![(var, server.url.as_str())];
            vars.extend(cap.map(|c| (MAX_TOKENS_VAR, c)));
            set(&vars);
            let chosen = from_env().unwrap();
            let agent = pagent::Agent::builder()
                .provider(chosen.provider)
                .model(chosen.model)
                .build()
                .unwrap();
            agent.prompt("Tell me a short story").unwrap();
            let body = server.requests()[0].json();
            let expected = match (var, cap) {
                // Anthropic requires the field: its default, 8192, without the variable.
                ("ANTHROPIC_BASE_URL", None) => serde_json::json!(8192),
                _ => sent.clone(),
            };
            assert_eq!(body["max_tokens"], expected, "{var} {cap:?}");
        }
    }
    for bad in ["0", "-1", "lots", "1.5"] {
        set(&[("OPENAI_API_KEY", "sk-1"), (MAX_TOKENS_VAR, bad)]);
        assert_eq!(
            from_env().unwrap_err(),
            pagent::Error::Config(format!(
                "PAGENT_MAX_TOKENS must be a whole number of tokens above 0, not `{bad}`"
            ))
        );
    }
    set(&[]);
}

/// Custom headers from the environment, one `Name: Value` per line, reach every request of
/// the provider chosen; a line that is no header is an error naming the variable and the
/// line, never the value.
#[test]
fn custom_headers_come_from_the_environment() {
    let _env = env_lock();
    let openai_sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let anthropic_sse = std::str::from_utf8(&support::data("written/anthropic_text.sse"))
        .unwrap()
        .to_owned();
    for (base_var, headers_var, sse) in [
        ("OPENAI_BASE_URL", OPENAI_HEADERS_VAR, openai_sse.to_owned()),
        ("ANTHROPIC_BASE_URL", ANTHROPIC_HEADERS_VAR, anthropic_sse),
    ] {
        let server = support::Server::start_exact(vec![support::Reply::sse(sse)]);
        set(&[
            (base_var, server.url.as_str()),
            (
                headers_var,
                "api-key: azure-0123456789\n\n  X-Title :  my app  \r\nanthropic-beta: a,b",
            ),
        ]);
        let chosen = from_env().unwrap();
        let agent = pagent::Agent::builder()
            .provider(chosen.provider)
            .model(chosen.model)
            .build()
            .unwrap();
        agent.prompt("Hi").unwrap();
        let request = &server.requests()[0];
        assert_eq!(
            request.header("api-key"),
            Some("azure-0123456789"),
            "{base_var}"
        );
        assert_eq!(request.header("x-title"), Some("my app"));
        assert_eq!(request.header("anthropic-beta"), Some("a,b"));
        set(&[
            (base_var, "http://127.0.0.1:9"),
            (headers_var, "X-Ok: 1\nsk-no-colon-here"),
        ]);
        let error = from_env().unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "configuration: {headers_var}: line 2 is not `Name: Value` (one header per line)"
            )
        );
        set(&[
            (base_var, "http://127.0.0.1:9"),
            (headers_var, "Bad Name: sk-secret-value"),
        ]);
        let error = from_env().unwrap_err().to_string();
        assert!(
            error.contains(headers_var) && !error.contains("sk-secret"),
            "{error}"
        );
    }
    set(&[]);
}

/// `OPENAI_API=responses` picks the Responses API of the same server (with its key, custom
/// headers and `PAGENT_MAX_TOKENS` as `max_output_tokens`); `chat` or nothing picks Chat
/// Completions; anything else is an error naming the variable.
#[test]
fn openai_api_picks_the_responses_api() {
    let _env = env_lock();
    let sse = support::data("written/responses_text.sse");
    let server = support::Server::start_exact(vec![support::Reply::sse(sse)]);
    set(&[
        ("OPENAI_BASE_URL", &format!("{}/v1", server.url)),
        ("OPENAI_API_KEY", "sk-env-key"),
        (OPENAI_API_VAR, " Responses "),
        (MAX_TOKENS_VAR, "64"),
        (OPENAI_HEADERS_VAR, "X-Title: env"),
    ]);
    let chosen = from_env().unwrap();
    assert_eq!(chosen.provider.name(), "openai-responses");
    let agent = pagent::Agent::builder()
        .provider(chosen.provider)
        .model(chosen.model)
        .build()
        .unwrap();
    assert_eq!(
        agent.prompt("Hi").unwrap().text(),
        "Paris is 21 C and sunny."
    );
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.header("authorization"), Some("Bearer sk-env-key"));
    assert_eq!(request.header("x-title"), Some("env"));
    assert_eq!(request.json()["max_output_tokens"], serde_json::json!(64));
    for chat in ["chat", "chat_completions", ""] {
        set(&[("OPENAI_API_KEY", "sk-1"), (OPENAI_API_VAR, chat)]);
        assert_eq!(chosen_or_faux().0, "openai", "{chat:?}");
    }
    set(&[("OPENAI_API_KEY", "sk-1"), (OPENAI_API_VAR, "assistants")]);
    assert_eq!(
        from_env().unwrap_err().to_string(),
        "configuration: OPENAI_API must be `responses` or `chat`, not `assistants`"
    );
    set(&[]);
}
