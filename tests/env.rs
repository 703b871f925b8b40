//! Choosing a provider from the environment. One test, alone in its binary, because it
//! changes the process environment.

use pagent::llm::{Anthropic, OpenAiCompat, from_env};

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
    from_env().map(|r| {
        let c = r.unwrap();
        (c.provider.name().to_owned(), c.model)
    })
}

#[test]
fn the_environment_picks_the_provider_and_model() {
    set(&[]);
    assert!(chosen().is_none());
    assert!(OpenAiCompat::from_env().is_err());
    assert!(Anthropic::from_env().is_err());

    set(&[("OPENAI_API_KEY", "sk-env-secret")]);
    assert_eq!(chosen(), Some(("openai".into(), "gpt-4o-mini".into())));
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
