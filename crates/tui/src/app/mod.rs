//! The workbench's state and how the run's messages and the user's actions change it. Nothing
//! here draws or reads the terminal: `ui.rs` renders an `&App`, `keys.rs` turns keys into
//! [`Action`]s. The run's history is a [`RunView`] (the same fold the run's hub keeps); the rest
//! is the viewer's own: focus, dialogs, search, the projections fetched for the scrub.

use std::collections::BTreeMap;
use std::sync::Arc;

mod controls;
mod loss_chart;
mod neighbors;
mod time_scrub;
mod workbench;

pub use controls::{controls_key, typing_key};
pub use neighbors::{neighbors_key, search_action};
pub use time_scrub::time_scrub_key;

use crate::neighbors::NeighborsState;
use conelab_core::analysis::EmbeddingAnalysis;
use conelab_core::events::{Command, Event, ProjectionFrame};
use conelab_core::objective::{LossKind, ObjectiveChange, Objectives, Term};
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

/// The part of the workbench an action belongs to, which applies it (gitui's components).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Focus, zoom, help, the dialogs, pause, checkpoint, the mouse.
    Workbench,
    /// The loss curve's scale and smoothing.
    LossChart,
    /// The Controls pane and the value typed into it.
    Controls,
    /// The Neighbours pane and its search.
    Neighbors,
    /// The snapshot the Embedding, Groups and Spectrum panes show, and the projection.
    TimeScrub,
}

impl Action {
    fn part(&self) -> Part {
        match self {
            Action::None
            | Action::Quit
            | Action::Detach
            | Action::StopAndSave
            | Action::StopWithoutSaving
            | Action::Cancel
            | Action::ToggleHelp
            | Action::HelpScroll(_)
            | Action::FocusNext
            | Action::FocusPrev
            | Action::Focus(_)
            | Action::ToggleZoom
            | Action::TogglePause
            | Action::SaveCheckpoint
            | Action::ToggleMouse => Part::Workbench,
            Action::ToggleLogY | Action::ToggleSmoothing | Action::Smoothing(_) => Part::LossChart,
            Action::ControlsUp
            | Action::ControlsDown
            | Action::ControlsToggle
            | Action::ControlsScale(_)
            | Action::ControlsType
            | Action::TypeInput(_)
            | Action::TypeBackspace
            | Action::TypeAccept
            | Action::TypeCancel => Part::Controls,
            Action::SearchStart
            | Action::SearchInput(_)
            | Action::SearchBackspace
            | Action::SearchMove(_)
            | Action::SearchAccept
            | Action::SearchCancel
            | Action::TogglePin => Part::Neighbors,
            Action::ToggleCentred | Action::Scrub(_) => Part::TimeScrub,
        }
    }
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
            // The compare view's default (TensorBoard's): one weight for one curve in both views.
            smoothing_off_from: crate::format::DEFAULT_SMOOTHING,
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

    /// Applies an action; returns what the caller must do. A dialog or the help, when open,
    /// answers first; then the part of the workbench the action belongs to.
    pub fn apply(&mut self, action: Action) -> Effect {
        if self.confirm_quit {
            return self.answer_quit_dialog(action);
        }
        if self.help
            && let Some(effect) = self.answer_help(&action)
        {
            return effect;
        }
        match action.part() {
            Part::Workbench => self.apply_workbench(action),
            Part::LossChart => self.apply_loss_chart(action),
            Part::Controls => self.apply_controls(action),
            Part::Neighbors => self.apply_neighbors(action),
            Part::TimeScrub => self.apply_time_scrub(action),
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
