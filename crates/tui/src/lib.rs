//! The workbench: a viewer of a run (gitui/bottom style). State ← the run's messages (`app.rs`);
//! key → action → command (`keys.rs`); render = pure function of the state (`ui.rs`).
//!
//! The viewer talks to its run through a [`RunLink`] — the run's socket, or a finished run's
//! folder — and never waits on it: the loop polls the keyboard with a short timeout, drains what
//! the run sent without blocking, and redraws only when something changed. The run never waits
//! on the viewer: it queues, and a viewer that falls behind is sent a fresh history.
//!
//! Signals sent to a viewer only detach it: SIGHUP (its terminal closed) and SIGTERM leave with
//! the terminal restored; SIGINT asks, like `q`. A terminal that stops answering is a detach
//! too: a viewer never outlives its terminal. (crossterm's reader spins on a hung-up terminal,
//! so it runs on a thread of its own and the loop watches the terminal for the hang-up itself.)

pub mod app;
pub mod browser;
pub mod compare;
pub mod keys;
pub mod neighbors;
pub mod ui;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event as TermEvent, KeyEventKind,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::layout::Rect;
use ratatui::{DefaultTerminal, Terminal};

use app::{Action, App, Effect, Request, RunStatus, ViewOptions};
use conelab_core::objective::Objectives;
use conelab_data::{FrequencyGroups, GroupBounds};
use conelab_link::client::RunLink;
use conelab_link::protocol::{ClientMessage, RunHello};
use conelab_metrics::RowGroups;

#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    #[error("cannot use the terminal: {0}")]
    Terminal(#[from] io::Error),
}

/// How often the loop looks at the keyboard and the run when nothing happens.
pub const TICK: Duration = Duration::from_millis(50);
/// Messages folded per tick at most, so keys stay answered while a history pours in.
const MESSAGES_PER_TICK: usize = 2_000;

fn restore_terminal() {
    let _ = execute!(io::stdout(), DisableMouseCapture, LeaveAlternateScreen);
    let _ = disable_raw_mode();
}

/// Restores the terminal however the loop ends (return, error, unwinding panic).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Raw mode and the alternate screen. A panic on this thread restores the terminal before its
/// message is printed; a panic another thread catches (and reports in its own way) leaves the
/// terminal alone.
fn init_terminal() -> io::Result<DefaultTerminal> {
    let ui_thread = std::thread::current().id();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() == ui_thread {
            restore_terminal();
        }
        previous(info);
    }));
    enable_raw_mode()?;
    if let Err(e) = execute!(io::stdout(), EnterAlternateScreen) {
        let _ = disable_raw_mode();
        return Err(e);
    }
    Terminal::new(ratatui::backend::CrosstermBackend::new(io::stdout()))
}

/// The terminal's input events, read on a thread of their own: crossterm's reader loops forever
/// on a terminal that has hung up, which must never hold the viewer's loop (the thread ends with
/// the process).
struct Input {
    events: std::sync::mpsc::Receiver<TermEvent>,
}

impl Input {
    fn start() -> io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("conelab-input".into())
            .spawn(move || {
                while let Ok(e) = event::read() {
                    if tx.send(e).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self { events: rx })
    }

    /// The next input event within `timeout`; `Err` when the terminal is gone.
    fn next(&self, timeout: Duration) -> Result<Option<TermEvent>, ()> {
        if terminal_hung_up() {
            return Err(());
        }
        match self.events.recv_timeout(timeout) {
            Ok(e) => Ok(Some(e)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(()),
        }
    }
}

/// The controlling terminal has hung up (its window or SSH connection is gone).
fn terminal_hung_up() -> bool {
    use std::os::fd::AsRawFd;
    let stdin = io::stdin();
    let fd = stdin.as_raw_fd();
    // SAFETY: isatty and poll on our own standard input, with a pollfd on this stack frame.
    unsafe {
        if libc::isatty(fd) != 1 {
            return false;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        libc::poll(&mut p, 1, 0) > 0
            && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    }
}

/// The offline browser until the user leaves (or its terminal goes).
pub fn run_browser(mut browser: browser::Browser) -> Result<(), TuiError> {
    let signals = ViewerSignals::install()?;
    let mut terminal = init_terminal()?;
    let _guard = TerminalGuard;
    let input = Input::start()?;
    let mut dirty = true;
    while !browser.exit {
        if signals.detach.load(Ordering::SeqCst) || signals.ask.swap(false, Ordering::SeqCst) {
            break;
        }
        if dirty {
            if terminal
                .draw(|frame| ui::render_browser(frame, &browser))
                .is_err()
            {
                break;
            }
            dirty = false;
        }
        match input.next(TICK) {
            Ok(Some(TermEvent::Key(key))) => {
                browser.on_key(key);
                dirty = true;
            }
            Ok(Some(TermEvent::Resize(..))) => dirty = true,
            Ok(_) => {}
            Err(()) => break,
        }
    }
    Ok(())
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

/// Signals for a viewer: SIGHUP and SIGTERM detach, SIGINT asks.
struct ViewerSignals {
    detach: Arc<AtomicBool>,
    ask: Arc<AtomicBool>,
}

impl ViewerSignals {
    fn install() -> io::Result<Self> {
        let detach = Arc::new(AtomicBool::new(false));
        let ask = Arc::new(AtomicBool::new(false));
        for sig in [libc::SIGHUP, libc::SIGTERM] {
            signal_hook::flag::register(sig, detach.clone())?;
        }
        signal_hook::flag::register(libc::SIGINT, ask.clone())?;
        Ok(Self { detach, ask })
    }
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

/// Runs the workbench on `link` until the user leaves or detaches. `hello` is what the run said
/// when the link was opened.
pub fn run_viewer(
    mut link: Box<dyn RunLink>,
    hello: RunHello,
    setup: ViewerSetup,
) -> Result<ViewerExit, TuiError> {
    let signals = ViewerSignals::install()?;
    let bounds = GroupBounds::new(hello.group_bounds[0], hello.group_bounds[1]).unwrap_or_default();
    let rows = RowGroups::from_ranks(&FrequencyGroups::new(hello.vocab_size, bounds));
    let mut app = App::new(Objectives::default(), setup.view);
    app.spectrum_reference = setup.reference;
    app.read_only = setup.read_only;
    // Until the history arrives: who the run is, and that the view is coming.
    app.run.info.name = hello.run_id.clone();
    app.run.status = RunStatus::Starting;
    app.hello = Some(hello);
    let mut out = Outgoing { next_id: 0 };
    let send = |link: &mut Box<dyn RunLink>, app: &mut App, m: ClientMessage| {
        if link.send(m).is_err() {
            app.on_disconnect();
        }
    };
    send(&mut link, &mut app, ClientMessage::Subscribe);
    let vocab = out.request(Request::Vocabulary);
    send(&mut link, &mut app, vocab);

    let mut terminal = init_terminal()?;
    let _guard = TerminalGuard;
    // The mouse is optional: a terminal that refuses it keeps the keyboard; `M` and --no-mouse
    // leave it to the terminal (text selection).
    let mut captured = app.mouse;
    if captured {
        let _ = execute!(io::stdout(), EnableMouseCapture);
    }
    let input = Input::start()?;
    let mut dirty = true;
    let exit = loop {
        if !app.connection_lost {
            for _ in 0..MESSAGES_PER_TICK {
                match link.try_recv() {
                    Ok(Some(m)) => {
                        app.on_message(m);
                        dirty = true;
                    }
                    Ok(None) => break,
                    Err(_) => {
                        app.on_disconnect();
                        dirty = true;
                        break;
                    }
                }
            }
        }
        for r in app.take_requests() {
            let m = out.request(r);
            send(&mut link, &mut app, m);
        }
        if signals.detach.swap(false, Ordering::SeqCst) {
            break ViewerExit::Detached;
        }
        if signals.ask.swap(false, Ordering::SeqCst) {
            match app.apply(Action::Quit) {
                Effect::Exit => break ViewerExit::Left(app.run.status.clone()),
                Effect::Detach => break ViewerExit::Detached,
                _ => dirty = true,
            }
        }
        if app.should_exit() {
            break ViewerExit::Left(app.run.status.clone());
        }
        if app.mouse != captured {
            captured = app.mouse;
            let _ = if captured {
                execute!(io::stdout(), EnableMouseCapture)
            } else {
                execute!(io::stdout(), DisableMouseCapture)
            };
        }
        if dirty {
            if terminal
                .draw(|frame| ui::render(frame, &app, Some(&rows)))
                .is_err()
            {
                // The terminal is gone: leave, the run goes on.
                break ViewerExit::Detached;
            }
            dirty = false;
        }
        let input = match input.next(TICK) {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            // The terminal is gone: leave, the run goes on.
            Err(()) => break ViewerExit::Detached,
        };
        match input {
            TermEvent::Key(key) if key.kind != KeyEventKind::Release => {
                let action = keys::action_for(&app, key);
                dirty = true;
                match app.apply(action) {
                    Effect::None => {}
                    Effect::Send(c) => {
                        let id = out.id();
                        send(
                            &mut link,
                            &mut app,
                            ClientMessage::Command { id, command: c },
                        );
                    }
                    Effect::Exit => break ViewerExit::Left(app.run.status.clone()),
                    Effect::Detach => break ViewerExit::Detached,
                }
            }
            TermEvent::Mouse(mouse) => {
                let size = match terminal.size() {
                    Ok(s) => s,
                    Err(_) => break ViewerExit::Detached,
                };
                let panes = ui::pane_areas(Rect::new(0, 0, size.width, size.height), &app);
                let action = keys::mouse_action(&app, mouse, &panes);
                if action != Action::None {
                    dirty = true;
                    if let Effect::Send(c) = app.apply(action) {
                        let id = out.id();
                        send(
                            &mut link,
                            &mut app,
                            ClientMessage::Command { id, command: c },
                        );
                    }
                }
            }
            TermEvent::Resize(..) => dirty = true,
            _ => {}
        }
    };
    let _ = link.send(ClientMessage::Bye);
    drop(terminal);
    Ok(exit)
}
