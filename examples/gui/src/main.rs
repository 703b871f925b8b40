//! The window: `cargo run -p pagent-gui [-- OPTIONS]`.
//!
//! Options (the CI smoke run under Xvfb uses them; a person needs none):
//! - `--prompt TEXT`: send TEXT as soon as the window opens;
//! - `--follow-up TEXT`: queue TEXT as a follow-up right after that prompt;
//! - `--screenshot PATH --after SECONDS`: save the window as a PNG at PATH with the first
//!   frame drawn SECONDS after it opened, then close it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eframe::egui;
use pagent::Message;
use pagent_gui::{App, Pace, agent_from_env};

#[derive(Default)]
struct Options {
    prompt: Option<String>,
    follow_up: Option<String>,
    screenshot: Option<PathBuf>,
    after: Duration,
}

fn options() -> Result<Options, String> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--prompt" => options.prompt = Some(value()?),
            "--follow-up" => options.follow_up = Some(value()?),
            "--screenshot" => options.screenshot = Some(PathBuf::from(value()?)),
            "--after" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--after: {e}"))?;
                options.after = Duration::from_secs_f64(secs);
            }
            other => return Err(format!("unknown option {other} (see src/main.rs)")),
        }
    }
    Ok(options)
}

fn main() {
    let options = options().unwrap_or_else(|e| {
        eprintln!("pagent-gui: {e}");
        std::process::exit(2);
    });
    let (agent, source) = agent_from_env(Pace::VISIBLE).unwrap_or_else(|e| {
        eprintln!("pagent-gui: {e}");
        std::process::exit(2);
    });
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("pagent")
            .with_inner_size([1100.0, 680.0]),
        ..Default::default()
    };
    let result = eframe::run_native(
        "pagent",
        native,
        Box::new(move |cc| {
            let app = App::new(agent, source, &cc.egui_ctx);
            if let Some(prompt) = options.prompt.clone() {
                let agent = app.agent().clone();
                let follow_up = options.follow_up.clone();
                std::thread::spawn(move || {
                    if let Some(text) = follow_up {
                        // Queued before the run: it waits for the run to reach its end.
                        let _ = agent.follow_up(Message::user(text));
                    }
                    let _ = agent.prompt(prompt);
                });
            }
            Ok(Box::new(Window {
                app,
                shot: options.screenshot.clone(),
                after: options.after,
                opened: Instant::now(),
            }))
        }),
    );
    if let Err(e) = result {
        eprintln!("pagent-gui: {e}");
        std::process::exit(1);
    }
}

/// The app in its window, and the screenshot asked for on the command line.
struct Window {
    app: App,
    shot: Option<PathBuf>,
    after: Duration,
    opened: Instant,
}

impl eframe::App for Window {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.draw(ui);
        let Some(path) = &self.shot else {
            return;
        };
        let waited = self.opened.elapsed();
        if waited < self.after {
            ui.ctx().request_repaint_after(self.after - waited);
            return;
        }
        let (path, ctx) = (path.clone(), ui.ctx().clone());
        self.shot = None;
        ui.ctx()
            .request_screenshot(move |image: Arc<egui::ColorImage>| {
                let [w, h] = image.size;
                // A window that drew nothing (a broken GL context gives one flat colour)
                // fails the smoke run rather than saving an empty picture.
                let mut colours: Vec<[u8; 4]> = image
                    .pixels
                    .iter()
                    .step_by(7)
                    .map(|c| c.to_array())
                    .collect();
                colours.sort_unstable();
                colours.dedup();
                if colours.len() < 8 {
                    eprintln!("pagent-gui: the window drew {} colours only", colours.len());
                    std::process::exit(1);
                }
                let saved = image::save_buffer(
                    &path,
                    image.as_raw(),
                    w as u32,
                    h as u32,
                    image::ColorType::Rgba8,
                );
                match saved {
                    Ok(()) => eprintln!("pagent-gui: saved {} ({w}x{h})", path.display()),
                    Err(e) => {
                        eprintln!("pagent-gui: cannot save {}: {e}", path.display());
                        std::process::exit(1);
                    }
                }
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
                ctx.request_repaint();
            });
        ui.ctx().request_repaint();
    }
}
