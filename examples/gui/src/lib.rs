//! A desktop app on pagent: an egui/eframe window whose UI thread draws everything from the
//! agent's snapshot (the streaming reply and its thinking, tool calls with their arguments as
//! they stream, running and finished tools with their progress and times, the queues, a
//! retry's countdown, usage, errors) with Send, Steer, Follow up and Stop. The agent asks for
//! the frames ([`pagent::Waker`]), so an idle window costs nothing.
//!
//! `cargo run -p pagent-gui` runs it on the offline demo (the scripted provider, paced for
//! visible streaming), or on the model server the environment names (`OPENAI_BASE_URL`,
//! `ANTHROPIC_API_KEY`, ..., see the repository's README).
//!
//! The library half is what the tests drive without a display (`tests/ui.rs`, with
//! `egui_kittest`); `src/main.rs` puts it in a window.

mod app;
mod demo;
pub mod text;

pub use app::App;
pub use demo::{Flaky, Pace, agent_from_env, demo_agent};
