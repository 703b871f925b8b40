//! The tutorial's GUI section, whole ("Polling from a GUI" in docs/tutorial.md, which
//! `tests/tutorial.rs` keeps equal to this file): a window that draws an agent's snapshot,
//! with the agent's waker as its repaint rule. `cargo run -p pagent-gui --bin minimal`.

use std::sync::Arc;

use eframe::egui;
use pagent::llm::{Faux, FauxReply};
use pagent::{Agent, Waker};

struct Chat {
    agent: Arc<Agent>,
    waker: Waker,
    input: String,
}

impl Chat {
    fn new(agent: Agent, ctx: &egui::Context) -> Chat {
        // The repaint rule: the agent asks for a frame when its state changes after a frame
        // took its snapshot, from whatever thread changed it. The first event of a run that
        // Send starts on a worker thread gets its frame; an idle agent asks for none.
        let ctx = ctx.clone();
        let waker = agent.waker(move || ctx.request_repaint());
        Chat {
            agent: Arc::new(agent),
            waker,
            input: String::new(),
        }
    }
}

impl eframe::App for Chat {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let state = self.waker.snapshot(); // one Arc clone: never blocks the run
        egui::CentralPanel::default().show(ui, |ui| {
            for message in &state.messages {
                ui.label(format!("{}: {}", message.role(), message.text()));
            }
            if let Some(partial) = &state.streaming_message {
                ui.label(partial.text()); // the reply as it grows
            }
            for pending in &state.pending_tool_calls {
                ui.label(format!("{} {}", pending.call.name, pending.call.arguments));
            }
            let label = ui.label("Message");
            ui.text_edit_singleline(&mut self.input)
                .labelled_by(label.id);
            if ui
                .add_enabled(!state.is_streaming, egui::Button::new("Send"))
                .clicked()
            {
                let agent = self.agent.clone();
                let text = std::mem::take(&mut self.input);
                // `prompt` blocks until the run ends: never on the UI thread.
                std::thread::spawn(move || agent.prompt(text));
            }
            if ui
                .add_enabled(state.is_streaming, egui::Button::new("Stop"))
                .clicked()
            {
                self.agent.abort();
            }
        });
    }
}

fn main() -> eframe::Result {
    let model = Faux::default()
        .tokens_per_second(20.0)
        .otherwise(|_| FauxReply::text("Hello from the scripted model, word by word."));
    let agent = Agent::builder()
        .provider(model)
        .build()
        .expect("the scripted provider is always accepted");
    eframe::run_native(
        "pagent",
        eframe::NativeOptions::default(),
        Box::new(|cc| Ok(Box::new(Chat::new(agent, &cc.egui_ctx)))),
    )
}
