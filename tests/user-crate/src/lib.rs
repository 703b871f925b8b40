//! Nothing of its own: see `Cargo.toml`, `build.rs` and `tests/`.
