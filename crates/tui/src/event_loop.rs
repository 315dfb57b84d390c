//! The one loop every view runs in: the workbench, the compare view and the browser (bottom's
//! `src/event.rs`). Every source — the keyboard, the view's source (the run's link, the followed
//! run folders), signals, the terminal hanging up — sends into one bounded channel from a
//! thread of its own, and the loop blocks on that one receive. Nothing is polled.
//!
//! Drawing is paced, not polled: the loop draws at once after a quiet spell, and while events
//! keep coming it folds them for up to one [`FRAME`] and draws once (a run reporting a thousand
//! steps a second costs twenty frames a second, not a thousand). No pane depends on the clock,
//! so there is no tick.
//!
//! Signals sent to a viewer only detach it: SIGHUP (its terminal closed) and SIGTERM leave with
//! the terminal restored; SIGINT asks, like `q`. A terminal that stops answering is a detach
//! too: a viewer never outlives its terminal. (crossterm's reader spins on a hung-up terminal,
//! so a watcher thread waits for the hang-up itself.)

use std::io;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use ratatui::backend::Backend;
use ratatui::crossterm::event::{
    self, DisableMouseCapture, EnableMouseCapture, Event as TermEvent, KeyEvent, KeyEventKind,
    MouseEvent,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::layout::Rect;
use ratatui::{DefaultTerminal, Frame, Terminal};

use crate::TuiError;

/// The shortest time between two frames while events keep coming.
pub const FRAME: Duration = Duration::from_millis(50);
/// Events waiting for the loop at most; a source that runs ahead waits (the run's link then
/// backs up to the run, which sends a slow viewer a fresh history instead of queueing).
pub const QUEUE: usize = 1_024;

/// Everything a view hears about, from every source.
#[derive(Debug, Clone, PartialEq)]
pub enum ViewerEvent<M> {
    Key(KeyEvent),
    Mouse(MouseEvent),
    Resize,
    /// A message from what the view shows (the run's link, the followed folders).
    Source(M),
    /// The source is gone (the run closed its link, the follower stopped).
    SourceGone,
    /// SIGHUP or SIGTERM: leave at once, the run goes on.
    Detach,
    /// SIGINT: as if the user pressed `q`.
    Ask,
    /// The terminal hung up or cannot be read.
    TerminalGone,
}

/// What an event did to a view.
#[derive(Debug, Clone, PartialEq)]
pub enum Flow<E> {
    Unchanged,
    Changed,
    Exit(E),
}

/// A screen the loop can run: state folded from events, drawn as a pure function of it.
pub trait View {
    type Message: Send + 'static;
    type Exit;
    /// Folds one event. `screen` is the terminal's area (mouse hits are found in it).
    fn on_event(&mut self, event: ViewerEvent<Self::Message>, screen: Rect) -> Flow<Self::Exit>;
    fn render(&self, frame: &mut Frame);
    /// How the view ends when its terminal goes or cannot be drawn on.
    fn terminal_gone(&mut self) -> Self::Exit;
    /// Whether the view wants the mouse (the terminal then does no text selection).
    fn mouse(&self) -> bool {
        false
    }
    /// Whether the terminal's bell should ring now (asked after each event; a `true` is
    /// answered once).
    fn take_bell(&mut self) -> bool {
        false
    }
}

/// What the loop asks of the terminal besides drawing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalEffect {
    /// Mouse capture on or off.
    Mouse(bool),
    /// Ring the bell (BEL): the attached run ended, diverged or failed.
    Bell,
}

/// The loop's channel, made before the loop so the view's source can be given its sender.
pub struct Events<M> {
    tx: SyncSender<ViewerEvent<M>>,
    rx: Receiver<ViewerEvent<M>>,
}

impl<M: Send + 'static> Events<M> {
    pub fn new() -> Self {
        Self::bounded(QUEUE)
    }

    pub fn bounded(capacity: usize) -> Self {
        let (tx, rx) = sync_channel(capacity);
        Self { tx, rx }
    }

    pub fn sender(&self) -> SyncSender<ViewerEvent<M>> {
        self.tx.clone()
    }

    /// Hands everything `from` receives to the loop as [`ViewerEvent::Source`], and
    /// [`ViewerEvent::SourceGone`] when it ends, on a thread of its own.
    pub fn forward<T: Send + 'static>(
        &self,
        from: Receiver<T>,
        convert: fn(T) -> M,
    ) -> io::Result<()> {
        let (tx, end) = (self.sender(), self.sender());
        conelab_base::channel_relay::relay(
            "conelab-source",
            from,
            move |item| tx.send(ViewerEvent::Source(convert(item))).is_ok(),
            move || {
                let _ = end.send(ViewerEvent::SourceGone);
            },
        )
    }
}

impl<M: Send + 'static> Default for Events<M> {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `view` on the terminal until it exits: raw mode and the alternate screen for its
/// lifetime (restored however it ends), the keyboard, signals and the hang-up watcher as
/// sources next to whatever already sends into `events`.
pub fn run<V: View>(view: &mut V, events: Events<V::Message>) -> Result<V::Exit, TuiError> {
    let signals = start_signals(events.sender())?;
    let mut terminal = init_terminal()?;
    let _guard = TerminalGuard;
    start_input(events.sender())?;
    start_hang_up_watcher(events.sender())?;
    let exit = drive(view, &mut terminal, events, |effect| {
        let _ = match effect {
            TerminalEffect::Mouse(true) => execute!(io::stdout(), EnableMouseCapture),
            TerminalEffect::Mouse(false) => execute!(io::stdout(), DisableMouseCapture),
            TerminalEffect::Bell => {
                use std::io::Write;
                let mut out = io::stdout();
                out.write_all(b"\x07").and_then(|()| out.flush())
            }
        };
    });
    signals.close();
    drop(terminal);
    Ok(exit)
}

/// The loop itself, on any backend: block for the next event, fold it, draw when something
/// changed (at once after a quiet spell, else at most once a [`FRAME`]). `terminal_effect` is told
/// whenever the view's wish for the mouse changes (and once at the start if it wants it), and
/// when the view rings its bell.
pub fn drive<V: View, B: Backend>(
    view: &mut V,
    terminal: &mut Terminal<B>,
    events: Events<V::Message>,
    mut terminal_effect: impl FnMut(TerminalEffect),
) -> V::Exit {
    let Events { tx, rx } = events;
    // The loop holds no sender: when every source is gone, it is not waiting forever.
    drop(tx);
    let mut mouse = view.mouse();
    if mouse {
        terminal_effect(TerminalEffect::Mouse(true));
    }
    let mut dirty = true;
    let mut last_draw: Option<Instant> = None;
    loop {
        // A changed view is drawn once its frame is due; until then the loop waits for the
        // next event no longer than that.
        let due =
            dirty.then(|| last_draw.map_or(Duration::ZERO, |t| FRAME.saturating_sub(t.elapsed())));
        let event = match due {
            Some(due) if due.is_zero() => {
                if terminal.draw(|frame| view.render(frame)).is_err() {
                    return view.terminal_gone();
                }
                dirty = false;
                last_draw = Some(Instant::now());
                continue;
            }
            Some(due) => match rx.recv_timeout(due) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return view.terminal_gone(),
            },
            None => match rx.recv() {
                Ok(e) => e,
                Err(_) => return view.terminal_gone(),
            },
        };
        let screen = match terminal.size() {
            Ok(s) => Rect::new(0, 0, s.width, s.height),
            Err(_) => return view.terminal_gone(),
        };
        let flow = view.on_event(event, screen);
        // Before an exit too: a view that leaves when its run ends still rings for it.
        if view.take_bell() {
            terminal_effect(TerminalEffect::Bell);
        }
        match flow {
            Flow::Unchanged => {}
            Flow::Changed => dirty = true,
            Flow::Exit(e) => return e,
        }
        if view.mouse() != mouse {
            mouse = view.mouse();
            terminal_effect(TerminalEffect::Mouse(mouse));
        }
    }
}

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
        // A decoder's panic on a damaged file, caught and reported as its damage: the screen
        // stays.
        if std::thread::current().id() == ui_thread && !conelab_base::integrity::catching_panic() {
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

/// The terminal's input as events. crossterm's reader loops forever on a terminal that has hung
/// up, so it has a thread of its own that must never hold the loop (it ends with the process).
fn start_input<M: Send + 'static>(tx: SyncSender<ViewerEvent<M>>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("conelab-input".into())
        .spawn(move || {
            loop {
                let event = match event::read() {
                    Ok(TermEvent::Key(key)) if key.kind != KeyEventKind::Release => {
                        ViewerEvent::Key(key)
                    }
                    Ok(TermEvent::Mouse(mouse)) => ViewerEvent::Mouse(mouse),
                    Ok(TermEvent::Resize(..)) => ViewerEvent::Resize,
                    Ok(_) => continue,
                    Err(_) => {
                        let _ = tx.send(ViewerEvent::TerminalGone);
                        return;
                    }
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}

/// Waits, on a thread of its own, for the controlling terminal to hang up (its window or SSH
/// connection is gone). `poll` with no events asked for still reports a hang-up, and reads
/// nothing, so it never races crossterm's reader.
fn start_hang_up_watcher<M: Send + 'static>(tx: SyncSender<ViewerEvent<M>>) -> io::Result<()> {
    use std::io::IsTerminal;
    // macOS's poll(2) does not take terminals (it answers POLLNVAL at once): no watcher there;
    // SIGHUP still says a hang-up.
    if !io::stdin().is_terminal() || cfg!(target_vendor = "apple") {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("conelab-hang-up".into())
        .spawn(move || {
            // Hung up, or failing: either way the terminal is gone.
            let _ = conelab_base::platform::wait_for_hang_up(io::stdin());
            let _ = tx.send(ViewerEvent::TerminalGone);
        })?;
    Ok(())
}

/// SIGHUP and SIGTERM detach, SIGINT asks: delivered as events by a thread of their own, and
/// handed back to their previous handling when the loop ends.
fn start_signals<M: Send + 'static>(
    tx: SyncSender<ViewerEvent<M>>,
) -> io::Result<signal_hook::iterator::Handle> {
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGHUP, libc::SIGTERM, libc::SIGINT])?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("conelab-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let event = if signal == libc::SIGINT {
                    ViewerEvent::Ask
                } else {
                    ViewerEvent::Detach
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        })?;
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    use ratatui::widgets::Paragraph;

    /// A view that shows the last message and counts what it saw.
    #[derive(Default)]
    struct Counter {
        last: u32,
        folded: usize,
        gone: bool,
        mouse: bool,
        bell: bool,
        renders: std::cell::Cell<usize>,
    }

    impl View for Counter {
        type Message = u32;
        type Exit = &'static str;

        fn on_event(&mut self, event: ViewerEvent<u32>, _: Rect) -> Flow<&'static str> {
            match event {
                ViewerEvent::Source(n) => {
                    self.last = n;
                    self.folded += 1;
                    Flow::Changed
                }
                ViewerEvent::SourceGone => {
                    self.gone = true;
                    Flow::Changed
                }
                ViewerEvent::Key(k) if k.code == KeyCode::Char('m') => {
                    self.mouse = !self.mouse;
                    Flow::Changed
                }
                ViewerEvent::Key(k) if k.code == KeyCode::Char('q') => Flow::Exit("left"),
                ViewerEvent::Key(k) if k.code == KeyCode::Char('b') => {
                    self.bell = true;
                    Flow::Unchanged
                }
                // Rings and leaves at once (a workbench that exits when its run ends).
                ViewerEvent::Key(k) if k.code == KeyCode::Char('x') => {
                    self.bell = true;
                    Flow::Exit("rang and left")
                }
                ViewerEvent::Detach => Flow::Exit("detached"),
                _ => Flow::Unchanged,
            }
        }

        fn render(&self, frame: &mut Frame) {
            self.renders.set(self.renders.get() + 1);
            let text = format!("last {} gone {}", self.last, self.gone);
            frame.render_widget(Paragraph::new(text), frame.area());
        }

        fn terminal_gone(&mut self) -> &'static str {
            "terminal gone"
        }

        fn mouse(&self) -> bool {
            self.mouse
        }

        fn take_bell(&mut self) -> bool {
            std::mem::take(&mut self.bell)
        }
    }

    fn key(c: char) -> ViewerEvent<u32> {
        ViewerEvent::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }

    fn screen(t: &Terminal<TestBackend>) -> String {
        t.backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect()
    }

    #[test]
    fn a_burst_is_folded_into_few_frames_and_the_last_state_is_drawn() {
        let events = Events::<u32>::bounded(20_000);
        let tx = events.sender();
        for n in 1..=10_000 {
            tx.send(ViewerEvent::Source(n)).expect("queued");
        }
        tx.send(key('q')).expect("queued");
        drop(tx);
        let mut view = Counter::default();
        let mut terminal = Terminal::new(TestBackend::new(30, 1)).expect("terminal");
        let exit = drive(&mut view, &mut terminal, events, |_| {});
        assert_eq!(exit, "left");
        assert_eq!(view.folded, 10_000, "every message is folded");
        // One frame at the start, then at most one per FRAME while the burst lasts (the burst
        // takes far less than a second here, so far fewer frames than messages).
        assert!(view.renders.get() < 100, "{} frames", view.renders.get());
        // The last frame may precede the last messages by less than a FRAME; it shows one of
        // the messages.
        assert!(screen(&terminal).starts_with("last "));
    }

    #[test]
    fn a_quiet_loop_draws_each_change_at_once_and_blocks_in_between() {
        let events = Events::<u32>::new();
        let tx = events.sender();
        let feeder = std::thread::spawn(move || {
            for n in 1..=3 {
                std::thread::sleep(FRAME * 2);
                tx.send(ViewerEvent::Source(n)).expect("loop alive");
            }
            std::thread::sleep(FRAME * 2);
            // A change of the mouse wish, then the source goes, then a signal detaches.
            tx.send(key('m')).expect("loop alive");
            tx.send(ViewerEvent::SourceGone).expect("loop alive");
            std::thread::sleep(FRAME * 2);
            tx.send(ViewerEvent::Detach).expect("loop alive");
        });
        let mut view = Counter::default();
        let mut terminal = Terminal::new(TestBackend::new(30, 1)).expect("terminal");
        let mut mouse = Vec::new();
        let exit = drive(&mut view, &mut terminal, events, |effect| {
            if let TerminalEffect::Mouse(on) = effect {
                mouse.push(on)
            }
        });
        feeder.join().expect("feeder");
        assert_eq!(exit, "detached");
        assert_eq!(mouse, vec![true], "told once, when the wish changed");
        // At most: the start, three messages, the key and the source's end; nothing while
        // waiting (a loop that polled and drew would draw dozens of frames in this time).
        let renders = view.renders.get();
        assert!((2..=6).contains(&renders), "{renders} frames");
        assert!(screen(&terminal).starts_with("last 3 gone true"));
    }

    #[test]
    fn the_loop_ends_as_detached_when_every_source_is_gone() {
        let events = Events::<u32>::new();
        let (tx, rx) = std::sync::mpsc::channel();
        events.forward(rx, |n: u32| n * 2).expect("thread");
        tx.send(21).expect("forwarder alive");
        drop(tx);
        let mut view = Counter::default();
        let mut terminal = Terminal::new(TestBackend::new(30, 1)).expect("terminal");
        // The forwarder sends the message, then SourceGone, then hangs up: the loop, holding
        // no sender itself, ends instead of waiting forever.
        let exit = drive(&mut view, &mut terminal, events, |_| {});
        assert_eq!(exit, "terminal gone");
        assert_eq!((view.last, view.gone), (42, true));
    }

    /// A view's bell reaches the terminal once per ring, beside its mouse wishes.
    #[test]
    fn the_bell_is_asked_of_the_terminal_once_per_ring() {
        let events = Events::<u32>::new();
        let tx = events.sender();
        for c in ['b', 'm', 'b', 'x'] {
            tx.send(key(c)).expect("queued");
        }
        drop(tx);
        let mut view = Counter::default();
        let mut terminal = Terminal::new(TestBackend::new(30, 1)).expect("terminal");
        let mut effects = Vec::new();
        let exit = drive(&mut view, &mut terminal, events, |e| effects.push(e));
        assert_eq!(exit, "rang and left");
        assert_eq!(
            effects,
            [
                TerminalEffect::Bell,
                TerminalEffect::Mouse(true),
                TerminalEffect::Bell,
                TerminalEffect::Bell
            ],
            "the last ring comes with the exit"
        );
    }
}
