//! Choosing a provider from the environment. One test, alone in its binary, because it
//! changes the process environment.

use pagent::llm::{Anthropic, Faux, FromEnv, OpenAiCompat, from_env, from_env_or};

const VARS: [&str; 5] = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "PAGENT_MODEL",
];

fn set(vars: &[(&str, &str)]) {
    for name in VARS {
        // SAFETY: this binary has a single test and no other thread reads the environment.
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
