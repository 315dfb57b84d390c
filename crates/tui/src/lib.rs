//! The workbench: a viewer of a run (gitui/bottom style). State ← the run's messages (`app.rs`);
//! key → action → command (`keys.rs`, each pane's keys with its part of the state); render = pure
//! function of the state (`ui/`: the layout, the header, one file per pane under `ui/pane/`, the
//! overlays, the browser's screen); one loop for every view (`event_loop.rs`). Beneath them all,
//! what every view draws and writes the same way: `style` (colours, frames), `format` (text cut
//! to a width, durations, TensorBoard's smoothing), `chrome` (the screen's limits, the keys
//! overlay), `help` (the workbench's keys).
//!
//! The viewer talks to its run through a [`RunLink`] — the run's socket, or a finished run's
//! folder — and never waits on it: the link hands each message to the loop's one channel from
//! a thread of its own, and the loop redraws only when something changed. The run never waits
//! on the viewer: it queues, and a viewer that falls behind is sent a fresh history.

pub mod app;
pub mod browser;
pub mod chrome;
pub mod compare;
mod error;
pub mod event_loop;
pub mod format;
pub mod help;
pub mod keys;
pub mod neighbors;
pub mod style;
pub mod ui;

pub use error::TuiError;

use std::sync::Arc;

use conelab_base::exit::ExitStatus;
use ratatui::Frame;
use ratatui::layout::Rect;

use app::{Action, App, Effect, Request, ViewOptions};
use conelab_client::link::RunLink;
use conelab_core::objective::Objectives;
use conelab_core::run_dir::ending::{crashed_summary, ending_summary};
use conelab_data::{FrequencyGroups, GroupBounds};
use conelab_metrics::RowGroups;
use conelab_protocol::message::{ClientMessage, RunHello, ServerMessage};
use conelab_protocol::view::RunStatus;
use event_loop::{Events, Flow, View, ViewerEvent};

pub use event_loop::FRAME;

impl View for browser::Browser {
    type Message = ();
    type Exit = ();

    fn on_event(&mut self, event: ViewerEvent<()>, _: Rect) -> Flow<()> {
        match event {
            ViewerEvent::Key(key) => {
                self.on_key(key);
                if self.exit {
                    Flow::Exit(())
                } else {
                    Flow::Changed
                }
            }
            ViewerEvent::Resize => Flow::Changed,
            ViewerEvent::Detach | ViewerEvent::Ask | ViewerEvent::TerminalGone => Flow::Exit(()),
            ViewerEvent::Mouse(_) | ViewerEvent::Source(()) | ViewerEvent::SourceGone => {
                Flow::Unchanged
            }
        }
    }

    fn render(&self, frame: &mut Frame) {
        ui::render_browser(frame, self);
    }

    fn terminal_gone(&mut self) {}
}

/// The offline browser until the user leaves (or its terminal goes).
pub fn run_browser(mut browser: browser::Browser) -> Result<(), TuiError> {
    event_loop::run(&mut browser, Events::new())
}

/// What the viewer is given besides the run.
#[derive(Debug, Clone, Default)]
pub struct ViewerSetup {
    pub view: ViewOptions,
    /// Another run's spectrum for the Spectrum pane.
    pub reference: Option<(String, Vec<f64>)>,
    /// Why the run takes no commands (a run that is over).
    pub read_only: Option<String>,
}

/// How a viewer ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ViewerExit {
    /// The user (or a signal, or a dead terminal) detached; the run goes on.
    Detached,
    /// The user left; the run is in this state.
    Left(RunStatus),
}

/// Turns the app's requests and commands into messages for the run.
struct Outgoing {
    next_id: u64,
}

impl Outgoing {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn request(&mut self, r: Request) -> ClientMessage {
        let id = self.id();
        match r {
            Request::Projection(step) => ClientMessage::Projection { id, step },
            Request::Neighbors(words) => ClientMessage::Neighbors {
                id,
                words,
                k: neighbors::K,
            },
            Request::Vocabulary => ClientMessage::Vocabulary { id },
        }
    }
}

/// After a viewer of `dir`: how to come back when it detached (said on stdout, like zellij's exit
/// reason); the run's exit status when the user watched it end (from its `final.json`, waited
/// for a little, else from what the view last knew).
pub fn after_viewer(dir: &std::path::Path, exit: ViewerExit) -> ExitStatus {
    use std::io::Write;
    // Absolute: the hint is used from wherever the user is next (another shell, after SSH).
    let dir = &std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match exit {
        ViewerExit::Detached => {
            // The terminal may be gone (that is one way to detach): then nobody reads this.
            let _ = writeln!(
                std::io::stdout(),
                "conelab: detached from {}: training goes on. Come back with `conelab attach {}`; `conelab runs` lists runs.",
                dir.display(),
                dir.display()
            );
            ExitStatus::Success
        }
        ViewerExit::Left(status) if !status.is_live() => {
            // The run writes how it ended as it exits: wait for it a little (not for one whose
            // process is gone without a word: that is said at once).
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(10) {
                if let Some(line) = crashed_summary(dir) {
                    let _ = writeln!(std::io::stderr(), "{line}");
                    return ExitStatus::Failed;
                }
                if let Ok(Some(f)) = conelab_core::run_dir::live::read_final(dir) {
                    // The same line, whichever front end saw the end (the headless run says it
                    // too): on stderr, beside the run's other words.
                    let _ = writeln!(std::io::stderr(), "{}", ending_summary(dir, &f));
                    return u8::try_from(f.exit_code)
                        .map_or(ExitStatus::Failed, ExitStatus::from_code);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            match status {
                RunStatus::Finished { reason } => match reason {
                    conelab_core::events::FinishReason::Diverged => ExitStatus::Diverged,
                    _ => ExitStatus::Success,
                },
                _ => ExitStatus::Failed,
            }
        }
        // The viewer left a run it last saw live: it may have been killed meanwhile.
        ViewerExit::Left(_) => match crashed_summary(dir) {
            Some(line) => {
                let _ = writeln!(std::io::stderr(), "{line}");
                ExitStatus::Failed
            }
            None => ExitStatus::Success,
        },
    }
}

/// The workbench on a run: the app, the link it steers the run through, and the frequency
/// groups of the run's rows.
struct Workbench {
    app: App,
    link: Box<dyn RunLink>,
    out: Outgoing,
    rows: RowGroups,
}

impl Workbench {
    fn send(&mut self, m: ClientMessage) {
        if self.link.send(m).is_err() {
            self.app.on_disconnect();
        }
    }

    fn send_requests(&mut self) {
        for r in self.app.take_requests() {
            let m = self.out.request(r);
            self.send(m);
        }
    }

    /// What an action does beyond the app: a command for the run, or the end of the view.
    fn effect(&mut self, effect: Effect) -> Flow<ViewerExit> {
        match effect {
            Effect::None => Flow::Changed,
            Effect::Send(command) => {
                let id = self.out.id();
                self.send(ClientMessage::Command { id, command });
                Flow::Changed
            }
            Effect::SendAll(commands) => {
                for command in commands {
                    let id = self.out.id();
                    self.send(ClientMessage::Command { id, command });
                }
                Flow::Changed
            }
            Effect::Exit => Flow::Exit(ViewerExit::Left(self.app.run.status.clone())),
            Effect::Detach => Flow::Exit(ViewerExit::Detached),
        }
    }
}

impl View for Workbench {
    type Message = ServerMessage;
    type Exit = ViewerExit;

    fn take_bell(&mut self) -> bool {
        std::mem::take(&mut self.app.bell)
    }

    fn on_event(&mut self, event: ViewerEvent<ServerMessage>, screen: Rect) -> Flow<ViewerExit> {
        let flow = match event {
            ViewerEvent::Source(m) => {
                if !self.app.connection_lost {
                    self.app.on_message(m);
                }
                Flow::Changed
            }
            ViewerEvent::SourceGone => {
                self.app.on_disconnect();
                Flow::Changed
            }
            ViewerEvent::Key(key) => {
                let action = keys::action_for(&self.app, key);
                let effect = self.app.apply(action);
                // The help scrolls no further than this screen needs (↑ then answers at once).
                self.app.help_scroll = self.app.help_scroll.min(ui::help_max_scroll(screen));
                self.effect(effect)
            }
            ViewerEvent::Mouse(mouse) => {
                let panes = ui::pane_areas(screen, &self.app);
                match keys::mouse_action(&self.app, mouse, &panes) {
                    Action::None => Flow::Unchanged,
                    action => {
                        let effect = self.app.apply(action);
                        self.effect(effect)
                    }
                }
            }
            ViewerEvent::Resize => Flow::Changed,
            ViewerEvent::Detach | ViewerEvent::TerminalGone => Flow::Exit(ViewerExit::Detached),
            ViewerEvent::Ask => {
                let effect = self.app.apply(Action::Quit);
                self.effect(effect)
            }
        };
        self.send_requests();
        if self.app.should_exit() {
            return Flow::Exit(ViewerExit::Left(self.app.run.status.clone()));
        }
        flow
    }

    fn render(&self, frame: &mut Frame) {
        ui::render(frame, &self.app, Some(&self.rows));
    }

    fn terminal_gone(&mut self) -> ViewerExit {
        // The terminal is gone: leave, the run goes on.
        ViewerExit::Detached
    }

    fn mouse(&self) -> bool {
        // Optional: a terminal that refuses it keeps the keyboard; `M` and --no-mouse leave it
        // to the terminal (text selection).
        self.app.mouse
    }
}

/// Runs the workbench on `link` until the user leaves or detaches. `hello` is what the run said
/// when the link was opened.
pub fn run_viewer(
    mut link: Box<dyn RunLink>,
    hello: RunHello,
    setup: ViewerSetup,
) -> Result<ViewerExit, TuiError> {
    let events = Events::new();
    let to_loop = events.sender();
    link.listen(Arc::new(move |m| {
        let event = match m {
            Ok(m) => ViewerEvent::Source(m),
            Err(_) => ViewerEvent::SourceGone,
        };
        to_loop.send(event).is_ok()
    }))?;
    let bounds = GroupBounds::new(hello.group_bounds[0], hello.group_bounds[1]).unwrap_or_default();
    let rows = RowGroups::from_ranks(&FrequencyGroups::new(hello.vocab_size, bounds));
    let mut app = App::new(Objectives::default(), setup.view);
    app.spectrum_reference = setup.reference;
    app.read_only = setup.read_only;
    app.awaiting_history = true;
    // Until the history arrives: who the run is, and that the view is coming.
    app.run.info.name = hello.run_id.clone();
    app.run.status = RunStatus::Starting;
    app.hello = Some(hello);
    let mut workbench = Workbench {
        app,
        link,
        out: Outgoing { next_id: 0 },
        rows,
    };
    workbench.send(ClientMessage::Subscribe);
    let vocab = workbench.out.request(Request::Vocabulary);
    workbench.send(vocab);
    let exit = event_loop::run(&mut workbench, events);
    let _ = workbench.link.send(ClientMessage::Bye);
    exit
}
