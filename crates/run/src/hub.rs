//! The run's hub: one thread that folds every event into the run's [`RunView`] and fans it out
//! to the viewers attached (through the socket or in-process) and to the run's own reporter.
//!
//! It never blocks on a viewer: each has a bounded queue; when one is full the viewer is marked
//! behind, its messages are dropped and counted, and as soon as there is room it gets a
//! [`ServerMessage::Gap`] and a fresh history — the view already holds every event it missed. A
//! viewer whose connection breaks is removed.
//!
//! It also routes commands: a viewer's command goes to the engine with a ticket; the engine's
//! acknowledgement (every viewer sees it as an event) is answered to the asker as a
//! [`ServerMessage::CommandResult`]. The number of viewers decides what a divergence does (pause
//! while someone watches, end the run otherwise), and a run paused after a divergence is ended
//! when its last viewer leaves.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TrySendError};
use std::thread::JoinHandle;

use conelab_core::events::{Command, CommandSender, DivergencePolicy, Event};
use conelab_core::run_fault::Fault;
use conelab_protocol::message::{CommandOutcome, ServerMessage};
use conelab_protocol::view::{RunStatus, RunView};
use conelab_protocol::wire::encode;

/// Viewers' commands waiting for the engine at most (it applies 32 between two steps); one
/// more is refused at once as busy, so a command flood cannot grow the run's queues.
pub const MAX_COMMANDS_WAITING: usize = 256;

/// Messages queued per viewer before it counts as behind.
pub const VIEWER_QUEUE: usize = 4_096;

/// Bytes queued for one socket viewer before it counts as behind (a reply that does not fit is
/// dropped): a projection reply is ~250 KB, a neighbours reply up to 2 MB. A message larger than
/// this still goes to an empty queue, so a viewer always makes progress. With
/// `server::MAX_CONNECTIONS` viewers, the queues hold at most 64 × 4 MiB.
pub const VIEWER_QUEUE_BYTES: usize = 4 << 20;

/// Bytes queued for all socket viewers together (counted per queue: a line shared by several
/// counts for each) — the bound on what many slow readers hold at once. Past it, a queue that
/// already holds [`PROMPT_QUEUE_BYTES`] takes no more (its viewer is behind); a queue under that
/// (a viewer that reads) is served regardless, so the slow cannot crowd out the prompt.
pub const ALL_VIEWERS_QUEUE_BYTES: usize = 64 << 20;

/// What a queue may always hold, whatever the others hold.
pub const PROMPT_QUEUE_BYTES: usize = 256 << 10;

/// Bytes queued in every [`LineQueue`] of the process (one run serves one socket).
fn queued_all() -> Arc<AtomicUsize> {
    static ALL: std::sync::OnceLock<Arc<AtomicUsize>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| Arc::new(AtomicUsize::new(0))).clone()
}

/// A line in a queue: its bytes are counted while it is there, and given back when it leaves —
/// taken by the writer, or dropped with a queue whose writer is gone.
struct Queued {
    line: Arc<str>,
    bytes: Arc<AtomicUsize>,
    all: Arc<AtomicUsize>,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let len = self.line.len();
        self.bytes.fetch_sub(len, Ordering::SeqCst);
        self.all.fetch_sub(len, Ordering::SeqCst);
    }
}

/// A socket connection's queue of JSON lines, bounded in messages ([`VIEWER_QUEUE`]) and in
/// bytes ([`VIEWER_QUEUE_BYTES`], and [`ALL_VIEWERS_QUEUE_BYTES`] for all of them together).
#[derive(Clone)]
pub struct LineQueue {
    tx: SyncSender<Queued>,
    bytes: Arc<AtomicUsize>,
    all: Arc<AtomicUsize>,
}

/// The writer thread's end of a [`LineQueue`]. (It holds no sender: the queue closes when the
/// last [`LineQueue`] is dropped.)
pub struct LineReceiver {
    rx: Receiver<Queued>,
}

impl Iterator for LineReceiver {
    type Item = Arc<str>;

    /// The next line, waiting for one; `None` once every sender is gone.
    fn next(&mut self) -> Option<Arc<str>> {
        let queued = self.rx.recv().ok()?;
        Some(queued.line.clone())
    }
}

impl LineQueue {
    /// A queue and the end its writer thread reads.
    pub fn new() -> (Self, LineReceiver) {
        Self::sharing(queued_all())
    }

    /// A queue counted in `all` with the others sharing it (the process's count, or a test's).
    fn sharing(all: Arc<AtomicUsize>) -> (Self, LineReceiver) {
        let (tx, rx) = std::sync::mpsc::sync_channel(VIEWER_QUEUE);
        let bytes = Arc::new(AtomicUsize::new(0));
        (Self { tx, bytes, all }, LineReceiver { rx })
    }

    /// Queues `line` unless the queue is full in messages or bytes, or every queue together is
    /// full and this one holds more than a prompt reader's share.
    pub fn try_send(&self, line: Arc<str>) -> Result<(), TrySendError<Arc<str>>> {
        let len = line.len();
        let queued = self.bytes.load(Ordering::SeqCst);
        if queued > 0 && queued + len > VIEWER_QUEUE_BYTES {
            return Err(TrySendError::Full(line));
        }
        if queued + len > PROMPT_QUEUE_BYTES
            && self.all.load(Ordering::SeqCst) + len > ALL_VIEWERS_QUEUE_BYTES
        {
            return Err(TrySendError::Full(line));
        }
        self.bytes.fetch_add(len, Ordering::SeqCst);
        self.all.fetch_add(len, Ordering::SeqCst);
        let queued = Queued {
            line,
            bytes: self.bytes.clone(),
            all: self.all.clone(),
        };
        // Refused, the line's bytes go back as it is dropped.
        self.tx.try_send(queued).map_err(|e| match e {
            TrySendError::Full(q) => TrySendError::Full(q.line.clone()),
            TrySendError::Disconnected(q) => TrySendError::Disconnected(q.line.clone()),
        })
    }

    /// Bytes queued now.
    pub fn queued_bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }
}

/// Where a viewer's messages go.
pub enum Sink {
    /// A socket connection's writer: JSON lines, encoded once for all viewers.
    Lines(LineQueue),
    /// An in-process viewer: the messages themselves.
    Messages(SyncSender<ServerMessage>),
}

/// What the hub is told.
pub enum HubInput {
    Event(Event),
    Subscribe {
        viewer: u64,
        sink: Sink,
    },
    Unsubscribe {
        viewer: u64,
    },
    /// A command from a viewer (subscribed or not); its result goes to `reply`.
    Command {
        viewer: u64,
        id: u64,
        command: Command,
        reply: Sink,
    },
}

struct Viewer {
    sink: Sink,
    /// Messages dropped since it fell behind; `Some` while behind.
    behind: Option<u64>,
}

enum Delivery {
    Sent,
    Full,
    Gone,
}

impl Viewer {
    fn try_send(&self, message: &ServerMessage, line: &mut Option<Arc<str>>) -> Delivery {
        self.sink.try_send(message, line)
    }
}

impl Sink {
    /// Whether everything queued so far has been taken (a socket viewer's writer caught up; an
    /// in-process viewer's channel is not measured, and counts as caught up).
    fn drained(&self) -> bool {
        match self {
            Sink::Lines(q) => q.queued_bytes() == 0,
            Sink::Messages(_) => true,
        }
    }

    /// Queues a message without waiting; `line` caches its JSON encoding across sinks.
    fn try_send(&self, message: &ServerMessage, line: &mut Option<Arc<str>>) -> Delivery {
        let result = match self {
            Sink::Lines(tx) => {
                if line.is_none() {
                    match encode(message) {
                        Ok(l) => *line = Some(Arc::from(l)),
                        // Not encodable (a bug): nothing to send.
                        Err(_) => return Delivery::Sent,
                    }
                }
                match line {
                    Some(l) => tx.try_send(l.clone()).map_err(|e| match e {
                        TrySendError::Full(_) => Delivery::Full,
                        TrySendError::Disconnected(_) => Delivery::Gone,
                    }),
                    None => Ok(()),
                }
            }
            Sink::Messages(tx) => tx.try_send(message.clone()).map_err(|e| match e {
                TrySendError::Full(_) => Delivery::Full,
                TrySendError::Disconnected(_) => Delivery::Gone,
            }),
        };
        match result {
            Ok(()) => Delivery::Sent,
            Err(d) => d,
        }
    }
}

/// A reply to one asker; dropped when its queue is full (a viewer that does not read).
fn send_reply(sink: &Sink, message: &ServerMessage) {
    let _ = sink.try_send(message, &mut None);
}

/// The hub's shared counters, readable from other threads.
#[derive(Debug, Clone, Default)]
pub struct HubStats {
    viewers: Arc<AtomicUsize>,
}

impl HubStats {
    pub fn viewers(&self) -> usize {
        self.viewers.load(Ordering::SeqCst)
    }
}

pub struct Hub {
    view: RunView,
    viewers: HashMap<u64, Viewer>,
    /// ticket → (request id, where its result goes)
    pending: HashMap<u64, (u64, Sink)>,
    next_ticket: u64,
    engine: CommandSender,
    divergence: DivergencePolicy,
    /// The run's own reporter (the headless lines, the run's exit): every event, unbounded.
    reporter: Sender<Event>,
    stats: HubStats,
    finished: bool,
    /// The view's history encoded as a line, until the next event changes the view.
    history_line: Option<Arc<str>>,
}

impl Hub {
    pub fn new(
        view: RunView,
        engine: CommandSender,
        divergence: DivergencePolicy,
        reporter: Sender<Event>,
    ) -> Self {
        divergence.set_pause(false);
        Self {
            view,
            viewers: HashMap::new(),
            pending: HashMap::new(),
            next_ticket: 1,
            engine,
            divergence,
            reporter,
            stats: HubStats::default(),
            finished: false,
            history_line: None,
        }
    }

    pub fn stats(&self) -> HubStats {
        self.stats.clone()
    }

    /// Runs the hub on its own thread until the run's final event. A panic inside is reported
    /// through `fault` (the engine then stops the run) and the hub goes on as a plain relay to
    /// the reporter, so the run still ends cleanly.
    pub fn spawn(
        self,
        inputs: Receiver<HubInput>,
        fault: Fault,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("conelab-hub".into())
            .spawn(move || {
                let mut hub = self;
                let reporter = hub.reporter.clone();
                let mut broken = false;
                for input in inputs {
                    let last = matches!(&input, HubInput::Event(e) if e.is_final());
                    if broken {
                        if let HubInput::Event(e) = input {
                            let _ = reporter.send(e);
                        }
                    } else {
                        let event = match &input {
                            HubInput::Event(e) => Some(e.clone()),
                            _ => None,
                        };
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            hub.handle(input)
                        }));
                        if let Err(panic) = result {
                            broken = true;
                            let message = format!(
                                "the run's hub panicked: {}",
                                conelab_core::run_fault::panic_message(panic.as_ref())
                            );
                            conelab_base::stderr::say(&format!("conelab: {message}"));
                            fault.set(message);
                            // The event it was handling still reaches the reporter.
                            if let Some(e) = event {
                                let _ = reporter.send(e);
                            }
                        }
                    }
                    if last {
                        // The final event is out: the viewers' queues close with the hub (their
                        // writers deliver what is queued first).
                        break;
                    }
                }
            })
    }

    pub fn view(&self) -> &RunView {
        &self.view
    }

    pub fn handle(&mut self, input: HubInput) {
        match input {
            HubInput::Event(event) => self.on_event(event),
            HubInput::Subscribe { viewer, sink } => {
                let v = Viewer { sink, behind: None };
                let history = ServerMessage::History {
                    view: Box::new(self.view.clone()),
                };
                // Encoded once until the view changes: a storm of subscriptions costs a copy of
                // the line each, not an encoding each.
                let mut line = self.history_line.clone();
                let delivery = v.try_send(&history, &mut line);
                self.history_line = line;
                match delivery {
                    Delivery::Sent => {
                        self.viewers.insert(viewer, v);
                    }
                    Delivery::Full => {
                        self.viewers.insert(
                            viewer,
                            Viewer {
                                behind: Some(0),
                                ..v
                            },
                        );
                    }
                    Delivery::Gone => {}
                }
                self.viewers_changed();
            }
            HubInput::Unsubscribe { viewer } => {
                self.viewers.remove(&viewer);
                self.viewers_changed();
            }
            HubInput::Command {
                viewer: _,
                id,
                command,
                reply,
            } => {
                let ended = ServerMessage::CommandResult {
                    id,
                    result: CommandOutcome::Rejected {
                        reason: "the run has ended".into(),
                    },
                };
                if self.finished {
                    send_reply(&reply, &ended);
                    return;
                }
                if self.pending.len() >= MAX_COMMANDS_WAITING {
                    let busy = ServerMessage::CommandResult {
                        id,
                        result: CommandOutcome::Rejected {
                            reason: format!(
                                "busy: {MAX_COMMANDS_WAITING} commands are waiting for the run \
                                 (it applies 32 between two steps); send it again later"
                            ),
                        },
                    };
                    send_reply(&reply, &busy);
                    return;
                }
                let ticket = self.next_ticket;
                self.next_ticket += 1;
                if self.engine.send_ticketed(command, ticket) {
                    self.pending.insert(ticket, (id, reply));
                } else {
                    send_reply(&reply, &ended);
                }
            }
        }
    }

    fn viewers_changed(&mut self) {
        let n = self.viewers.len();
        self.stats.viewers.store(n, Ordering::SeqCst);
        self.divergence.set_pause(n > 0);
        if n == 0 && matches!(self.view.status, RunStatus::Diverged { .. }) && !self.finished {
            // Paused after a divergence and nobody left to decide: end the run (as diverged).
            let _ = self.engine.send(Command::Stop { save: false });
        }
    }

    fn on_event(&mut self, event: Event) {
        if let Event::Applied(a) = &event
            && a.coalesced
        {
            // A repeat that changed nothing: its answer to its sender, and no one else.
            if let Some(t) = a.ticket
                && let Some((id, sink)) = self.pending.remove(&t)
            {
                let result = CommandOutcome::Applied { applied: a.clone() };
                send_reply(&sink, &ServerMessage::CommandResult { id, result });
            }
            return;
        }
        self.view.on_event(&event);
        self.history_line = None;
        // The acknowledgement of a viewer's command, to that viewer.
        let (ticket, outcome) = match &event {
            Event::Applied(a) => (
                a.ticket,
                Some(CommandOutcome::Applied { applied: a.clone() }),
            ),
            Event::Rejected { ticket, reason, .. } => (
                *ticket,
                Some(CommandOutcome::Rejected {
                    reason: reason.clone(),
                }),
            ),
            _ => (None, None),
        };
        if let (Some(t), Some(result)) = (ticket, outcome)
            && let Some((id, sink)) = self.pending.remove(&t)
        {
            send_reply(&sink, &ServerMessage::CommandResult { id, result });
        }
        let last = event.is_final();
        let _ = self.reporter.send(event.clone());
        self.broadcast(ServerMessage::Event { event });
        if last {
            self.finished = true;
            for (_, (id, sink)) in std::mem::take(&mut self.pending) {
                send_reply(
                    &sink,
                    &ServerMessage::CommandResult {
                        id,
                        result: CommandOutcome::Rejected {
                            reason: "the run has ended".into(),
                        },
                    },
                );
            }
        }
    }

    fn broadcast(&mut self, message: ServerMessage) {
        let mut line = None;
        let mut history_line = None;
        let mut gone = Vec::new();
        for (id, v) in self.viewers.iter_mut() {
            if let Some(dropped) = v.behind {
                // Caught up? Then the gap marker and the whole view, which already holds this
                // event; otherwise one more dropped. (Not before its queue is empty: a slow
                // reader with a little room got a gap marker and a fresh copy of the whole view
                // encoded at every event, which did not fit — 20 of them cost the run 13 % of
                // its CPU, `bench chaos --phased`.)
                if !v.sink.drained() {
                    v.behind = Some(dropped + 1);
                    continue;
                }
                let gap = ServerMessage::Gap { dropped };
                match v.try_send(&gap, &mut None) {
                    Delivery::Sent => {
                        let history = ServerMessage::History {
                            view: Box::new(self.view.clone()),
                        };
                        match v.try_send(&history, &mut history_line) {
                            Delivery::Sent => v.behind = None,
                            Delivery::Full => v.behind = Some(dropped + 1),
                            Delivery::Gone => gone.push(*id),
                        }
                    }
                    Delivery::Full => v.behind = Some(dropped + 1),
                    Delivery::Gone => gone.push(*id),
                }
                continue;
            }
            match v.try_send(&message, &mut line) {
                Delivery::Sent => {}
                Delivery::Full => v.behind = Some(1),
                Delivery::Gone => gone.push(*id),
            }
        }
        if !gone.is_empty() {
            for id in gone {
                self.viewers.remove(&id);
            }
            self.viewers_changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many slow readers together hold at most `ALL_VIEWERS_QUEUE_BYTES` (plus a prompt share
    /// each): past it, a queue holding more than a prompt reader's share takes nothing, an
    /// emptier one is still served, and the bytes of a queue whose writer is gone come back.
    #[test]
    fn all_queues_together_are_bounded_and_give_their_bytes_back() {
        let all = Arc::new(AtomicUsize::new(0));
        let mb: Arc<str> = Arc::from("x".repeat(1 << 20));
        let mut queues = Vec::new();
        let mut refused = 0;
        for _ in 0..40 {
            let (q, rx) = LineQueue::sharing(all.clone());
            for _ in 0..3 {
                if q.try_send(mb.clone()).is_err() {
                    refused += 1;
                }
            }
            queues.push((q, rx));
        }
        // 40 slow readers asking for 120 MiB: held to 64 MiB (a first line each is the prompt
        // share: 1 MiB > 256 KiB, so it counts against the bound too).
        assert!(all.load(Ordering::SeqCst) <= ALL_VIEWERS_QUEUE_BYTES);
        assert_eq!(all.load(Ordering::SeqCst), 64 << 20);
        assert_eq!(refused, 120 - 64);
        // A prompt reader's small line still goes through.
        let (prompt, _prompt_rx) = LineQueue::sharing(all.clone());
        assert!(prompt.try_send(Arc::from("{\"step\":1}")).is_ok());
        // Every queue whose writer is gone gives its bytes back, lines and all.
        queues.clear();
        assert_eq!(all.load(Ordering::SeqCst), prompt.queued_bytes());
    }

    /// A socket viewer that never reads holds at most `VIEWER_QUEUE_BYTES` (or one message
    /// larger than that, into an empty queue): the rest is refused as full, and room comes back
    /// as its writer takes lines.
    #[test]
    fn a_line_queue_is_bounded_in_bytes() {
        let (q, rx) = LineQueue::new();
        let mb: Arc<str> = Arc::from("x".repeat(1 << 20));
        let mut accepted = 0;
        for _ in 0..100 {
            if q.try_send(mb.clone()).is_ok() {
                accepted += 1;
            }
        }
        assert_eq!(accepted, VIEWER_QUEUE_BYTES >> 20, "4 of 100 1-MiB replies");
        assert!(q.queued_bytes() <= VIEWER_QUEUE_BYTES);
        // The writer takes one: room for one more.
        let mut rx = rx;
        rx.next().expect("a line");
        assert!(q.try_send(mb.clone()).is_ok());
        assert!(q.try_send(mb.clone()).is_err());
        // One message larger than the bound still goes to an empty queue.
        let (q, _rx) = LineQueue::new();
        let huge: Arc<str> = Arc::from("y".repeat(VIEWER_QUEUE_BYTES + 1));
        assert!(q.try_send(huge.clone()).is_ok());
        assert!(q.try_send(Arc::from("z")).is_err(), "and nothing after it");
    }
    use conelab_core::events::StepStats;
    use conelab_core::objective::Objectives;
    use std::sync::mpsc;

    fn step(n: u64) -> Event {
        Event::Step(StepStats {
            step: n,
            epoch: 0.0,
            loss: 1.0 / n as f64,
            penalty: 0.0,
            lr: 1e-3,
            grad_norm: 1.0,
            tokens_per_sec: 1.0,
            step_ms: 1.0,
            rare_tokens: None,
            rare_g1: None,
            rare_in_group: None,
        })
    }

    fn hub() -> (Hub, mpsc::Receiver<Event>) {
        let (engine_tx, _engine_rx) = mpsc::channel();
        // The engine's receiver is dropped: commands cannot be delivered in these tests.
        let engine = CommandSender::from_channel(engine_tx);
        let (reporter, reports) = mpsc::channel();
        (
            Hub::new(
                RunView::new(Objectives::default()),
                engine,
                DivergencePolicy::default(),
                reporter,
            ),
            reports,
        )
    }

    #[test]
    fn a_slow_viewer_gets_a_gap_and_the_whole_history_and_a_fast_one_misses_nothing() {
        let (mut hub, reports) = hub();
        let (slow_tx, slow_rx) = mpsc::sync_channel(3);
        let (fast_tx, fast_rx) = mpsc::sync_channel(1_000);
        hub.handle(HubInput::Subscribe {
            viewer: 1,
            sink: Sink::Messages(slow_tx),
        });
        hub.handle(HubInput::Subscribe {
            viewer: 2,
            sink: Sink::Messages(fast_tx),
        });
        assert_eq!(hub.stats().viewers(), 2);
        for n in 1..=10 {
            hub.handle(HubInput::Event(step(n)));
        }
        // The fast one: its history, then all ten steps in order.
        let fast: Vec<ServerMessage> = fast_rx.try_iter().collect();
        assert_eq!(fast.len(), 11);
        let steps: Vec<u64> = fast
            .iter()
            .filter_map(|m| match m {
                ServerMessage::Event {
                    event: Event::Step(s),
                } => Some(s.step),
                _ => None,
            })
            .collect();
        assert_eq!(steps, (1..=10).collect::<Vec<_>>());
        // The slow one filled its queue (history + 2 steps), then fell behind.
        let first: Vec<ServerMessage> = slow_rx.try_iter().collect();
        assert_eq!(first.len(), 3);
        // Room again: the next event brings a gap marker and a history holding step 11.
        hub.handle(HubInput::Event(step(11)));
        let next: Vec<ServerMessage> = slow_rx.try_iter().collect();
        match (&next[0], &next[1]) {
            (ServerMessage::Gap { dropped }, ServerMessage::History { view }) => {
                assert_eq!(*dropped, 8, "steps 3–10 were not delivered one by one");
                assert_eq!(view.step(), 11);
                assert_eq!(view.loss.len(), 11, "the history has every step");
            }
            other => panic!("{other:?}"),
        }
        // The reporter got everything.
        assert_eq!(reports.try_iter().count(), 11);
    }

    #[test]
    fn a_viewer_that_went_away_is_removed_and_divergence_then_ends_the_run() {
        let (mut hub, _reports) = hub();
        let policy = hub.divergence.clone();
        assert!(
            !policy.pauses(),
            "nobody watches: a divergence ends the run"
        );
        let (tx, rx) = mpsc::sync_channel(10);
        hub.handle(HubInput::Subscribe {
            viewer: 1,
            sink: Sink::Messages(tx),
        });
        assert!(policy.pauses(), "a viewer watches: pause");
        drop(rx);
        hub.handle(HubInput::Event(step(1)));
        assert_eq!(hub.stats().viewers(), 0);
        assert!(!policy.pauses());
    }
}
