//! The compare view: several runs overlaid, one colour per run — TensorBoard's scalar dashboard
//! in a terminal. The curves (train loss, validation PPL in total and per group, I1 and its
//! scale-free companions, mean cosine, effective rank) by step or by wall time, with
//! TensorBoard's exponential smoothing (debiased, the raw curve faint behind); the Groups table
//! with a row per run; every run's spectrum in one plot.
//!
//! State and its updates here, keys in [`action_for`], drawing in [`render`] (a pure function of the
//! state). The numbers come from a follower (the catalog's): the runs' stores read as they grow, so
//! live runs update live (with their store's flush interval) and finished ones are shown whole;
//! comparing never talks to a run, so it costs a live run nothing and needs no socket.

pub mod render;

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc::Sender;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;
use rustc_hash::{FxHashMap, FxHashSet};

use super::TuiError;
use super::app::ViewOptions;
use super::event_loop::{self, Events, Flow, View, ViewerEvent};
use crate::format::{DEFAULT_SMOOTHING, MAX_SMOOTHING, Smoothing};
use conelab_client::follow::{self, FollowUpdate, Follower};
use conelab_core::series::{SeriesName, series_key, spectrum_metric, split};

/// One curve the view can show: a series of the store. The named ones ([`CURVES`]) come
/// first; every other series a run has stored follows under its store name
/// (`split/group/metric`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Curve {
    /// As `conelab compare --curve` spells it.
    pub name: Cow<'static, str>,
    pub label: Cow<'static, str>,
    pub split: Cow<'static, str>,
    pub group: Cow<'static, str>,
    pub metric: Cow<'static, str>,
}

impl Curve {
    const fn new(
        name: &'static str,
        label: &'static str,
        split: &'static str,
        group: &'static str,
        metric: &'static str,
    ) -> Self {
        Self {
            name: Cow::Borrowed(name),
            label: Cow::Borrowed(label),
            split: Cow::Borrowed(split),
            group: Cow::Borrowed(group),
            metric: Cow::Borrowed(metric),
        }
    }

    /// A series of the store without a name of its own: named and labelled
    /// `split/group/metric`.
    pub fn stored(split: &str, group: &str, metric: &str) -> Self {
        let name = format!("{split}/{group}/{metric}");
        Self {
            label: Cow::Owned(name.clone()),
            name: Cow::Owned(name),
            split: Cow::Owned(split.into()),
            group: Cow::Owned(group.into()),
            metric: Cow::Owned(metric.into()),
        }
    }

    pub fn key(&self) -> i64 {
        series_key(&self.split, &self.group, &self.metric)
    }

    /// The named curve `--curve NAME` means.
    pub fn by_name(name: &str) -> Option<usize> {
        CURVES.iter().position(|c| c.name == name)
    }

    /// What `--curve` takes: a named curve (`i1-rare`), or any stored series as
    /// `SPLIT/GROUP/METRIC` (`valid/rare/uniq`) or `SPLIT/METRIC` (group `total`).
    pub fn parse(text: &str) -> Option<Curve> {
        if let Some(i) = Self::by_name(text) {
            return Some(CURVES[i].clone());
        }
        let parts: Vec<&str> = text.split('/').collect();
        let ok = |p: &&str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        };
        if !parts.iter().all(ok) {
            return None;
        }
        let curve = match parts[..] {
            [split, metric] => Curve::stored(split, "total", metric),
            [split, group, metric] => Curve::stored(split, group, metric),
            _ => return None,
        };
        // Spelled out, a named curve is still itself (its label, its own place in the list).
        Some(
            CURVES
                .iter()
                .find(|c| c.key() == curve.key())
                .cloned()
                .unwrap_or(curve),
        )
    }
}

/// The curves, in the order the list shows them: the training run's own numbers, validation
/// PPL per group, then the embedding's isotropy in total and per group (the tool's headline:
/// how each frequency group's I1, IsoScore and mean cosine move).
pub const CURVES: [Curve; 34] = [
    Curve::new("loss", "train loss", split::TRAIN, "total", "loss"),
    Curve::new("ppl", "valid PPL", split::VALID, "total", "ppl"),
    Curve::new(
        "ppl-freq",
        "valid PPL freq",
        split::VALID,
        "frequent",
        "ppl",
    ),
    Curve::new("ppl-med", "valid PPL med", split::VALID, "medium", "ppl"),
    Curve::new("ppl-rare", "valid PPL rare", split::VALID, "rare", "ppl"),
    Curve::new("i1", "I1 = I(W)", split::EMBEDDING, "total", "i1"),
    Curve::new(
        "i1-unit",
        "I1 unit rows",
        split::EMBEDDING,
        "total",
        "i1_unit",
    ),
    Curve::new(
        "isoscore",
        "IsoScore",
        split::EMBEDDING,
        "total",
        "isoscore",
    ),
    Curve::new(
        "mean-cos",
        "mean cosine",
        split::EMBEDDING,
        "total",
        "mean_cos",
    ),
    Curve::new(
        "mean-norm",
        "mean norm",
        split::EMBEDDING,
        "total",
        "mean_norm",
    ),
    Curve::new(
        "effective-rank",
        "effective rank",
        split::EMBEDDING,
        "total",
        "effective_rank",
    ),
    Curve::new("i1-freq", "I1 freq", split::EMBEDDING, "frequent", "i1"),
    Curve::new("i1-med", "I1 med", split::EMBEDDING, "medium", "i1"),
    Curve::new("i1-rare", "I1 rare", split::EMBEDDING, "rare", "i1"),
    Curve::new(
        "isoscore-freq",
        "IsoScore freq",
        split::EMBEDDING,
        "frequent",
        "isoscore",
    ),
    Curve::new(
        "isoscore-med",
        "IsoScore med",
        split::EMBEDDING,
        "medium",
        "isoscore",
    ),
    Curve::new(
        "isoscore-rare",
        "IsoScore rare",
        split::EMBEDDING,
        "rare",
        "isoscore",
    ),
    Curve::new(
        "mean-cos-freq",
        "mean cos freq",
        split::EMBEDDING,
        "frequent",
        "mean_cos",
    ),
    Curve::new(
        "mean-cos-med",
        "mean cos med",
        split::EMBEDDING,
        "medium",
        "mean_cos",
    ),
    Curve::new(
        "mean-cos-rare",
        "mean cos rare",
        split::EMBEDDING,
        "rare",
        "mean_cos",
    ),
    // The later literature's measures: how much of the cone one removable direction holds, and
    // the hidden states W is trained against (valid's fixed sample).
    Curve::new(
        "top-d-var",
        "top-D variance",
        split::EMBEDDING,
        "total",
        "abtt_top_variance",
    ),
    Curve::new(
        "rogue",
        "rogue-3 share",
        split::EMBEDDING,
        "total",
        "rogue_share",
    ),
    Curve::new("h-cos", "h mean cos", split::VALID, "total", "h_mean_cos"),
    Curve::new(
        "h-isoscore",
        "h IsoScore",
        split::VALID,
        "total",
        "h_isoscore",
    ),
    Curve::new("h-margin", "h margin", split::VALID, "total", "h_margin"),
    Curve::new(
        "h-self-sim-rare",
        "h self-sim rare",
        split::VALID,
        "rare",
        "h_self_sim",
    ),
    Curve::new(
        "h-neg-u-rare",
        "cos(-u, rare)",
        split::VALID,
        "total",
        "h_neg_u_rare_cos",
    ),
    Curve::new("grad-norm", "grad norm", split::TRAIN, "total", "grad_norm"),
    Curve::new("lr", "learning rate", split::TRAIN, "total", "lr"),
    Curve::new(
        "tokens-per-sec",
        "tokens/s",
        split::TRAIN,
        "total",
        "tokens_per_sec",
    ),
    // The run process and its device (the system sample): an input-bound run from a GPU-bound
    // one.
    Curve::new("cpu", "CPU %", split::SYSTEM, "total", "cpu_percent"),
    Curve::new("rss", "RSS MiB", split::SYSTEM, "total", "rss_mib"),
    Curve::new(
        "gpu-util",
        "GPU util %",
        split::SYSTEM,
        "total",
        "gpu_util_percent",
    ),
    Curve::new(
        "gpu-mem",
        "GPU mem MiB",
        split::SYSTEM,
        "total",
        "gpu_mem_used_mib",
    ),
];

/// The narrowest x-window, as a fraction of the whole (2⁻¹⁰: ten zooms).
pub const MIN_X_WINDOW: f64 = 1.0 / 1024.0;

/// Runs on one page of the legend (keys 1–9 reach them; `[` `]` turn the page).
pub const LEGEND_PAGE: usize = 9;

/// Fewer points than this are drawn raw whatever the smoothing: a 4-point validation curve
/// smoothed at 0.6 is mostly its first point.
pub const MIN_SMOOTHED_POINTS: usize = 20;

/// The Groups table's cells besides the curves: Uniq per group, I(W) per group.
const TABLE_METRICS: [(&str, &str); 2] = [(split::VALID, "uniq"), (split::EMBEDDING, "i1")];

/// Group names of the store, in the table's column order.
pub const TABLE_GROUPS: [&str; 4] = ["frequent", "medium", "rare", "total"];

/// Spectra up to this many singular values are followed.
const MAX_SPECTRUM: usize = 4096;

/// Spectrum series keys → index k.
fn spectrum_keys() -> &'static FxHashMap<i64, usize> {
    static KEYS: OnceLock<FxHashMap<i64, usize>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..MAX_SPECTRUM)
            .map(|k| (series_key(split::SPECTRUM, "total", &spectrum_metric(k)), k))
            .collect()
    })
}

/// Every series the view shows.
pub fn wanted_keys() -> FxHashSet<i64> {
    let mut keys: FxHashSet<i64> = CURVES.iter().map(Curve::key).collect();
    for (s, metric) in TABLE_METRICS {
        for g in TABLE_GROUPS {
            keys.insert(series_key(s, g, metric));
        }
    }
    for g in TABLE_GROUPS {
        keys.insert(series_key(split::VALID, g, "ppl"));
        keys.insert(series_key(split::EMBEDDING, g, "isoscore"));
    }
    keys.extend(spectrum_keys().keys());
    keys
}

/// One run being compared.
#[derive(Debug, Clone, Default)]
pub struct CompareRun {
    pub dir: PathBuf,
    /// Its name (else its folder's) and tags.
    pub label: String,
    /// live, completed, stopped, diverged, failed, crashed (from its folder).
    pub status: String,
    /// Left out of the curves and the spectrum (`1`–`9`).
    pub hidden: bool,
    /// Why its store cannot be read right now (cleared once it can).
    pub error: Option<String>,
    /// Series key → step → (wall time, value); a step recorded twice (a resumed run) keeps the
    /// newest value.
    series: FxHashMap<i64, BTreeMap<u64, (f64, f64)>>,
    /// The newest spectrum: its step and the normalised singular values.
    spectrum: (u64, Vec<f64>),
    /// The earliest wall time seen (x = 0 of the time axis).
    first_wall: Option<f64>,
}

impl CompareRun {
    pub fn new(dir: PathBuf) -> Self {
        let label = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        Self {
            dir,
            label,
            status: "…".into(),
            ..Self::default()
        }
    }

    /// Folds rows of the store into the run.
    pub fn add(&mut self, rows: &[follow::Row]) {
        let spectra = spectrum_keys();
        for r in rows {
            if r.wall.is_finite() {
                self.first_wall = Some(self.first_wall.map_or(r.wall, |w| w.min(r.wall)));
            }
            if let Some(&k) = spectra.get(&r.key) {
                let (step, values) = &mut self.spectrum;
                if r.step > *step || values.is_empty() {
                    *step = r.step;
                    values.clear();
                }
                if r.step == *step {
                    if values.len() <= k {
                        values.resize(k + 1, f64::NAN);
                    }
                    values[k] = r.value;
                }
                continue;
            }
            self.series
                .entry(r.key)
                .or_default()
                .insert(r.step, (r.wall, r.value));
        }
    }

    fn clear(&mut self) {
        self.series.clear();
        self.spectrum = (0, Vec::new());
        self.first_wall = None;
    }

    /// A series as (step, seconds since the run's first row, value), by step.
    pub fn points(&self, key: i64) -> Vec<(u64, f64, f64)> {
        let origin = self.first_wall.unwrap_or(0.0);
        self.series
            .get(&key)
            .map(|s| {
                s.iter()
                    .map(|(&step, &(wall, v))| (step, wall - origin, v))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The newest value of a series: (step, value).
    pub fn last(&self, split: &str, group: &str, metric: &str) -> Option<(u64, f64)> {
        self.series
            .get(&series_key(split, group, metric))
            .and_then(|s| s.last_key_value())
            .map(|(&step, &(_, v))| (step, v))
    }

    /// The newest training step recorded.
    pub fn step(&self) -> Option<u64> {
        self.last(split::TRAIN, "total", "loss").map(|(s, _)| s)
    }

    /// The newest spectrum (normalised singular values), empty before the first analysis.
    pub fn spectrum(&self) -> &[f64] {
        &self.spectrum.1
    }
}

/// What the curves are drawn against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XAxis {
    #[default]
    Step,
    /// Wall-clock time since each run's first record.
    Time,
}

/// The panes of the compare view, in focus order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComparePane {
    Curves,
    Groups,
    Spectrum,
}

impl ComparePane {
    pub const ALL: [ComparePane; 3] = [
        ComparePane::Curves,
        ComparePane::Groups,
        ComparePane::Spectrum,
    ];

    pub fn title(self) -> &'static str {
        match self {
            ComparePane::Curves => "Curves",
            ComparePane::Groups => "Groups: valid PPL, Uniq; I(W), IsoScore",
            ComparePane::Spectrum => "Spectrum",
        }
    }
}

/// Lines of the warnings kept.
const WARNINGS: usize = 4;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CompareAction {
    None,
    Quit,
    /// Esc: closes the help or the zoom, else leaves.
    Escape,
    ToggleHelp,
    FocusNext,
    FocusPrev,
    ToggleZoom,
    /// ↑/↓ in the curve list.
    Curve(i32),
    ToggleX,
    /// `+`/`-`: the smoothing weight up or down by this much (clamped to 0 ..= 0.99).
    Smoothing(f64),
    /// `m`, as in the workbench: smoothing off, or back to the weight it had.
    ToggleSmoothing,
    ToggleLogY,
    /// `o`: clip outliers from the y-range, or show every value.
    ToggleClip,
    /// `1`–`9`: show or hide run n of the legend's page (0-based).
    ToggleRun(usize),
    /// `[` / `]`: the legend's previous / next page of nine runs.
    LegendPage(i32),
    /// `>` / `<`: zoom the x-axis in / out (around the cursor, else the middle).
    ZoomX(bool),
    /// `H` / `L`: pan the zoomed x-axis left / right by a quarter of what is shown.
    PanX(i32),
    /// `R`: the whole x-axis again.
    ResetX,
    /// `c`: the value cursor on / off.
    ToggleCursor,
    /// `/`: search the curves by name (typed letters in order, anywhere: `ir` finds I1 rare).
    Search,
    /// `g`: runs of one label (seeds of one setting) as one curve, their mean ± one standard
    /// deviation.
    ToggleGroups,
    /// ← / →: move the cursor by a hundredth of what is shown (a tenth with Shift).
    MoveCursor(f64),
}

#[derive(Debug, Clone)]
pub struct CompareApp {
    pub runs: Vec<CompareRun>,
    /// The curves offered: [`CURVES`], then every other series the runs have stored, by name.
    pub curves: Vec<Curve>,
    /// Index into `curves`.
    pub curve: usize,
    /// Where to ask the follower for a series it does not send yet (`None`: nobody to ask).
    pub want: Option<Sender<i64>>,
    /// The series the follower sends (or was asked for).
    pub requested: FxHashSet<i64>,
    pub x_axis: XAxis,
    /// TensorBoard's exponential smoothing weight, 0 (raw) ..= 0.99.
    pub smoothing: f64,
    /// The weight `m` turns smoothing back on with.
    pub smoothing_off_from: f64,
    pub log_y: bool,
    /// The y-range from the 1st to the 99th percentile of the values drawn (the first losses,
    /// about ln V, flatten every curve otherwise); `o` switches it. `None`: on for the loss and
    /// PPL curves, off for the rest.
    pub clip_outliers: Option<bool>,
    /// The legend's page: runs `9·page ..` answer to keys 1–9.
    pub legend_page: usize,
    /// The part of the x-axis shown, as fractions of the whole (0, 1): the data may grow
    /// while zoomed, the window stays where it was relative to it.
    pub x_window: (f64, f64),
    /// The value cursor, as a fraction of the shown x-range; `None`: off.
    pub cursor: Option<f64>,
    /// Runs of one label drawn as their mean with a ±1 sd band (`g`).
    pub group_seeds: bool,
    /// `/`: the curve search being typed (the list shows the matches).
    pub search: Option<String>,
    pub focus: ComparePane,
    pub zoom: bool,
    pub help: bool,
    pub exit: bool,
    pub view: ViewOptions,
    /// The newest warnings (a skipped segment, the follower gone), prefixed with the run.
    pub warnings: VecDeque<String>,
    /// The follower stopped: the view no longer updates.
    pub follower_stopped: bool,
}

/// How the view starts.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareOptions {
    pub view: ViewOptions,
    pub x_axis: XAxis,
    pub smoothing: f64,
    pub log_y: bool,
    /// The curve shown first (a named one, or any stored series).
    pub curve: Curve,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            view: ViewOptions::default(),
            x_axis: XAxis::Step,
            smoothing: DEFAULT_SMOOTHING,
            log_y: false,
            curve: CURVES[0].clone(),
        }
    }
}

impl CompareApp {
    /// Run `i`'s label as the screen shows it: its label, and where another run has the same
    /// one (two seeds of a setting, two runs named alike), its folder beside it — `1 alpha`
    /// and `2 alpha` told the user nothing about which was which (issue #58).
    pub fn shown_label(&self, i: usize) -> String {
        let Some(run) = self.runs.get(i) else {
            return String::new();
        };
        let shared = self
            .runs
            .iter()
            .enumerate()
            .any(|(j, r)| j != i && r.label == run.label);
        if !shared {
            return run.label.clone();
        }
        let folder = run
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| run.dir.display().to_string());
        if folder == run.label {
            run.dir.display().to_string()
        } else {
            format!("{} ({folder})", run.label)
        }
    }

    pub fn new(dirs: Vec<PathBuf>, options: CompareOptions) -> Self {
        let mut curves = CURVES.to_vec();
        let curve = match curves.iter().position(|c| c.key() == options.curve.key()) {
            Some(i) => i,
            None => {
                curves.push(options.curve.clone());
                curves.len() - 1
            }
        };
        Self {
            runs: dirs.into_iter().map(CompareRun::new).collect(),
            curves,
            curve,
            want: None,
            requested: wanted_keys(),
            x_axis: options.x_axis,
            smoothing: options.smoothing.clamp(0.0, MAX_SMOOTHING),
            smoothing_off_from: if options.smoothing > 0.0 {
                options.smoothing.clamp(0.0, MAX_SMOOTHING)
            } else {
                DEFAULT_SMOOTHING
            },
            log_y: options.log_y,
            clip_outliers: None,
            legend_page: 0,
            x_window: (0.0, 1.0),
            cursor: None,
            group_seeds: false,
            search: None,
            focus: ComparePane::Curves,
            zoom: false,
            help: false,
            exit: false,
            view: options.view,
            warnings: VecDeque::new(),
            follower_stopped: false,
        }
    }

    pub fn curve(&self) -> &Curve {
        &self.curves[self.curve]
    }

    /// Adds the series met in the runs' stores to the curves offered (after the named ones, in
    /// name order); the curve shown stays the one shown.
    pub fn add_series(&mut self, names: &[SeriesName]) {
        let shown = self.curve().key();
        let mut known: FxHashSet<i64> = self.curves.iter().map(Curve::key).collect();
        let mut added = false;
        for n in names.iter().filter(|n| n.is_curve()) {
            if known.insert(n.key()) {
                self.curves
                    .push(Curve::stored(&n.split, &n.group, &n.metric));
                added = true;
            }
        }
        if added {
            self.curves[CURVES.len()..].sort_by(|a, b| a.name.cmp(&b.name));
            self.curve = self
                .curves
                .iter()
                .position(|c| c.key() == shown)
                .unwrap_or(0);
        }
    }

    /// Asks the follower for the curve shown if it does not send it yet.
    pub fn request_shown(&mut self) {
        let key = self.curve().key();
        if self.requested.insert(key)
            && let Some(want) = &self.want
            && want.send(key).is_err()
        {
            self.on_follower_gone();
        }
    }

    /// A point's x as drawn: its step, or its seconds since the run's first record.
    pub fn x_of(&self, p: &(u64, f64, f64)) -> f64 {
        match self.x_axis {
            XAxis::Step => p.0 as f64,
            XAxis::Time => p.1,
        }
    }

    /// The x-range of the curve shown over the runs shown (finite values only).
    pub fn full_x_range(&self) -> Option<(f64, f64)> {
        let key = self.curve().key();
        let (lo, hi) = self
            .runs
            .iter()
            .filter(|r| !r.hidden)
            .flat_map(|r| r.points(key))
            .filter(|p| p.2.is_finite())
            .map(|p| self.x_of(&p))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(x), b.max(x))
            });
        (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
    }

    /// The part of the x-range shown (the zoom window of the whole).
    pub fn shown_x_range(&self) -> Option<(f64, f64)> {
        let (lo, hi) = self.full_x_range()?;
        let span = (hi - lo).max(1e-9);
        Some((lo + self.x_window.0 * span, lo + self.x_window.1 * span))
    }

    /// Where the value cursor stands on the x-axis.
    pub fn cursor_x(&self) -> Option<f64> {
        let c = self.cursor?;
        let (lo, hi) = self.shown_x_range()?;
        Some(lo + c * (hi - lo))
    }

    /// A run's value of the curve shown at the cursor: its newest point at or before the
    /// cursor's x, as (x, value).
    pub fn value_at_cursor(&self, run: &CompareRun) -> Option<(f64, f64)> {
        self.value_at(run, self.cursor_x()?)
    }

    /// A run's value of the curve shown at `at` (its newest point at or before it). The cursor's
    /// x costs a pass over every run's points: a frame takes it once and reads every run here.
    pub fn value_at(&self, run: &CompareRun, at: f64) -> Option<(f64, f64)> {
        run.points(self.curve().key())
            .iter()
            .map(|p| (self.x_of(p), p.2))
            .take_while(|(x, _)| *x <= at + 1e-9)
            .last()
    }

    /// A key while the curve search is open: letters narrow it, ↑↓ move among the matches,
    /// Enter shows the first (or the selected) match, Esc closes it.
    pub fn search_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.search = None;
            self.exit = true;
            return;
        }
        let Some(query) = &mut self.search else {
            return;
        };
        match key.code {
            KeyCode::Esc => self.search = None,
            KeyCode::Enter => {
                let matches = curve_matches(&self.curves, query);
                if let Some(&first) = matches.first()
                    && !matches.contains(&self.curve)
                {
                    self.curve = first;
                }
                self.search = None;
            }
            KeyCode::Backspace => {
                query.pop();
            }
            KeyCode::Up | KeyCode::Down => {
                let matches = curve_matches(&self.curves, query);
                let at = matches.iter().position(|&c| c == self.curve);
                let next = match (at, key.code) {
                    (None, _) => 0,
                    (Some(i), KeyCode::Up) => (i + matches.len() - 1) % matches.len().max(1),
                    (Some(i), _) => (i + 1) % matches.len().max(1),
                };
                if let Some(&c) = matches.get(next) {
                    self.curve = c;
                }
            }
            KeyCode::Char(c) if query.chars().count() < 32 => {
                query.push(c);
                if let Some(&first) = curve_matches(&self.curves, query).first() {
                    self.curve = first;
                }
            }
            _ => {}
        }
    }

    /// The shown runs grouped by label (the seeds of one setting share it), in the order each
    /// label first comes: (label, the runs' indices).
    pub fn seed_groups(&self) -> Vec<(String, Vec<usize>)> {
        let mut out: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, r) in self.runs.iter().enumerate().filter(|(_, r)| !r.hidden) {
            match out.iter_mut().find(|(l, _)| *l == r.label) {
                Some((_, members)) => members.push(i),
                None => out.push((r.label.clone(), vec![i])),
            }
        }
        out
    }

    /// Whether a run's curve of `points` points is drawn smoothed.
    pub fn smoothed(&self, points: usize) -> bool {
        self.smoothing > 0.0 && points >= MIN_SMOOTHED_POINTS
    }

    /// Whether the y-range leaves outliers out for the curve shown.
    pub fn clipping(&self) -> bool {
        self.clip_outliers
            .unwrap_or(matches!(&*self.curve().metric, "loss" | "ppl"))
    }

    /// Folds what the follower learnt.
    pub fn on_update(&mut self, update: FollowUpdate) {
        match update {
            FollowUpdate::Rows { run, reset, rows } => {
                if let Some(r) = self.runs.get_mut(run) {
                    if reset {
                        r.clear();
                    }
                    r.add(&rows);
                }
            }
            FollowUpdate::State { run, label, status } => {
                if let Some(r) = self.runs.get_mut(run) {
                    r.label = label;
                    r.status = status;
                }
            }
            FollowUpdate::Warning { run, message } => {
                let who = self
                    .runs
                    .get(run)
                    .map(|r| r.label.clone())
                    .unwrap_or_default();
                self.warn(format!("{who}: {message}"));
            }
            FollowUpdate::Error { run, message } => {
                if let Some(r) = self.runs.get_mut(run) {
                    r.error = message;
                }
            }
            FollowUpdate::Series { names } => self.add_series(&names),
            FollowUpdate::Stopped { message } => {
                self.follower_stopped = true;
                self.warn(message);
            }
        }
    }

    fn warn(&mut self, message: String) {
        if self.warnings.len() == WARNINGS {
            self.warnings.pop_front();
        }
        self.warnings.push_back(message);
    }

    /// The follower is gone (stopped, or its thread ended): nothing updates any more.
    pub fn on_follower_gone(&mut self) {
        if !self.follower_stopped {
            self.follower_stopped = true;
            self.warn("reading the runs stopped: the numbers shown no longer update".into());
        }
    }

    pub fn apply(&mut self, action: CompareAction) {
        match action {
            CompareAction::None => {}
            CompareAction::Quit => {
                if self.help {
                    self.help = false;
                } else {
                    self.exit = true;
                }
            }
            // As in the workbench and the browser: Esc closes what is open first.
            CompareAction::Escape => {
                if self.help {
                    self.help = false;
                } else if self.zoom {
                    self.zoom = false;
                } else {
                    self.exit = true;
                }
            }
            CompareAction::ToggleHelp => self.help = !self.help,
            CompareAction::FocusNext | CompareAction::FocusPrev => {
                let n = ComparePane::ALL.len();
                let at = ComparePane::ALL
                    .iter()
                    .position(|p| *p == self.focus)
                    .unwrap_or(0);
                let next = if action == CompareAction::FocusNext {
                    (at + 1) % n
                } else {
                    (at + n - 1) % n
                };
                self.focus = ComparePane::ALL[next];
            }
            CompareAction::ToggleZoom => self.zoom = !self.zoom,
            CompareAction::Curve(d) => {
                let n = self.curves.len() as i64;
                self.curve = (self.curve as i64 + d as i64).rem_euclid(n) as usize;
            }
            CompareAction::ToggleX => {
                self.x_axis = match self.x_axis {
                    XAxis::Step => XAxis::Time,
                    XAxis::Time => XAxis::Step,
                }
            }
            CompareAction::ToggleSmoothing => Smoothing {
                weight: &mut self.smoothing,
                off_from: &mut self.smoothing_off_from,
            }
            .toggle(),
            CompareAction::Smoothing(d) => Smoothing {
                weight: &mut self.smoothing,
                off_from: &mut self.smoothing_off_from,
            }
            .step(d),
            CompareAction::ToggleLogY => self.log_y = !self.log_y,
            CompareAction::ToggleClip => self.clip_outliers = Some(!self.clipping()),
            CompareAction::ZoomX(zoom_in) => {
                let (lo, hi) = self.x_window;
                let width = hi - lo;
                let at = lo + self.cursor.unwrap_or(0.5) * width;
                let new = if zoom_in {
                    (width / 2.0).max(MIN_X_WINDOW)
                } else {
                    (width * 2.0).min(1.0)
                };
                // The point under the cursor stays under it.
                let frac = self.cursor.unwrap_or(0.5);
                let lo = (at - frac * new).clamp(0.0, 1.0 - new);
                self.x_window = (lo, lo + new);
            }
            CompareAction::PanX(d) => {
                let (lo, hi) = self.x_window;
                let width = hi - lo;
                let lo = (lo + d as f64 * width / 4.0).clamp(0.0, 1.0 - width);
                self.x_window = (lo, lo + width);
            }
            CompareAction::ResetX => self.x_window = (0.0, 1.0),
            CompareAction::ToggleGroups => self.group_seeds = !self.group_seeds,
            CompareAction::Search => self.search = Some(String::new()),
            CompareAction::ToggleCursor => {
                self.cursor = match self.cursor {
                    Some(_) => None,
                    None => Some(1.0),
                }
            }
            CompareAction::MoveCursor(d) => {
                if let Some(c) = &mut self.cursor {
                    *c = (*c + d).clamp(0.0, 1.0);
                }
            }
            CompareAction::LegendPage(d) => {
                let pages = self.runs.len().div_ceil(LEGEND_PAGE).max(1) as i64;
                self.legend_page =
                    (self.legend_page as i64 + d as i64).clamp(0, pages - 1) as usize;
            }
            CompareAction::ToggleRun(i) => {
                if let Some(r) = self.runs.get_mut(self.legend_page * LEGEND_PAGE + i) {
                    r.hidden = !r.hidden;
                }
            }
        }
    }
}

/// The key bindings, as the help overlay and README list them.
pub const HELP: [(&str, &str); 20] = [
    (
        "↑/↓ j/k",
        "choose the curve (the named ones, then every series the runs stored)",
    ),
    (
        "/",
        "search the curves (letters in order: `ir` → I1 rare, `vrhu` → valid/rare/human_uniq)",
    ),
    ("x", "x axis: step / wall time"),
    (
        "+ / -",
        "smoothing weight up / down (0.1; raw curve faint behind)",
    ),
    ("0", "smoothing off"),
    ("m", "smoothing off / back on (as in the workbench)"),
    ("l", "log-y"),
    (
        "o",
        "outliers: y-range from the 1st to the 99th percentile, or every value (on for loss, PPL)",
    ),
    ("1-9", "show / hide run n of the legend's page"),
    ("[ ]", "the legend's previous / next page of nine runs"),
    ("> <", "zoom the x-axis in / out (around the cursor)"),
    (
        "H L R",
        "pan the zoomed x-axis left / right; the whole axis again",
    ),
    ("c", "value cursor: the legend reads every run at its x"),
    (
        "g",
        "group runs of one label (seeds): their mean and a ±1 sd band",
    ),
    ("← → (Shift)", "move the cursor (by a tenth)"),
    ("Tab", "next pane"),
    ("z", "zoom the focused pane"),
    ("?", "this help"),
    ("q", "leave (the runs go on)"),
    ("Esc", "close the help or the zoom, else leave"),
];

/// The action a key asks for.
pub fn action_for(key: KeyEvent) -> CompareAction {
    if key.kind == KeyEventKind::Release {
        return CompareAction::None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return CompareAction::Quit;
    }
    match key.code {
        KeyCode::Char('q') => CompareAction::Quit,
        KeyCode::Esc => CompareAction::Escape,
        KeyCode::Char('?') => CompareAction::ToggleHelp,
        KeyCode::Tab => CompareAction::FocusNext,
        KeyCode::BackTab => CompareAction::FocusPrev,
        KeyCode::Char('z') => CompareAction::ToggleZoom,
        KeyCode::Up | KeyCode::Char('k') => CompareAction::Curve(-1),
        KeyCode::Down | KeyCode::Char('j') => CompareAction::Curve(1),
        KeyCode::Char('x') => CompareAction::ToggleX,
        KeyCode::Char('+') | KeyCode::Char('=') => CompareAction::Smoothing(0.1),
        KeyCode::Char('-') => CompareAction::Smoothing(-0.1),
        KeyCode::Char('0') => CompareAction::Smoothing(-1.0),
        KeyCode::Char('m') => CompareAction::ToggleSmoothing,
        KeyCode::Char('l') => CompareAction::ToggleLogY,
        KeyCode::Char('o') => CompareAction::ToggleClip,
        KeyCode::Char('[') => CompareAction::LegendPage(-1),
        KeyCode::Char(']') => CompareAction::LegendPage(1),
        KeyCode::Char('>') => CompareAction::ZoomX(true),
        KeyCode::Char('<') => CompareAction::ZoomX(false),
        KeyCode::Char('H') => CompareAction::PanX(-1),
        KeyCode::Char('L') => CompareAction::PanX(1),
        KeyCode::Char('R') => CompareAction::ResetX,
        KeyCode::Char('c') => CompareAction::ToggleCursor,
        KeyCode::Char('g') => CompareAction::ToggleGroups,
        KeyCode::Char('/') => CompareAction::Search,
        KeyCode::Left if key.modifiers.contains(KeyModifiers::SHIFT) => {
            CompareAction::MoveCursor(-0.1)
        }
        KeyCode::Right if key.modifiers.contains(KeyModifiers::SHIFT) => {
            CompareAction::MoveCursor(0.1)
        }
        KeyCode::Left => CompareAction::MoveCursor(-0.01),
        KeyCode::Right => CompareAction::MoveCursor(0.01),
        KeyCode::Char(c @ '1'..='9') => CompareAction::ToggleRun(c as usize - '1' as usize),
        _ => CompareAction::None,
    }
}

/// The curves a search matches: its letters in order (case ignored) in the curve's name or label
/// ("ir" → "i1-rare"; "cosr" → "mean-cos-rare"; "vrhu" → "valid/rare/human_uniq"), the tightest
/// matches first, a named curve before a stored series on a tie.
pub fn curve_matches(curves: &[Curve], query: &str) -> Vec<usize> {
    let q: Vec<char> = query
        .to_lowercase()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    // The span of the text the letters take and where it starts, tightest then earliest
    // (None: they are not all there, in order).
    let span = |text: &str| -> Option<(usize, usize)> {
        let t: Vec<char> = text.to_lowercase().chars().collect();
        (0..t.len())
            .filter_map(|start| {
                let mut k = 0;
                for (i, c) in t.iter().enumerate().skip(start) {
                    if k < q.len() && *c == q[k] {
                        k += 1;
                        if k == q.len() {
                            return Some((i + 1 - start, start));
                        }
                    }
                }
                None
            })
            .min()
    };
    if q.is_empty() {
        return (0..curves.len()).collect();
    }
    let mut found: Vec<((usize, usize), usize)> = curves
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            [span(&c.name), span(&c.label)]
                .into_iter()
                .flatten()
                .min()
                .map(|s| (s, i))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, i)| i).collect()
}

/// One step of a group of runs: the mean x (a step, or the mean seconds), the mean value, the
/// sample standard deviation (0 for one run) and how many runs had a finite value there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandPoint {
    pub x: f64,
    pub mean: f64,
    pub sd: f64,
    pub n: usize,
}

/// The mean and ±1 sd of several runs' curves, step by step over every step any of them has
/// (a run without a finite value at a step does not count there). `series`: per run, (step, x,
/// value) by step.
pub fn mean_band(series: &[Vec<(u64, f64, f64)>]) -> Vec<BandPoint> {
    let mut by_step: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for s in series {
        for &(step, x, v) in s {
            if v.is_finite() {
                by_step.entry(step).or_default().push((x, v));
            }
        }
    }
    by_step
        .into_values()
        .map(|at| {
            let n = at.len();
            let mean = at.iter().map(|p| p.1).sum::<f64>() / n as f64;
            let x = at.iter().map(|p| p.0).sum::<f64>() / n as f64;
            let sd = if n > 1 {
                (at.iter().map(|p| (p.1 - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
            } else {
                0.0
            };
            BandPoint { x, mean, sd, n }
        })
        .collect()
}

impl View for CompareApp {
    type Message = FollowUpdate;
    type Exit = ();

    fn on_event(&mut self, event: ViewerEvent<FollowUpdate>, _: Rect) -> Flow<()> {
        match event {
            ViewerEvent::Source(update) => self.on_update(update),
            ViewerEvent::SourceGone => {
                if self.follower_stopped {
                    return Flow::Unchanged;
                }
                self.on_follower_gone();
            }
            ViewerEvent::Key(key) => match &self.search {
                // The search box has the keyboard.
                Some(_) => self.search_key(key),
                None => self.apply(action_for(key)),
            },
            ViewerEvent::Resize => {}
            ViewerEvent::Mouse(_) => return Flow::Unchanged,
            ViewerEvent::Detach | ViewerEvent::Ask | ViewerEvent::TerminalGone => {
                return Flow::Exit(());
            }
        }
        // Whatever chose it (a key, the search, a list that grew), the curve shown is sent.
        self.request_shown();
        if self.exit {
            Flow::Exit(())
        } else {
            Flow::Changed
        }
    }

    fn render(&self, frame: &mut Frame) {
        render::render(frame, self);
    }

    fn terminal_gone(&mut self) {}
}

/// The compare view on `dirs` until the user leaves (or the terminal goes). `follow` starts
/// following the runs from their folders, sending the rows of the series keys it is given (the
/// catalog's follower: the view itself never reads a store).
pub fn run_compare(
    dirs: Vec<PathBuf>,
    options: CompareOptions,
    follow: impl FnOnce(Vec<PathBuf>, FxHashSet<i64>) -> std::io::Result<Follower>,
) -> Result<(), TuiError> {
    let events = Events::new();
    let mut wanted = wanted_keys();
    wanted.insert(options.curve.key());
    let Follower {
        updates,
        stop,
        want,
    } = follow(dirs.clone(), wanted.clone())?;
    events.forward(updates, |u| u)?;
    let mut app = CompareApp::new(dirs, options);
    app.want = Some(want);
    app.requested = wanted;
    event_loop::run(&mut app, events)?;
    // The follower stops with the view.
    drop(stop);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: i64, step: u64, wall: f64, value: f64) -> follow::Row {
        follow::Row {
            key,
            step,
            wall,
            value,
        }
    }

    /// Issue #39 part 1: the system sample is a named curve, followed from the first frame.
    #[test]
    fn the_process_and_device_load_are_named_curves() {
        let gpu = Curve::parse("gpu-util").expect("named");
        assert_eq!(
            gpu.key(),
            series_key(split::SYSTEM, "total", "gpu_util_percent")
        );
        let wanted = wanted_keys();
        for name in ["cpu", "rss", "gpu-util", "gpu-mem"] {
            let c = Curve::parse(name).expect(name);
            assert!(wanted.contains(&c.key()), "{name} is followed");
        }
    }

    #[test]
    fn rows_fold_into_series_spectra_and_a_time_origin() {
        let mut run = CompareRun::new(PathBuf::from("/x/run-a"));
        assert_eq!(run.label, "run-a");
        let loss = CURVES[0].key();
        let sv = |k: usize| series_key(split::SPECTRUM, "total", &spectrum_metric(k));
        run.add(&[
            row(loss, 1, 100.0, 5.0),
            row(loss, 2, 101.5, 4.0),
            row(sv(0), 2, 101.5, 1.0),
            row(sv(1), 2, 101.5, 0.5),
        ]);
        assert_eq!(run.points(loss), vec![(1, 0.0, 5.0), (2, 1.5, 4.0)]);
        assert_eq!(run.spectrum(), &[1.0, 0.5]);
        // A resumed run re-records step 2: the newest value wins. A newer spectrum replaces
        // the older one whole (it may be shorter).
        run.add(&[row(loss, 2, 103.0, 3.5), row(sv(0), 4, 104.0, 0.9)]);
        assert_eq!(run.last(split::TRAIN, "total", "loss"), Some((2, 3.5)));
        assert_eq!(run.spectrum(), &[0.9]);
        assert_eq!(run.step(), Some(2));
    }

    /// Issue #37: a metric picker with fuzzy search: `/` and the letters in order.
    #[test]
    fn the_curve_search_finds_by_letters_in_order() {
        let name = |i: usize| CURVES[i].name.clone();
        let matches = |q| curve_matches(&CURVES, q);
        assert_eq!(name(matches("ir")[0]), "i1-rare");
        assert_eq!(name(matches("cosr")[0]), "mean-cos-rare");
        assert_eq!(name(matches("GRAD")[0]), "grad-norm");
        assert!(matches("zzz").is_empty());
        assert_eq!(matches("").len(), CURVES.len());
        let mut app = CompareApp::new(vec![PathBuf::from("a")], CompareOptions::default());
        let key = |c: KeyCode| KeyEvent::new(c, KeyModifiers::NONE);
        app.apply(action_for(key(KeyCode::Char('/'))));
        assert_eq!(app.search.as_deref(), Some(""));
        for c in "iso rare".chars() {
            app.search_key(key(KeyCode::Char(c)));
        }
        // Letters are the query, not commands ('o' would switch the outliers).
        assert_eq!(app.clip_outliers, None);
        assert_eq!(CURVES[app.curve].name, "isoscore-rare");
        for _ in 0..5 {
            app.search_key(key(KeyCode::Backspace));
        }
        assert_eq!(app.search.as_deref(), Some("iso"));
        app.search_key(key(KeyCode::Char('s')));
        assert_eq!(CURVES[app.curve].name, "isoscore");
        app.search_key(key(KeyCode::Down));
        let second = app.curve;
        assert_eq!(CURVES[second].name, "isoscore-freq");
        app.search_key(key(KeyCode::Enter));
        assert_eq!((app.search.as_deref(), app.curve), (None, second));
        app.apply(action_for(key(KeyCode::Char('/'))));
        app.search_key(key(KeyCode::Char('x')));
        app.search_key(key(KeyCode::Esc));
        assert_eq!((app.search.as_deref(), app.curve), (None, second));
        // Ctrl-C leaves from the search too, as everywhere.
        app.apply(action_for(key(KeyCode::Char('/'))));
        app.search_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert!(app.exit && app.search.is_none());
    }

    /// Issue #37: "compare any stored metric": the series the runs have stored join the list
    /// under their store names, the search reaches them, and the one picked is asked of the
    /// follower once.
    #[test]
    fn stored_series_join_the_list_and_the_one_picked_is_asked_for() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut app = CompareApp::new(vec![PathBuf::from("a")], CompareOptions::default());
        app.want = Some(tx);
        let name = |s: &str, g: &str, m: &str| SeriesName {
            split: s.into(),
            group: g.into(),
            metric: m.into(),
        };
        app.curve = Curve::by_name("i1-rare").expect("named");
        app.on_update(FollowUpdate::Series {
            names: vec![
                name("valid", "rare", "uniq"),
                name("train", "total", "loss"),
                name("embedding", "rare", "i2"),
                name("spectrum", "total", "sv0003"),
            ],
        });
        let names: Vec<&str> = app.curves[CURVES.len()..]
            .iter()
            .map(|c| &*c.name)
            .collect();
        // The loss is a named curve already; a spectrum value is not a curve; name order.
        assert_eq!(names, ["embedding/rare/i2", "valid/rare/uniq"]);
        assert_eq!(app.curve().name, "i1-rare", "the curve shown stays");
        // Two more arrive and sort in before: still the same curve shown.
        app.curve = app.curves.len() - 1;
        app.on_update(FollowUpdate::Series {
            names: vec![
                name("embedding", "frequent", "i2"),
                name("test", "total", "mu_z"),
            ],
        });
        assert_eq!(app.curve().name, "valid/rare/uniq");
        assert_eq!(app.curves.len(), CURVES.len() + 4);
        // Picked by search, it is asked for once, however often it is shown again.
        let key = |c: KeyCode| ViewerEvent::Key(KeyEvent::new(c, KeyModifiers::NONE));
        let area = Rect::new(0, 0, 80, 24);
        for c in "/mu_z".chars() {
            app.on_event(key(KeyCode::Char(c)), area);
        }
        app.on_event(key(KeyCode::Enter), area);
        assert_eq!(app.curve().name, "test/total/mu_z");
        let mu_z = series_key("test", "total", "mu_z");
        app.on_event(key(KeyCode::Up), area);
        app.on_event(key(KeyCode::Down), area);
        let asked: Vec<i64> = rx.try_iter().collect();
        assert_eq!(asked.iter().filter(|&&k| k == mu_z).count(), 1, "{asked:?}");
        // A named curve is sent from the start: never asked for.
        app.curve = 0;
        app.on_event(key(KeyCode::Down), area);
        assert!(rx.try_iter().next().is_none());
        // The follower gone: said, not a panic.
        drop(rx);
        app.on_update(FollowUpdate::Series {
            names: vec![name("valid", "total", "seconds")],
        });
        app.curve = app
            .curves
            .iter()
            .position(|c| c.name == "valid/total/seconds")
            .expect("added");
        app.on_event(key(KeyCode::Char('x')), area);
        assert!(app.follower_stopped);
    }

    #[test]
    fn curve_parses_named_and_stored_spellings() {
        assert_eq!(
            Curve::parse("i1-rare").map(|c| c.name),
            Some("i1-rare".into())
        );
        let c = Curve::parse("valid/rare/uniq").expect("a stored series");
        assert_eq!(
            (c.key(), &*c.label),
            (series_key("valid", "rare", "uniq"), "valid/rare/uniq")
        );
        assert_eq!(
            Curve::parse("train/grad_norm").map(|c| c.key()),
            Some(series_key("train", "total", "grad_norm"))
        );
        // Spelled out, a named curve is the named one.
        assert_eq!(
            Curve::parse("embedding/rare/i1").map(|c| c.name),
            Some("i1-rare".into())
        );
        for bad in ["", "nope", "a//b", "a/b/c/d", "valid/rare/uniq ", "/x/y"] {
            assert_eq!(Curve::parse(bad), None, "{bad:?}");
        }
        // One shown first though no run has it yet: offered, and shown.
        let app = CompareApp::new(
            vec![],
            CompareOptions {
                curve: Curve::parse("valid/rare/uniq").expect("parses"),
                ..CompareOptions::default()
            },
        );
        assert_eq!(app.curve().name, "valid/rare/uniq");
        assert_eq!(app.curves.len(), CURVES.len() + 1);
    }

    /// Issue #37: the first losses (about ln V) flattened every curve, and a 4-point
    /// validation curve was smoothed into its first point.
    #[test]
    fn outliers_leave_the_loss_range_and_short_curves_are_drawn_raw() {
        // 0..=99 and one outlier: 101 values, nearest rank at 1 % is index 1 (1.0), at 99 %
        // index 99 (99.0); 5 % of the span (4.9) on each side.
        let values = (0..100).map(f64::from).chain([1e6]);
        assert_eq!(
            render::percentile_range(values),
            Some((1.0 - 4.9, 99.0 + 4.9))
        );
        assert_eq!(render::percentile_range((0..19).map(f64::from)), None);
        let mut app = CompareApp::new(vec![PathBuf::from("a")], CompareOptions::default());
        let curve = |name| Curve::by_name(name).expect("a curve");
        for (name, clipped) in [
            ("loss", true),
            ("ppl-rare", true),
            ("i1-rare", false),
            ("lr", false),
        ] {
            app.curve = curve(name);
            assert_eq!(app.clipping(), clipped, "{name}");
        }
        app.curve = curve("loss");
        app.apply(action_for(KeyEvent::new(
            KeyCode::Char('o'),
            KeyModifiers::NONE,
        )));
        assert!(!app.clipping(), "o switches it off");
        assert!(app.smoothed(20) && !app.smoothed(19) && !app.smoothed(4));
        app.apply(CompareAction::Smoothing(-1.0));
        assert!(!app.smoothed(1000), "smoothing 0 draws raw");
    }

    #[test]
    fn keys_move_the_curve_the_smoothing_and_hide_runs() {
        let mut app = CompareApp::new(
            vec![PathBuf::from("a"), PathBuf::from("b")],
            CompareOptions::default(),
        );
        let press = |app: &mut CompareApp, code| {
            app.apply(action_for(KeyEvent::new(code, KeyModifiers::NONE)))
        };
        press(&mut app, KeyCode::Up);
        assert_eq!(app.curve, CURVES.len() - 1, "the list wraps");
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Down);
        assert_eq!(*app.curve(), CURVES[1]);
        for _ in 0..10 {
            press(&mut app, KeyCode::Char('+'));
        }
        assert_eq!(app.smoothing, MAX_SMOOTHING);
        press(&mut app, KeyCode::Char('0'));
        assert_eq!(app.smoothing, 0.0);
        press(&mut app, KeyCode::Char('+'));
        press(&mut app, KeyCode::Char('+'));
        press(&mut app, KeyCode::Char('-'));
        assert_eq!(app.smoothing, 0.1);
        // `m`, the workbench's key: off, then back to the weight it had.
        press(&mut app, KeyCode::Char('m'));
        assert_eq!(app.smoothing, 0.0);
        press(&mut app, KeyCode::Char('m'));
        assert_eq!(app.smoothing, 0.1);
        // Esc closes the zoom before it leaves.
        press(&mut app, KeyCode::Char('z'));
        press(&mut app, KeyCode::Esc);
        assert!(!app.zoom && !app.exit);
        press(&mut app, KeyCode::Char('2'));
        assert!(app.runs[1].hidden && !app.runs[0].hidden);
        press(&mut app, KeyCode::Char('9'));
        press(&mut app, KeyCode::Char('x'));
        assert_eq!(app.x_axis, XAxis::Time);
        press(&mut app, KeyCode::Char('?'));
        press(&mut app, KeyCode::Char('q'));
        assert!(!app.help && !app.exit, "q closes the help first");
        press(&mut app, KeyCode::Char('q'));
        assert!(app.exit);
    }

    #[test]
    fn a_reset_replaces_what_was_there_and_warnings_are_bounded() {
        let mut app = CompareApp::new(vec![PathBuf::from("a")], CompareOptions::default());
        let loss = CURVES[0].key();
        app.on_update(FollowUpdate::Rows {
            run: 0,
            reset: true,
            rows: vec![row(loss, 1, 0.0, 5.0), row(loss, 2, 1.0, 4.0)],
        });
        app.on_update(FollowUpdate::Rows {
            run: 0,
            reset: true,
            rows: vec![row(loss, 2, 1.0, 4.0)],
        });
        assert_eq!(app.runs[0].points(loss).len(), 1);
        // An update for a run that is not there is ignored (no panic).
        app.on_update(FollowUpdate::Rows {
            run: 7,
            reset: false,
            rows: vec![],
        });
        for i in 0..10 {
            app.on_update(FollowUpdate::Warning {
                run: 0,
                message: format!("w{i}"),
            });
        }
        assert_eq!(app.warnings.len(), WARNINGS);
        assert_eq!(app.warnings.back().map(String::as_str), Some("a: w9"));
    }
}
