//! The workbench's state and how engine events and user actions change it. Nothing here draws or
//! reads the terminal: `ui.rs` renders an `&App`, `keys.rs` turns keys into [`Action`]s.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use super::neighbors::{NeighborsState, Vocabulary};
use crate::data::Group;
use crate::engine::analysis::{EmbeddingAnalysis, EmbeddingStats};
use crate::engine::{Command, EvalStats, Event, FinishReason, StepStats};
use crate::objective::{GateParts, ObjectiveChange, Objectives, Term};

/// Events kept in the log pane.
const LOG_LINES: usize = 500;
/// Points kept per curve; older halves are decimated (every other point) when it fills.
const CURVE_POINTS: usize = 4_000;

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

/// Where the run stands.
#[derive(Debug, Clone, PartialEq)]
pub enum RunStatus {
    Starting,
    Running,
    Paused,
    /// A stop was requested; waiting for the engine to finish.
    Stopping,
    Finished(FinishReason),
    Diverged {
        step: u64,
        loss: f64,
    },
    Failed(String),
}

impl RunStatus {
    /// The engine thread is still there (training, paused, or paused after a divergence).
    pub fn is_live(&self) -> bool {
        matches!(
            self,
            RunStatus::Starting
                | RunStatus::Running
                | RunStatus::Paused
                | RunStatus::Stopping
                | RunStatus::Diverged { .. }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    Info,
    Intervention,
    Eval,
    Checkpoint,
    Warning,
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub step: u64,
    pub kind: LogKind,
    pub text: String,
}

/// What the user asked for (from `keys.rs`).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    None,
    /// `q`: ask before stopping a live run, leave a finished one.
    Quit,
    /// The answer to the quit dialog.
    StopAndSave,
    StopWithoutSaving,
    Cancel,
    /// Ctrl-C: stop and save without asking, then leave.
    Interrupt,
    ToggleHelp,
    FocusNext,
    FocusPrev,
    Focus(Pane),
    ToggleZoom,
    TogglePause,
    SaveCheckpoint,
    ToggleLogY,
    ToggleSmoothing,
    ControlsUp,
    ControlsDown,
    /// Space/Enter on the selected control.
    ControlsToggle,
    /// `+`/`-`: weight ×2 or ÷2 (learning rate likewise).
    ControlsScale(f64),
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

/// The 2-D projections of one snapshot, kept for the time scrub.
#[derive(Debug, Clone)]
pub struct ScatterFrame {
    pub step: u64,
    pub uncentred: Option<crate::metrics::embedding::Projection>,
    pub centred: Option<crate::metrics::embedding::Projection>,
}

/// Snapshots kept for the scrub; older halves are thinned when it fills.
const SCATTER_FRAMES: usize = 120;

/// What an action needs from the outside world.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    None,
    Send(Command),
    Exit,
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
}

impl Control {
    pub const ALL: [Control; 13] = [
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
    ];

    pub fn count() -> usize {
        Self::ALL.len()
    }
}

/// Static facts about the run, from the `Started` event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInfo {
    pub name: String,
    pub device: String,
    pub total_steps: u64,
    pub windows_per_epoch: u64,
    pub parameters: usize,
    pub run_dir: Option<PathBuf>,
}

/// Display settings that do not come from the engine.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ViewOptions {
    pub no_color: bool,
    pub ascii: bool,
}

#[derive(Debug, Clone)]
pub struct App {
    pub info: RunInfo,
    pub status: RunStatus,
    pub last_step: Option<StepStats>,
    /// (step, training loss).
    pub loss: Vec<(f64, f64)>,
    /// (step, validation loss).
    pub valid_loss: Vec<(f64, f64)>,
    pub last_eval: Option<EvalStats>,
    pub embedding: Vec<EmbeddingStats>,
    pub analysis: Option<Arc<EmbeddingAnalysis>>,
    /// The normalised spectrum of the first analysis, to compare against.
    pub first_spectrum: Option<Vec<f64>>,
    /// Another spectrum to draw against the current one (the browser's `--compare`), labelled.
    pub spectrum_reference: Option<(String, Vec<f64>)>,
    pub objectives: Objectives,
    pub lr: Option<f64>,
    /// Steps at which an intervention (objective change, lr, freeze) took effect.
    pub interventions: Vec<u64>,
    pub log: VecDeque<LogLine>,
    pub focus: Pane,
    pub zoom: bool,
    pub help: bool,
    pub confirm_quit: bool,
    /// Leave once the engine has finished (after a stop from the quit dialog or Ctrl-C).
    pub exit_when_finished: bool,
    pub log_y: bool,
    pub smoothing: bool,
    pub controls_cursor: usize,
    pub view: ViewOptions,
    /// The run's vocabulary (for the neighbour search), when known.
    pub vocab: Option<Arc<Vocabulary>>,
    pub neighbors: NeighborsState,
    /// Every analysed snapshot's projections (thinned), for the time scrub.
    pub scatter_frames: Vec<ScatterFrame>,
    /// Index into `scatter_frames` while scrubbing; `None` follows the newest snapshot.
    pub scrub: Option<usize>,
    pub centred: bool,
}

impl App {
    pub fn new(objectives: Objectives, view: ViewOptions) -> Self {
        Self {
            info: RunInfo::default(),
            status: RunStatus::Starting,
            last_step: None,
            loss: Vec::new(),
            valid_loss: Vec::new(),
            last_eval: None,
            embedding: Vec::new(),
            analysis: None,
            first_spectrum: None,
            spectrum_reference: None,
            objectives,
            lr: None,
            interventions: Vec::new(),
            log: VecDeque::new(),
            focus: Pane::Progress,
            zoom: false,
            help: false,
            confirm_quit: false,
            exit_when_finished: false,
            log_y: false,
            smoothing: false,
            controls_cursor: 0,
            view,
            vocab: None,
            neighbors: NeighborsState::default(),
            scatter_frames: Vec::new(),
            scrub: None,
            centred: false,
        }
    }

    pub fn with_vocabulary(mut self, vocab: Arc<Vocabulary>) -> Self {
        self.vocab = Some(vocab);
        self
    }

    pub fn step(&self) -> u64 {
        self.last_step.map(|s| s.step).unwrap_or(0)
    }

    fn log(&mut self, step: u64, kind: LogKind, text: String) {
        if self.log.len() == LOG_LINES {
            self.log.pop_front();
        }
        self.log.push_back(LogLine { step, kind, text });
    }

    /// Folds one engine event into the state.
    pub fn on_event(&mut self, event: Event) {
        match event {
            Event::Started {
                step,
                total_steps,
                windows_per_epoch,
                parameters,
                device,
                run_dir,
                objective,
            } => {
                self.info = RunInfo {
                    name: run_dir
                        .as_ref()
                        .and_then(|d| d.file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| "run".into()),
                    device,
                    total_steps,
                    windows_per_epoch,
                    parameters,
                    run_dir,
                };
                self.status = RunStatus::Running;
                self.log(step, LogKind::Info, format!("started: {objective}"));
            }
            Event::Step(s) => {
                push_capped(&mut self.loss, (s.step as f64, s.loss));
                self.lr = Some(s.lr);
                self.last_step = Some(s);
            }
            Event::Eval(e) => {
                if e.split == "valid" {
                    push_capped(&mut self.valid_loss, (e.step as f64, e.loss));
                }
                self.log(
                    e.step,
                    LogKind::Eval,
                    format!(
                        "{} ppl {:.2} (freq {:.1}, med {:.1}, rare {:.1}) uniq {}",
                        e.split, e.ppl, e.groups[0].0, e.groups[1].0, e.groups[2].0, e.outputs.uniq
                    ),
                );
                if e.split == "valid" {
                    self.last_eval = Some(e);
                }
            }
            Event::Embedding(e) => self.embedding.push(*e),
            Event::Snapshot { .. } => {}
            Event::Applied(a) => {
                if let Command::Objective { change } = &a.command {
                    // Mirror the engine's state: the same change applies the same way here.
                    let _ = self.objectives.apply(change, [usize::MAX; 3]);
                    self.interventions.push(a.step);
                }
                if let Command::SetLr { .. } = a.command {
                    self.interventions.push(a.step);
                }
                let text = match &a.command {
                    Command::Pause | Command::Resume | Command::SaveCheckpoint => None,
                    _ => Some(format!("{} → {}", a.before, a.after)),
                };
                if let Some(text) = text {
                    self.log(a.step, LogKind::Intervention, text);
                }
            }
            Event::Rejected {
                step,
                command,
                reason,
            } => self.log(
                step,
                LogKind::Warning,
                format!("refused {}: {reason}", describe(&command)),
            ),
            Event::Checkpoint { step, path } => self.log(
                step,
                LogKind::Checkpoint,
                format!("checkpoint {}", path.display()),
            ),
            Event::Paused { step } => {
                self.status = RunStatus::Paused;
                self.log(step, LogKind::Info, "paused".into());
            }
            Event::Resumed { step } => {
                self.status = RunStatus::Running;
                self.log(step, LogKind::Info, "resumed".into());
            }
            Event::Diverged { step, loss } => {
                self.status = RunStatus::Diverged { step, loss };
                self.log(
                    step,
                    LogKind::Error,
                    format!("loss {loss} at step {step}: paused, the step was not applied"),
                );
            }
            Event::Warning { step, message } => self.log(step, LogKind::Warning, message),
            Event::Finished { step, reason } => {
                self.log(step, LogKind::Info, format!("finished ({reason:?})"));
                self.status = RunStatus::Finished(reason);
            }
            Event::Failed { step, message } => {
                self.log(step, LogKind::Error, format!("failed: {message}"));
                self.status = RunStatus::Failed(message);
            }
        }
    }

    /// A new embedding analysis (2-D projection and spectrum) from the metrics thread.
    pub fn on_analysis(&mut self, analysis: Arc<EmbeddingAnalysis>) {
        if self.first_spectrum.is_none() {
            self.first_spectrum = Some(analysis.panel.total.sv_norm.clone());
        }
        self.neighbors.refresh(Some(&analysis));
        if self.scatter_frames.len() >= SCATTER_FRAMES {
            // Keep the whole run's story: thin the older half, as the loss curve does.
            let half = self.scatter_frames.len() / 2;
            let mut kept: Vec<ScatterFrame> = self.scatter_frames[..half]
                .iter()
                .step_by(2)
                .cloned()
                .collect();
            let removed = half - kept.len();
            kept.extend_from_slice(&self.scatter_frames[half..]);
            self.scatter_frames = kept;
            // A scrub position in the thinned half moves with its frame (approximately).
            self.scrub = self
                .scrub
                .map(|i| if i < half { i / 2 } else { i - removed });
        }
        self.scatter_frames.push(ScatterFrame {
            step: analysis.snapshot.step,
            uncentred: analysis.panel.projection.clone(),
            centred: analysis.panel.centred.clone(),
        });
        self.analysis = Some(analysis);
    }

    /// The snapshot the embedding pane shows: the scrubbed one, or the newest.
    pub fn scatter_frame(&self) -> Option<&ScatterFrame> {
        match self.scrub {
            Some(i) => self.scatter_frames.get(i),
            None => self.scatter_frames.last(),
        }
    }

    /// Applies an action; returns what the caller must do.
    pub fn apply(&mut self, action: Action) -> Effect {
        if self.confirm_quit {
            return match action {
                Action::StopAndSave | Action::StopWithoutSaving => {
                    self.confirm_quit = false;
                    self.exit_when_finished = true;
                    self.status = RunStatus::Stopping;
                    Effect::Send(Command::Stop {
                        save: action == Action::StopAndSave,
                    })
                }
                Action::Cancel | Action::Quit => {
                    self.confirm_quit = false;
                    Effect::None
                }
                Action::Interrupt => self.interrupt(),
                _ => Effect::None,
            };
        }
        if self.help && !matches!(action, Action::Interrupt | Action::None) {
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
                if self.status.is_live() && self.status != RunStatus::Stopping {
                    self.confirm_quit = true;
                    Effect::None
                } else {
                    Effect::Exit
                }
            }
            Action::Interrupt => self.interrupt(),
            Action::ToggleHelp => {
                self.help = true;
                Effect::None
            }
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
                self.smoothing = !self.smoothing;
                Effect::None
            }
            Action::ControlsUp => {
                let n = Control::count();
                self.controls_cursor = (self.controls_cursor + n - 1) % n;
                Effect::None
            }
            Action::ControlsDown => {
                self.controls_cursor = (self.controls_cursor + 1) % Control::count();
                Effect::None
            }
            Action::ControlsToggle => self.toggle_control(),
            Action::ControlsScale(factor) => self.scale_control(factor),
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
                Effect::None
            }
            Action::SearchCancel => {
                self.neighbors.cancel();
                Effect::None
            }
            Action::TogglePin => {
                self.neighbors.toggle_pin(self.analysis.as_deref());
                Effect::None
            }
            Action::ToggleCentred => {
                self.centred = !self.centred;
                Effect::None
            }
            Action::Scrub(delta) => {
                let n = self.scatter_frames.len();
                if n > 0 {
                    let at = self.scrub.unwrap_or(n - 1) as i64 + delta as i64;
                    // Past the newest snapshot: follow the live one again.
                    self.scrub = if at >= n as i64 - 1 && delta > 0 {
                        None
                    } else {
                        Some(at.clamp(0, n as i64 - 1) as usize)
                    };
                }
                Effect::None
            }
        }
    }

    fn interrupt(&mut self) -> Effect {
        self.confirm_quit = false;
        self.exit_when_finished = true;
        if self.status.is_live() && self.status != RunStatus::Stopping {
            self.status = RunStatus::Stopping;
            Effect::Send(Command::Stop { save: true })
        } else if self.status == RunStatus::Stopping {
            Effect::None
        } else {
            Effect::Exit
        }
    }

    /// A command only makes sense while the engine runs.
    fn live_command(&self, command: Command) -> Effect {
        if self.status.is_live() && self.status != RunStatus::Stopping {
            Effect::Send(command)
        } else {
            Effect::None
        }
    }

    fn pause_command(&self) -> Effect {
        match self.status {
            RunStatus::Paused | RunStatus::Diverged { .. } => self.live_command(Command::Resume),
            _ => self.live_command(Command::Pause),
        }
    }

    pub fn selected_control(&self) -> Control {
        Control::ALL[self.controls_cursor.min(Control::count() - 1)]
    }

    fn toggle_control(&mut self) -> Effect {
        let change = match self.selected_control() {
            Control::Term(term) => ObjectiveChange::Enable {
                term,
                on: !self.objectives.term(term).0,
            },
            Control::Freeze(group) => ObjectiveChange::Freeze {
                group,
                frozen: !self.objectives.freeze.is_frozen(group),
            },
            Control::GateFreeze => ObjectiveChange::GateFreeze {
                parts: match self.objectives.gate_freeze {
                    GateParts::None => GateParts::B,
                    GateParts::B => GateParts::C,
                    GateParts::C => GateParts::Bc,
                    GateParts::Bc => GateParts::None,
                },
            },
            Control::Pause => return self.pause_command(),
            Control::Checkpoint => return self.live_command(Command::SaveCheckpoint),
            Control::LearningRate => return Effect::None,
        };
        self.live_command(Command::Objective { change })
    }

    fn scale_control(&mut self, factor: f64) -> Effect {
        match self.selected_control() {
            Control::Term(term) => {
                let weight = self.objectives.term(term).1 * factor;
                self.live_command(Command::Objective {
                    change: ObjectiveChange::Weight { term, weight },
                })
            }
            Control::LearningRate => match self.lr {
                Some(lr) => self.live_command(Command::SetLr { lr: lr * factor }),
                None => Effect::None,
            },
            _ => Effect::None,
        }
    }

    /// The app should end now (the engine finished after a stop the user asked for).
    pub fn should_exit(&self) -> bool {
        self.exit_when_finished && !self.status.is_live()
    }

    /// Seconds left at the current speed.
    pub fn eta_seconds(&self) -> Option<f64> {
        let s = self.last_step?;
        let left = self.info.total_steps.saturating_sub(s.step) as f64;
        Some(left * s.step_ms / 1e3)
    }

    /// The value of a metric for a group (0..3) or the total (3) from the newest embedding stats.
    pub fn embedding_metric(&self, metric: EmbeddingMetric, group: usize) -> Vec<f64> {
        self.embedding
            .iter()
            .map(|e| {
                let s = if group < 3 {
                    &e.groups[group]
                } else {
                    &e.total
                };
                match metric {
                    EmbeddingMetric::I1 => s.i1,
                    EmbeddingMetric::I2 => s.i2,
                    EmbeddingMetric::MeanCos => s.mean_cos,
                    EmbeddingMetric::MeanNorm => s.mean_norm,
                }
            })
            .collect()
    }

    /// Index into `embedding` of the last snapshot taken before the last intervention took
    /// effect: "the change since the intervention" is measured from there.
    pub fn since_intervention(&self) -> Option<usize> {
        let last = *self.interventions.last()?;
        self.embedding.iter().rposition(|e| e.step < last)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingMetric {
    I1,
    I2,
    MeanCos,
    MeanNorm,
}

fn push_capped(curve: &mut Vec<(f64, f64)>, point: (f64, f64)) {
    if curve.len() >= CURVE_POINTS {
        // Keep the shape of the whole run: thin the older half.
        let half = curve.len() / 2;
        let mut thinned: Vec<(f64, f64)> = curve[..half].iter().step_by(2).copied().collect();
        thinned.extend_from_slice(&curve[half..]);
        *curve = thinned;
    }
    curve.push(point);
}

fn describe(command: &Command) -> String {
    match command {
        Command::Objective { change } => change.to_string(),
        Command::SetLr { lr } => format!("lr {lr}"),
        other => format!("{other:?}").to_lowercase(),
    }
}
