//! The workbench's state and how the run's messages and the user's actions change it. Nothing
//! here draws or reads the terminal: `ui.rs` renders an `&App`, `keys.rs` turns keys into
//! [`Action`]s. The run's history is a [`RunView`] (the same fold the run's hub keeps); the rest
//! is the viewer's own: focus, dialogs, search, the projections fetched for the scrub.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::neighbors::NeighborsState;
use conelab_core::analysis::EmbeddingAnalysis;
use conelab_core::events::{Command, Event, ProjectionFrame};
use conelab_core::objective::{GateParts, LossKind, ObjectiveChange, Objectives, Term};
use conelab_data::Group;
use conelab_protocol::message::{CommandOutcome, RunHello, ServerMessage};
use conelab_protocol::view::{LogKind, RunStatus, RunView, Vocabulary};

/// The panes, in focus order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Progress,
    Groups,
    Scatter,
    Spectrum,
    Controls,
    Events,
    Neighbors,
    /// μ_z, σ_z and the entropy–log Z histogram of the newest evaluation.
    SelfNorm,
}

impl Pane {
    pub const ALL: [Pane; 8] = [
        Pane::Progress,
        Pane::Groups,
        Pane::Scatter,
        Pane::Spectrum,
        Pane::Controls,
        Pane::Events,
        Pane::Neighbors,
        Pane::SelfNorm,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Pane::Progress => "1 Progress",
            Pane::Groups => "2 Groups",
            Pane::Scatter => "3 Embedding",
            Pane::Spectrum => "4 Spectrum",
            Pane::Controls => "5 Controls",
            Pane::Events => "6 Events",
            Pane::Neighbors => "7 Neighbours",
            Pane::SelfNorm => "8 Self-norm",
        }
    }
}

/// What the user asked for (from `keys.rs`).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    None,
    /// `q` or Ctrl-C: ask (detach, stop and save, stop, cancel) while the run is live; leave
    /// otherwise.
    Quit,
    /// `d`, or `d` in the quit dialog: leave, training goes on.
    Detach,
    /// The answers of the quit dialog.
    StopAndSave,
    StopWithoutSaving,
    Cancel,
    ToggleHelp,
    /// ↑/↓ (PgUp/PgDn) while the help is open: scroll it.
    HelpScroll(i32),
    FocusNext,
    FocusPrev,
    Focus(Pane),
    ToggleZoom,
    TogglePause,
    SaveCheckpoint,
    ToggleLogY,
    ToggleSmoothing,
    /// `+`/`-` outside Controls, `0`: the smoothing weight by this much (clamped to 0 ..= 0.99).
    Smoothing(f64),
    /// Capture the mouse or leave it to the terminal (text selection).
    ToggleMouse,
    ControlsUp,
    ControlsDown,
    /// Space/Enter on the selected control.
    ControlsToggle,
    /// `+`/`-`: weight ×2 or ÷2 (learning rate likewise), from the value the run acknowledged.
    ControlsScale(f64),
    /// `=` on a value line: type the new value.
    ControlsType,
    TypeInput(char),
    TypeBackspace,
    /// Enter: send the typed value.
    TypeAccept,
    /// Esc: forget it.
    TypeCancel,
    /// `/`: focus the neighbour pane and type a word.
    SearchStart,
    SearchInput(char),
    SearchBackspace,
    /// ↑/↓ among the matches.
    SearchMove(i32),
    /// Enter: look up the highlighted match.
    SearchAccept,
    SearchCancel,
    /// `w`: watch (pin) the selected word, or stop watching it.
    TogglePin,
    /// `c` in the embedding pane: uncentred (the cone visible) / centred (PCA) projection.
    ToggleCentred,
    /// `[` / `]` in the embedding pane: an older / newer snapshot (newer than the newest: live).
    Scrub(i32),
}

/// Projections kept in memory for the time scrub (the run keeps every one; the viewer asks).
const CACHED_FRAMES: usize = 16;

/// Something only the run can answer, to ask it (the viewer's loop turns these into messages).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// The projections of the snapshot at a step (`None`: the newest).
    Projection(Option<u64>),
    /// The neighbours of these words in the newest snapshot.
    Neighbors(Vec<u32>),
    Vocabulary,
}

/// What an action needs from the outside world.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Send(Command),
    /// Several commands, in this order (they reach the run between the same two steps).
    SendAll(Vec<Command>),
    /// Leave; the run goes on (or is over).
    Exit,
    /// Leave a live run: it goes on; say how to come back.
    Detach,
}

/// One line of the controls pane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Term(Term),
    Freeze(Group),
    GateFreeze,
    Pause,
    Checkpoint,
    LearningRate,
    /// The data term: `+`/`-` choose among mle → nce → nce-r → and → and:squash, Enter applies.
    Loss,
}

impl Control {
    pub const ALL: [Control; 14] = [
        Control::Term(Term::Cos),
        Control::Term(Term::Lap),
        Control::Term(Term::Agg),
        Control::Term(Term::Spectrum),
        Control::Term(Term::Dev),
        Control::Term(Term::Ul),
        Control::Freeze(Group::Frequent),
        Control::Freeze(Group::Medium),
        Control::Freeze(Group::Rare),
        Control::GateFreeze,
        Control::Pause,
        Control::Checkpoint,
        Control::LearningRate,
        Control::Loss,
    ];

    pub fn count() -> usize {
        Self::ALL.len()
    }
}

/// A data term as the loss line offers it: mle → nce → nce-r → and → and:squash → mle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossChoice {
    pub kind: LossKind,
    /// AND on squashed scores (only meaningful with `LossKind::And`).
    pub squash: bool,
}

impl LossChoice {
    const CYCLE: [LossChoice; 5] = [
        LossChoice::plain(LossKind::Mle),
        LossChoice::plain(LossKind::Nce),
        LossChoice::plain(LossKind::NceR),
        LossChoice::plain(LossKind::And),
        LossChoice {
            kind: LossKind::And,
            squash: true,
        },
    ];

    const fn plain(kind: LossKind) -> Self {
        Self {
            kind,
            squash: false,
        }
    }

    /// The data term in force.
    pub fn of(objectives: &Objectives) -> Self {
        Self {
            kind: objectives.loss,
            squash: objectives.squashed_scores(),
        }
    }

    fn position(self) -> usize {
        Self::CYCLE.iter().position(|c| *c == self).unwrap_or(0)
    }

    pub fn next(self) -> Self {
        Self::CYCLE[(self.position() + 1) % Self::CYCLE.len()]
    }

    pub fn previous(self) -> Self {
        let n = Self::CYCLE.len();
        Self::CYCLE[(self.position() + n - 1) % n]
    }

    /// As `--objective` spells it.
    pub fn name(self) -> String {
        let squash = if self.squash { ":squash" } else { "" };
        format!("{}{squash}", self.kind.name())
    }
}

/// Display settings that do not come from the engine.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ViewOptions {
    pub no_color: bool,
    pub ascii: bool,
    /// Leave the mouse to the terminal from the start (`--no-mouse`): text can be selected over
    /// SSH; `M` switches capture on and off.
    pub no_mouse: bool,
    /// Colours for a light background (`--theme light`).
    pub light: bool,
    /// The terminal draws 24-bit colour (`COLORTERM=truecolor`): the compare view's runs get
    /// the Okabe–Ito palette, safe for colour-blind readers, instead of the 16 ANSI colours.
    pub true_color: bool,
}

#[derive(Debug, Clone)]
pub struct App {
    /// The run's history and state, as its hub sent it and its events since.
    pub run: RunView,
    /// What the run said about itself when the viewer attached.
    pub hello: Option<RunHello>,
    /// Why the run takes no commands (a run that is over), shown in the Controls pane.
    pub read_only: Option<String>,
    /// An attached viewer that has not yet had the run's history: its header says so, not the
    /// empty view's "starting" (a finished run's store takes a moment to read).
    pub awaiting_history: bool,
    /// The connection to the run is gone (its process ended).
    pub connection_lost: bool,
    /// The run this viewer watched live has just ended, diverged or failed: ring the bell.
    pub bell: bool,
    /// A local analysis (the browser, tests): neighbours and projections from it, not asked for.
    pub analysis: Option<Arc<EmbeddingAnalysis>>,
    /// Another spectrum to draw against the current one (`--compare`), labelled.
    pub spectrum_reference: Option<(String, Vec<f64>)>,
    pub focus: Pane,
    pub zoom: bool,
    pub help: bool,
    /// Lines of the help scrolled past (a terminal too short for all of it).
    pub help_scroll: u16,
    pub confirm_quit: bool,
    /// Leave once the run has finished (after a stop from the quit dialog).
    pub exit_when_finished: bool,
    pub log_y: bool,
    /// The loss curve's smoothing weight (TensorBoard's, as `compare` has it): 0 is raw.
    pub smoothing: f64,
    /// The weight `m` turns smoothing back on with.
    pub smoothing_off_from: f64,
    pub controls_cursor: usize,
    pub view: ViewOptions,
    /// The run's vocabulary (for the neighbour search), when known.
    pub vocab: Option<Arc<Vocabulary>>,
    pub neighbors: NeighborsState,
    /// Projections fetched for the scrub, by step (bounded).
    pub frames: BTreeMap<u64, Arc<ProjectionFrame>>,
    /// Index into `run.projection_steps` while scrubbing; `None` follows the newest snapshot.
    pub scrub: Option<usize>,
    pub centred: bool,
    /// The workbench captures the mouse (clicks focus panes, the wheel scrolls); off, the
    /// terminal has it and text can be selected.
    pub mouse: bool,
    /// The data term chosen on the Controls pane's loss line with `+`/`-` and not yet applied
    /// (Enter applies it): a loss switch is not a toggle, so passing through nce on the way to
    /// and:squash must not train with it.
    pub pending_loss: Option<LossChoice>,
    /// A value sent to the run and not acknowledged yet (shown "pending" on its line until the
    /// run's answer or its event comes).
    pub pending: Option<(Control, f64)>,
    /// `=` on a value line: the number being typed, for that line.
    pub typing: Option<(Control, String)>,
    /// Requests for the run, taken by the viewer's loop.
    outbox: Vec<Request>,
}

/// The most characters a typed value may have (a weight or lr written out in full fits).
const MAX_TYPED: usize = 64;

impl App {
    pub fn new(objectives: Objectives, view: ViewOptions) -> Self {
        Self {
            run: RunView::new(objectives),
            hello: None,
            read_only: None,
            awaiting_history: false,
            connection_lost: false,
            bell: false,
            analysis: None,
            spectrum_reference: None,
            focus: Pane::Progress,
            zoom: false,
            help: false,
            help_scroll: 0,
            confirm_quit: false,
            exit_when_finished: false,
            log_y: false,
            smoothing: 0.0,
            smoothing_off_from: 0.9,
            controls_cursor: 0,
            view,
            vocab: None,
            neighbors: NeighborsState::default(),
            frames: BTreeMap::new(),
            scrub: None,
            centred: false,
            mouse: !view.no_mouse,
            pending_loss: None,
            pending: None,
            typing: None,
            outbox: Vec::new(),
        }
    }

    pub fn with_vocabulary(mut self, vocab: Arc<Vocabulary>) -> Self {
        self.vocab = Some(vocab);
        self
    }

    pub fn step(&self) -> u64 {
        self.run.step()
    }

    /// The requests gathered since the last call.
    pub fn take_requests(&mut self) -> Vec<Request> {
        std::mem::take(&mut self.outbox)
    }

    fn ask(&mut self, r: Request) {
        if !self.outbox.contains(&r) {
            self.outbox.push(r);
        }
    }

    fn run_was_watched_live(&self) -> bool {
        matches!(
            self.run.status,
            RunStatus::Running | RunStatus::Paused | RunStatus::Stopping
        )
    }

    /// Folds one engine event into the state.
    pub fn on_event(&mut self, event: Event) {
        let was_live = self.run_was_watched_live();
        self.run.on_event(&event);
        // A run watched while it trained ends (or waits after a divergence): say so with the
        // bell; attaching to one that has ended already rings nothing.
        self.bell |= was_live && !self.run_was_watched_live();
        // The answer to what this line sent (another viewer's change of another line leaves
        // it pending).
        let answered = match &event {
            Event::Applied(a) => Some(&a.command),
            Event::Rejected { command, .. } => Some(command),
            _ => None,
        };
        if let (Some(command), Some((control, _))) = (answered, self.pending)
            && command_of(control) == command_kind(command)
        {
            self.pending = None;
        }
        if let Event::Embedding(e) = &event
            && self.analysis.is_none()
        {
            // A new snapshot: its projections, and the watched words' neighbours in it.
            self.ask(Request::Projection(Some(e.step)));
            self.ask_neighbors();
        }
    }

    /// Folds one message of the run into the state.
    pub fn on_message(&mut self, message: ServerMessage) {
        match message {
            ServerMessage::Hello { run, .. } => self.hello = Some(run),
            ServerMessage::History { view } => {
                self.awaiting_history = false;
                self.run = *view;
                self.scrub = None;
                if let Some(&newest) = self.run.projection_steps.last() {
                    self.ask(Request::Projection(Some(newest)));
                }
                self.ask_neighbors();
            }
            ServerMessage::Event { event } => self.on_event(event),
            ServerMessage::Gap { dropped } => {
                let step = self.step();
                self.run.log(
                    step,
                    LogKind::Warning,
                    format!("this viewer fell behind: {dropped} updates skipped, history reloaded"),
                );
            }
            ServerMessage::CommandResult { result, .. } => {
                // Every viewer sees the applied change (or the refusal) as an event; the answer
                // to this viewer's own change ends its pending state (a refusal before the
                // engine — the run busy — comes only here).
                let ours = match &result {
                    CommandOutcome::Applied { applied } => self
                        .pending
                        .is_some_and(|(c, _)| command_of(c) == command_kind(&applied.command)),
                    CommandOutcome::Rejected { .. } => true,
                };
                if ours {
                    self.pending = None;
                }
            }
            ServerMessage::Projection { frame, .. } => {
                if let Some(f) = frame {
                    self.add_frame(Arc::new(f));
                }
            }
            ServerMessage::Neighbors { step, results, .. } => {
                self.neighbors.set_results(step, results);
            }
            ServerMessage::Vocabulary { tokens, counts, .. } => {
                self.vocab = Some(Arc::new(Vocabulary { tokens, counts }));
            }
            ServerMessage::Labels { labels, .. } => {
                if let Some(hello) = &mut self.hello {
                    hello.labels = labels;
                }
            }
            ServerMessage::Error { message, .. } => {
                let step = self.step();
                self.run
                    .log(step, LogKind::Warning, format!("run: {message}"));
            }
        }
    }

    /// What the header calls the run: its name (else its folder's) and its tags.
    pub fn run_title(&self) -> String {
        let labels = self.hello.as_ref().map(|h| &h.labels);
        let name = labels
            .and_then(|l| l.name.clone())
            .unwrap_or_else(|| self.run.info.name.clone());
        let tags: String = labels
            .map(|l| l.tags.iter().map(|t| format!(" #{t}")).collect())
            .unwrap_or_default();
        format!("{name}{tags}")
    }

    /// The connection to the run is gone.
    pub fn on_disconnect(&mut self) {
        if self.connection_lost {
            return;
        }
        self.connection_lost = true;
        // A run that ended as the connection went (its last events not read yet) says how in
        // its folder's final record.
        let ended = self.hello.as_ref().and_then(|h| {
            conelab_core::run_dir::live::read_final(&h.dir)
                .ok()
                .flatten()
        });
        if self.run.status.is_live()
            && let Some(f) = ended
        {
            self.run.status = conelab_protocol::view::status_of(&f);
            let text = match &self.run.status {
                RunStatus::Failed { message } => format!("failed: {message}"),
                _ => conelab_protocol::view::ended_at(&f),
            };
            self.run.log(f.step, LogKind::Info, text);
        } else if self.run.status.is_live() {
            let step = self.step();
            self.run.log(
                step,
                LogKind::Error,
                "the connection to the run was lost: its process ended without a final word (see its output.log; `conelab runs` tells its state)".into(),
            );
            self.run.status = RunStatus::Crashed;
        }
        self.read_only
            .get_or_insert_with(|| "read-only: the run's process is gone".into());
    }

    fn ask_neighbors(&mut self) {
        let watched = self.neighbors.watched();
        if !watched.is_empty() && self.analysis.is_none() {
            self.ask(Request::Neighbors(watched));
        }
    }

    fn add_frame(&mut self, frame: Arc<ProjectionFrame>) {
        if !self.run.projection_steps.contains(&frame.step) {
            let at = self
                .run
                .projection_steps
                .partition_point(|s| *s < frame.step);
            self.run.projection_steps.insert(at, frame.step);
        }
        self.frames.insert(frame.step, frame);
        // Keep the shown one and the newest; drop the ones farthest from what is shown.
        while self.frames.len() > CACHED_FRAMES {
            let shown = self.shown_step().unwrap_or(u64::MAX);
            let newest = self.run.projection_steps.last().copied();
            let far = self
                .frames
                .keys()
                .copied()
                .filter(|s| Some(*s) != newest && *s != shown)
                .max_by_key(|s| s.abs_diff(shown));
            match far {
                Some(s) => {
                    self.frames.remove(&s);
                }
                None => break,
            }
        }
    }

    /// A new embedding analysis computed here (the browser): its projections and neighbours.
    pub fn on_analysis(&mut self, analysis: Arc<EmbeddingAnalysis>) {
        if self.run.first_spectrum.is_none() {
            self.run.first_spectrum = Some(analysis.panel.total.sv_norm.clone());
        }
        self.neighbors.refresh(Some(&analysis));
        self.add_frame(Arc::new(analysis.frame()));
        self.analysis = Some(analysis);
    }

    /// The step of the snapshot the embedding pane shows.
    pub fn shown_step(&self) -> Option<u64> {
        let steps = &self.run.projection_steps;
        match self.scrub {
            Some(i) => steps.get(i).copied(),
            None => steps.last().copied(),
        }
    }

    /// The projections the embedding pane shows: the scrubbed snapshot's, or the newest; while a
    /// scrubbed one is on its way, the nearest one at hand.
    pub fn scatter_frame(&self) -> Option<&ProjectionFrame> {
        let step = self.shown_step()?;
        if let Some(f) = self.frames.get(&step) {
            return Some(f);
        }
        self.frames
            .iter()
            .min_by_key(|(s, _)| s.abs_diff(step))
            .map(|(_, f)| f.as_ref())
    }

    /// Whether the run takes commands from this viewer.
    pub fn controllable(&self) -> bool {
        self.read_only.is_none() && !self.connection_lost
    }

    /// Applies an action; returns what the caller must do.
    pub fn apply(&mut self, action: Action) -> Effect {
        if self.confirm_quit {
            return match action {
                Action::StopAndSave | Action::StopWithoutSaving => {
                    self.confirm_quit = false;
                    self.exit_when_finished = true;
                    self.run.status = RunStatus::Stopping;
                    Effect::Send(Command::Stop {
                        save: action == Action::StopAndSave,
                    })
                }
                Action::Detach => {
                    self.confirm_quit = false;
                    Effect::Detach
                }
                Action::Cancel | Action::Quit => {
                    self.confirm_quit = false;
                    Effect::None
                }
                _ => Effect::None,
            };
        }
        if self.help
            && let Action::HelpScroll(d) = action
        {
            // Bounded by the help's length (the overlay clamps it to what it shows).
            let most = crate::keys::HELP.len() as i64 * 3;
            self.help_scroll = (self.help_scroll as i64 + d as i64).clamp(0, most) as u16;
            return Effect::None;
        }
        if self.help && !matches!(action, Action::Quit | Action::None) {
            self.help = false;
            if action == Action::ToggleHelp || action == Action::Cancel {
                return Effect::None;
            }
        }
        match action {
            Action::None | Action::StopAndSave | Action::StopWithoutSaving | Action::Cancel => {
                if action == Action::Cancel {
                    self.zoom = false;
                }
                Effect::None
            }
            Action::Quit => {
                if self.controllable() && self.run.status.is_live() {
                    self.confirm_quit = true;
                    Effect::None
                } else {
                    Effect::Exit
                }
            }
            Action::Detach => {
                if self.controllable() && self.run.status.is_live() {
                    Effect::Detach
                } else {
                    Effect::Exit
                }
            }
            Action::ToggleHelp => {
                self.help = true;
                self.help_scroll = 0;
                Effect::None
            }
            Action::HelpScroll(_) => Effect::None,
            Action::FocusNext | Action::FocusPrev => {
                let i = Pane::ALL.iter().position(|p| *p == self.focus).unwrap_or(0);
                let n = Pane::ALL.len();
                let next = if action == Action::FocusNext {
                    (i + 1) % n
                } else {
                    (i + n - 1) % n
                };
                self.focus = Pane::ALL[next];
                Effect::None
            }
            Action::Focus(p) => {
                self.focus = p;
                Effect::None
            }
            Action::ToggleZoom => {
                self.zoom = !self.zoom;
                Effect::None
            }
            Action::TogglePause => self.pause_command(),
            Action::SaveCheckpoint => self.live_command(Command::SaveCheckpoint),
            Action::ToggleLogY => {
                self.log_y = !self.log_y;
                Effect::None
            }
            Action::ToggleSmoothing => {
                if self.smoothing > 0.0 {
                    self.smoothing_off_from = self.smoothing;
                    self.smoothing = 0.0;
                } else {
                    self.smoothing = self.smoothing_off_from;
                }
                Effect::None
            }
            Action::Smoothing(d) => {
                // Rounded to the key's step, so + then - comes back to the same weight.
                let w = ((self.smoothing + d) * 100.0).round() / 100.0;
                let w = w.clamp(0.0, crate::compare::MAX_SMOOTHING);
                if w == 0.0 && self.smoothing > 0.0 {
                    // `m` brings back the weight it had.
                    self.smoothing_off_from = self.smoothing;
                }
                self.smoothing = w;
                Effect::None
            }
            Action::ToggleMouse => {
                self.mouse = !self.mouse;
                let step = self.step();
                let line = if self.mouse {
                    "mouse on: click focuses a pane, the wheel scrolls (M: off, to select text)"
                } else {
                    "mouse off: the terminal selects text (M: on again)"
                };
                self.run.log(step, LogKind::Info, line.into());
                Effect::None
            }
            Action::ControlsUp => {
                self.pending_loss = None;
                let n = Control::count();
                self.controls_cursor = (self.controls_cursor + n - 1) % n;
                Effect::None
            }
            Action::ControlsDown => {
                self.pending_loss = None;
                self.controls_cursor = (self.controls_cursor + 1) % Control::count();
                Effect::None
            }
            Action::ControlsToggle => self.toggle_control(),
            Action::ControlsScale(factor) => self.scale_control(factor),
            Action::ControlsType => {
                let control = self.selected_control();
                if self.value_of(control).is_some() && self.controllable() {
                    self.typing = Some((control, String::new()));
                }
                Effect::None
            }
            Action::TypeInput(c) => {
                if let Some((_, text)) = &mut self.typing {
                    let numeric = c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+');
                    if numeric && text.len() < MAX_TYPED {
                        text.push(c);
                    } else {
                        // Said, not silently dropped: a cut-off "0.000…1" would be sent as 0.
                        let step = self.step();
                        self.run.log(
                            step,
                            LogKind::Warning,
                            format!(
                                "{c:?} not taken: a number is digits, '.', 'e', '+' and '-', at most {MAX_TYPED} of them"
                            ),
                        );
                    }
                }
                Effect::None
            }
            Action::TypeBackspace => {
                if let Some((_, text)) = &mut self.typing {
                    text.pop();
                }
                Effect::None
            }
            Action::TypeCancel => {
                self.typing = None;
                Effect::None
            }
            Action::TypeAccept => match self.typing.take() {
                Some((control, text)) => match text.trim().parse::<f64>() {
                    Ok(v) if v.is_finite() && v >= 0.0 => self.set_value(control, v),
                    _ => {
                        let step = self.step();
                        self.run.log(
                            step,
                            LogKind::Warning,
                            format!("{text:?}: not a finite number ≥ 0; nothing sent"),
                        );
                        Effect::None
                    }
                },
                None => Effect::None,
            },
            Action::SearchStart => {
                self.focus = Pane::Neighbors;
                self.neighbors.start_search();
                Effect::None
            }
            Action::SearchInput(c) => {
                if let Some(v) = &self.vocab {
                    self.neighbors.input(c, v);
                }
                Effect::None
            }
            Action::SearchBackspace => {
                if let Some(v) = &self.vocab {
                    self.neighbors.backspace(v);
                }
                Effect::None
            }
            Action::SearchMove(d) => {
                self.neighbors.move_cursor(d);
                Effect::None
            }
            Action::SearchAccept => {
                self.neighbors.accept(self.analysis.as_deref());
                self.ask_neighbors();
                Effect::None
            }
            Action::SearchCancel => {
                self.neighbors.cancel();
                Effect::None
            }
            Action::TogglePin => {
                self.neighbors.toggle_pin(self.analysis.as_deref());
                self.ask_neighbors();
                Effect::None
            }
            Action::ToggleCentred => {
                self.centred = !self.centred;
                Effect::None
            }
            Action::Scrub(delta) => {
                let n = self.run.projection_steps.len();
                if n > 0 {
                    let at = self.scrub.unwrap_or(n - 1) as i64 + delta as i64;
                    // Past the newest snapshot: follow the live one again.
                    self.scrub = if at >= n as i64 - 1 && delta > 0 {
                        None
                    } else {
                        Some(at.clamp(0, n as i64 - 1) as usize)
                    };
                    if let Some(step) = self.shown_step()
                        && !self.frames.contains_key(&step)
                        && self.analysis.is_none()
                    {
                        self.ask(Request::Projection(Some(step)));
                    }
                }
                Effect::None
            }
        }
    }

    /// A command only makes sense while the run lives and takes commands from here.
    fn live_command(&self, command: Command) -> Effect {
        if self.controllable()
            && self.run.status.is_live()
            && self.run.status != RunStatus::Stopping
        {
            Effect::Send(command)
        } else {
            Effect::None
        }
    }

    fn pause_command(&self) -> Effect {
        match self.run.status {
            RunStatus::Paused | RunStatus::Diverged { .. } => self.live_command(Command::Resume),
            _ => self.live_command(Command::Pause),
        }
    }

    pub fn selected_control(&self) -> Control {
        Control::ALL[self.controls_cursor.min(Control::count() - 1)]
    }

    fn toggle_control(&mut self) -> Effect {
        if self.selected_control() == Control::Term(Term::Agg)
            && let Some(effect) = self.agg_on_scaled()
        {
            return effect;
        }
        let change = match self.selected_control() {
            Control::Term(term) => ObjectiveChange::Enable {
                term,
                on: !self.run.objectives.term(term).0,
            },
            Control::Freeze(group) => ObjectiveChange::Freeze {
                group,
                frozen: !self.run.objectives.freeze.is_frozen(group),
            },
            Control::GateFreeze => ObjectiveChange::GateFreeze {
                parts: match self.run.objectives.gate_freeze {
                    GateParts::None => GateParts::B,
                    GateParts::B => GateParts::C,
                    GateParts::C => GateParts::Bc,
                    GateParts::Bc => GateParts::None,
                },
            },
            Control::Pause => return self.pause_command(),
            Control::Checkpoint => return self.live_command(Command::SaveCheckpoint),
            Control::LearningRate => return Effect::None,
            Control::Loss => match self.pending_loss.take() {
                Some(LossChoice { kind, squash }) => ObjectiveChange::Loss { kind, squash },
                None => return Effect::None,
            },
        };
        self.live_command(Command::Objective { change })
    }

    /// AGG switched on from the Controls with the paper's α (0.03 occurrences per update at
    /// 32,768 tokens per update) on a run of another size: α scaled to this run's tokens per
    /// update, so that about the paper's share of the vocabulary counts as rare (at `tiny`'s
    /// 1,024 the paper's α made 4,737 of 5,002 tokens rare). Said in the Events; the rare set's
    /// size shows in Progress from the next step. `None`: nothing to scale.
    fn agg_on_scaled(&mut self) -> Option<Effect> {
        let (on, alpha) = self.run.objectives.term(Term::Agg);
        let tokens = self.run.info.tokens_per_update;
        let paper = conelab_core::objective::AggConfig::default().alpha;
        if on || alpha != paper || tokens == 0 || tokens == PAPER_TOKENS_PER_UPDATE {
            return None;
        }
        let scaled = paper * tokens as f64 / PAPER_TOKENS_PER_UPDATE as f64;
        let effect = self.live_command(Command::Objective {
            change: ObjectiveChange::Enable {
                term: Term::Agg,
                on: true,
            },
        });
        let Effect::Send(enable) = effect else {
            return Some(effect);
        };
        let step = self.step();
        self.run.log(
            step,
            LogKind::Info,
            format!(
                "AGG on with α = {} (the paper's 0.03 at 32,768 tokens per update, scaled to this run's {tokens}); the rare set's size shows in Progress",
                conelab_widgets::format_compact(scaled)
            ),
        );
        self.pending = Some((Control::Term(Term::Agg), scaled));
        Some(Effect::SendAll(vec![
            enable,
            Command::Objective {
                change: ObjectiveChange::Weight {
                    term: Term::Agg,
                    weight: scaled,
                },
            },
        ]))
    }

    /// The value a line adjusts, as the run acknowledged it (a weight, the learning rate);
    /// `None` for a line without one.
    pub fn value_of(&self, control: Control) -> Option<f64> {
        match control {
            Control::Term(term) => Some(self.run.objectives.term(term).1),
            Control::LearningRate => self.run.lr,
            _ => None,
        }
    }

    /// Sends `value` for a value line, unless it changes nothing: the value in force already,
    /// or the weight of a term that is off (it would be recorded nowhere; switch it on first).
    fn set_value(&mut self, control: Control, value: f64) -> Effect {
        let Some(current) = self.value_of(control) else {
            return Effect::None;
        };
        if value == current {
            return Effect::None;
        }
        let command = match control {
            Control::Term(term) => {
                if !self.run.objectives.term(term).0 {
                    let step = self.step();
                    self.run.log(
                        step,
                        LogKind::Info,
                        format!(
                            "{} is off: switch it on (Space) to change its weight",
                            term.name()
                        ),
                    );
                    return Effect::None;
                }
                Command::Objective {
                    change: ObjectiveChange::Weight {
                        term,
                        weight: value,
                    },
                }
            }
            Control::LearningRate => Command::SetLr { lr: value },
            _ => return Effect::None,
        };
        let effect = self.live_command(command);
        if matches!(effect, Effect::Send(_)) {
            self.pending = Some((control, value));
        }
        effect
    }

    fn scale_control(&mut self, factor: f64) -> Effect {
        let control = self.selected_control();
        match control {
            Control::Term(_) | Control::LearningRate => match self.value_of(control) {
                Some(v) => self.set_value(control, v * factor),
                None => Effect::None,
            },
            Control::Loss => {
                let current = LossChoice::of(&self.run.objectives);
                let from = self.pending_loss.unwrap_or(current);
                let to = if factor > 1.0 {
                    from.next()
                } else {
                    from.previous()
                };
                self.pending_loss = (to != current).then_some(to);
                Effect::None
            }
            _ => Effect::None,
        }
    }

    /// The app should end now (the run finished after a stop the user asked for).
    pub fn should_exit(&self) -> bool {
        self.exit_when_finished && (!self.run.status.is_live() || self.connection_lost)
    }

    /// Seconds left: the steps left at the smoothed step time, plus the evaluations left (the
    /// validation passes due, the final test pass, the rest of one under way) at the measured
    /// time of the last one. `None` while the run is not running (paused time is not training
    /// time: the ETA does not count down through it).
    pub fn eta_seconds(&self) -> Option<f64> {
        if self.run.status != RunStatus::Running && self.run.status != RunStatus::Stopping {
            return None;
        }
        let step = self.run.step();
        let total = self.run.info.total_steps;
        let step_s = self.run.step_ms_smoothed? / 1e3;
        let steps = total.saturating_sub(step) as f64 * step_s;
        // An evaluation's time: the last one measured (before any: none counted).
        let eval_s = self.run.last_eval.as_ref().map_or(0.0, |e| e.seconds);
        let every = self.run.info.eval_every;
        let mut passes = match (total.checked_div(every), step.checked_div(every)) {
            (Some(due), Some(done)) => due.saturating_sub(done) as f64,
            _ => 0.0,
        };
        if every == 0 || !total.is_multiple_of(every) {
            passes += 1.0; // the final validation pass
        }
        passes += 1.0; // the final test pass (about the validation split's size)
        let current = self
            .run
            .evaluating
            .as_ref()
            .map_or(0.0, |e| (1.0 - e.fraction()) * eval_s);
        Some(steps + passes * eval_s + current)
    }

    /// A metric's history for a group (0..3) or the total (3).
    pub fn embedding_metric(&self, metric: EmbeddingMetric, group: usize) -> Vec<f64> {
        let g = group.min(3);
        self.run
            .embedding
            .iter()
            .map(|e| match metric {
                EmbeddingMetric::I1 => e.i1[g],
                EmbeddingMetric::I2 => e.i2[g],
                EmbeddingMetric::MeanCos => e.mean_cos[g],
                EmbeddingMetric::MeanNorm => e.mean_norm[g],
                EmbeddingMetric::I1Unit => e.i1_unit[g],
                EmbeddingMetric::I2Unit => e.i2_unit[g],
                EmbeddingMetric::IsoScore => e.isoscore[g],
            })
            .collect()
    }

    /// Index into the embedding history of the last snapshot taken before the last intervention
    /// took effect: "the change since the intervention" is measured from there.
    pub fn since_intervention(&self) -> Option<usize> {
        self.run.since_intervention()
    }
}

/// Yu et al.'s batch: AGG's α = 0.03 is for 32,768 target tokens per update.
const PAPER_TOKENS_PER_UPDATE: u64 = 32_768;

/// Which value line a command changes (for matching an answer to what is pending).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Lr,
    Weight(Term),
    Other,
}

fn command_of(control: Control) -> ValueKind {
    match control {
        Control::LearningRate => ValueKind::Lr,
        Control::Term(t) => ValueKind::Weight(t),
        _ => ValueKind::Other,
    }
}

fn command_kind(command: &Command) -> ValueKind {
    match command {
        Command::SetLr { .. } => ValueKind::Lr,
        Command::Objective {
            change: ObjectiveChange::Weight { term, .. },
        } => ValueKind::Weight(*term),
        _ => ValueKind::Other,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingMetric {
    I1,
    I2,
    MeanCos,
    MeanNorm,
    /// I1 of the row-normalised matrix.
    I1Unit,
    I2Unit,
    IsoScore,
}
