//! Offline analysis behind `conelab eval` (a checkpoint on a split: every model-output and
//! embedding metric) and `conelab inspect` (any embedding matrix: embedding metrics and
//! neighbour tables). Builds the reports; the binary prints them as tables or JSON.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::engine::EngineError;
use conelab_core::analysis::{SecondTierError, second_tier_stats};
use conelab_core::events::{EvalStats, SecondTierStats};
use conelab_core::model::DeviceSpec;
use conelab_core::run_dir::matrix::{LoadedMatrix, run_classes};
use conelab_data::{Group, GroupBounds, Split, thousands};
use conelab_metrics::bootstrap::{
    BootstrapError, Interval, SentenceScores, bootstrap_ppl_reporting,
};
use conelab_metrics::hidden::HiddenStats;
use conelab_metrics::hull::{HullError, RowVerdict, can_win_upper_bound, stolen_rows};
use conelab_metrics::neighbors::{ClassPrecision, class_precision};
use conelab_metrics::outputs::ShiftedOutputs;
use conelab_metrics::stolen::{StolenCount, StolenSummary, summarise};
use conelab_metrics::{
    EmbeddingPanel, Embeddings, MatrixError, NeighborIndex, PanelOptions, RowGroups, SetStats,
    Similarity, Threads,
};

#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error(transparent)]
    Matrix(#[from] MatrixError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Checkpoint(#[from] conelab_core::run_dir::CheckpointError),
    #[error(transparent)]
    Word(#[from] WordError),
    #[error("-k must be at least 1")]
    ZeroK,
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Hull(#[from] HullError),
    #[error(transparent)]
    SecondTier(#[from] SecondTierError),
}

use conelab_core::words::{WordError, resolve_word};

/// Embedding metrics as JSON with the documented keys: `n`, `d`, `i1`, `i2`, `i1_unit`,
/// `i2_unit`, `isoscore`, `mean_norm`, `sv_norm`, `effective_rank`, `mean_cos` (plus `sv_max`,
/// `mean_cos_to_mean`).
fn set_json(s: &SetStats) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("rows".into(), json!(s.rows));
    m.insert("i1".into(), num(s.i1));
    m.insert("i2".into(), num(s.i2));
    m.insert("i1_unit".into(), num(s.i1_unit));
    m.insert("i2_unit".into(), num(s.i2_unit));
    m.insert("isoscore".into(), num(s.isoscore));
    m.insert("mean_norm".into(), num(s.mean_norm));
    m.insert(
        "sv_norm".into(),
        Value::Array(s.sv_norm.iter().map(|&v| num(v)).collect()),
    );
    m.insert("sv_max".into(), num(s.sv_max));
    m.insert("effective_rank".into(), num(s.effective_rank));
    m.insert("mean_cos".into(), num(s.mean_cos));
    m.insert("mean_cos_to_mean".into(), num(s.mean_cos_to_mean));
    m.insert("abtt_top_variance".into(), num(s.abtt_top_variance));
    m.insert("abtt_mean_cos".into(), num(s.abtt_mean_cos));
    m.insert("rogue_share".into(), num(s.rogue_share));
    m
}

/// JSON has no NaN: undefined values (an empty group) are `null`.
fn num(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

pub fn panel_json(panel: &EmbeddingPanel) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("n".into(), json!(panel.n));
    m.insert("d".into(), json!(panel.d));
    m.extend(set_json(&panel.total));
    m.remove("rows");
    if let Some(groups) = &panel.groups {
        let g: Map<String, Value> = Group::ALL
            .iter()
            .zip(groups)
            .map(|(g, s)| (g.name().to_owned(), Value::Object(set_json(s))))
            .collect();
        m.insert("groups".into(), Value::Object(g));
        m.insert(
            "rare_frequent_cos".into(),
            num(panel.rare_frequent_cos.unwrap_or(f64::NAN)),
        );
    }
    m
}

/// What `inspect` was asked for.
#[derive(Debug, Clone)]
pub struct InspectRequest {
    pub queries: Vec<String>,
    pub k: usize,
    pub similarity: Similarity,
}

#[derive(Debug, Clone)]
pub struct NeighborRow {
    pub token: String,
    pub id: u32,
    pub score: f32,
    pub group: Option<Group>,
    pub count: Option<u64>,
}

pub struct InspectReport {
    pub source: String,
    pub step: Option<u64>,
    pub panel: EmbeddingPanel,
    pub neighbors: Vec<(String, Vec<NeighborRow>)>,
    pub similarity: Similarity,
    pub class_precision: Option<ClassPrecision>,
    /// `inspect --stolen`: every row's exact verdict, per group.
    pub stolen: Option<StolenReport>,
    /// `inspect --second-tier`: the all-pairs measures per group.
    pub second_tier: Option<SecondTierStats>,
}

/// The all-pairs measures of `m` per group (the live workbench's second tier, on every core):
/// `None` without training counts (no groups).
pub fn second_tier_report(
    m: &LoadedMatrix,
    bounds: GroupBounds,
) -> Result<Option<SecondTierStats>, AnalysisError> {
    let Some(counts) = m.counts.as_deref() else {
        return Ok(None);
    };
    let w = Embeddings::new(m.n, m.d, &m.data)?;
    let groups = RowGroups::from_counts(counts, bounds);
    let stats = second_tier_stats(w, &groups, m.bias.as_deref(), Threads::All)?;
    Ok(Some(stats))
}

fn second_tier_json(t: &SecondTierStats) -> Value {
    let per_group = |v: Vec<Value>| -> Value {
        let m: Map<String, Value> = Group::ALL
            .iter()
            .zip(v)
            .map(|(g, x)| (g.name().to_owned(), x))
            .collect();
        Value::Object(m)
    };
    json!({
        "neighbour_mix": per_group(t.same_group.iter().map(|&v| num(v)).collect()),
        "two_nn": per_group(t.two_nn.iter().map(|&v| num(v)).collect()),
        "two_nn_duplicates": per_group(t.two_nn_duplicates.iter().map(|&v| json!(v)).collect()),
        "stolen_at_most": per_group(t.stolen_at_most.iter().map(|&v| json!(v)).collect()),
        "seconds": num(t.seconds),
    })
}

fn second_tier_text(t: &SecondTierStats) -> String {
    let mut out = format!(
        "\nall pairs of rows ({:.1} s)   {:>12} {:>12} {:>12}\n",
        t.seconds, "frequent", "medium", "rare"
    );
    let row = |label: &str, v: &[f64]| format!("{label:<26} {}\n", fmt_row(v, 12).join(" "));
    out.push_str(&row("same-group top-10 nbrs", &t.same_group));
    out.push_str(&row("TwoNN dimension", &t.two_nn));
    let counts = |v: &[usize]| {
        v.iter()
            .map(|&c| format!("{:>12}", thousands(c as u64)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    out.push_str(&format!(
        "{:<26} {}\n",
        "TwoNN duplicates left out",
        counts(&t.two_nn_duplicates)
    ));
    out.push_str(&format!(
        "{:<26} {}\n",
        "stolen ≤ (cheap bound)",
        counts(&t.stolen_at_most)
    ));
    out
}

/// Stolen probability of a matrix (methods.md §2): the exact count per group beside the cheap
/// test's upper bound (the live figure), with the output bias where the checkpoint has one.
#[derive(Debug, Clone)]
pub struct StolenReport {
    pub exact: StolenSummary,
    /// Rows the cheap test (h = w_i, h = w_i − mean) cannot prove able to win, per group: an
    /// upper bound on `exact`'s stolen counts.
    pub upper_bound: StolenSummary,
    pub bias: bool,
    pub seconds: f64,
}

/// [`StolenReport`] of `m`: Wolfe's minimum-norm point per row on every core (minutes for a
/// 33,278 × 400 W), telling `progress(done, n)` as rows are decided.
pub fn stolen_report(
    m: &LoadedMatrix,
    bounds: GroupBounds,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<StolenReport, AnalysisError> {
    let start = std::time::Instant::now();
    let w = Embeddings::new(m.n, m.d, &m.data)?;
    let groups = m
        .counts
        .as_deref()
        .map(|c| RowGroups::from_counts(c, bounds));
    let bias = m.bias.as_deref();
    let verdicts = stolen_rows(w, bias, Threads::All, progress)?;
    // The cheap test's verdicts: proven rows can win, the rest counted as stolen (the bound).
    let bound: Vec<RowVerdict> = can_win_upper_bound(w, bias, Threads::All)?
        .proven
        .into_iter()
        .map(|p| {
            if p {
                RowVerdict::CanWin
            } else {
                RowVerdict::Stolen
            }
        })
        .collect();
    let counts = m.counts.as_deref();
    Ok(StolenReport {
        exact: summarise(w, &verdicts, groups.as_ref(), counts),
        upper_bound: summarise(w, &bound, groups.as_ref(), counts),
        bias: bias.is_some(),
        seconds: start.elapsed().as_secs_f64(),
    })
}

impl StolenReport {
    fn sets(&self) -> Vec<(&'static str, StolenCount, usize)> {
        let mut sets = vec![("total", self.exact.total, self.upper_bound.total.stolen)];
        if let (Some(g), Some(b)) = (&self.exact.groups, &self.upper_bound.groups) {
            for (k, group) in Group::ALL.iter().enumerate() {
                sets.push((group.name(), g[k], b[k].stolen));
            }
        }
        sets
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (name, c, bound) in self.sets() {
            m.insert(
                name.into(),
                json!({
                    "rows": c.rows,
                    "stolen": c.stolen,
                    "fraction": num(c.fraction()),
                    "undecided": c.undecided,
                    "stolen_at_most": bound,
                }),
            );
        }
        m.insert(
            "norm_count_spearman".into(),
            num(self.exact.norm_count_spearman),
        );
        m.insert("bias".into(), json!(self.bias));
        m.insert("seconds".into(), num(self.seconds));
        Value::Object(m)
    }

    pub fn render(&self) -> String {
        let mut out = format!(
            "\nstolen probability (rows no h makes the argmax of h·Wᵀ{}; exact, {:.1} s)\n  {:<9} {:>8} {:>8} {:>9} {:>10} {:>14}\n",
            if self.bias { " + b" } else { "" },
            self.seconds,
            "group",
            "rows",
            "stolen",
            "fraction",
            "undecided",
            "cheap bound ≤"
        );
        for (name, c, bound) in self.sets() {
            out.push_str(&format!(
                "  {:<9} {:>8} {:>8} {:>9} {:>10} {:>14}\n",
                name,
                thousands(c.rows as u64),
                thousands(c.stolen as u64),
                fmt(c.fraction(), 9).trim(),
                thousands(c.undecided as u64),
                thousands(bound as u64),
            ));
        }
        out.push_str(&format!(
            "  Spearman(row norm, log count): {}\n",
            fmt(self.exact.norm_count_spearman, 0).trim()
        ));
        out
    }
}

pub fn inspect(
    m: &LoadedMatrix,
    bounds: GroupBounds,
    request: &InspectRequest,
) -> Result<InspectReport, AnalysisError> {
    if request.k == 0 {
        return Err(AnalysisError::ZeroK);
    }
    let w = Embeddings::new(m.n, m.d, &m.data)?;
    let groups = m
        .counts
        .as_deref()
        .map(|c| RowGroups::from_counts(c, bounds));
    let tokens = m.tokens.as_deref();
    // Resolve every query before the heavy work, so a typo fails fast.
    let ids = request
        .queries
        .iter()
        .map(|q| resolve_word(q, tokens, m.n))
        .collect::<Result<Vec<_>, _>>()?;
    let options = PanelOptions {
        projection: None,
        also_centred: false,
        scale_free: true,
        threads: Threads::All,
    };
    let panel = EmbeddingPanel::compute(w, groups.as_ref(), &options)?;
    let needs_index = !ids.is_empty() || (m.classes.is_some() && groups.is_some());
    let index = needs_index.then(|| NeighborIndex::new(w, Threads::All));
    let name = |id: u32| {
        tokens
            .and_then(|t| t.get(id as usize).cloned())
            .unwrap_or_else(|| format!("#{id}"))
    };
    let mut neighbors = Vec::new();
    if let Some(index) = &index {
        for (q, &id) in request.queries.iter().zip(&ids) {
            let rows = index
                .query(id, request.k, request.similarity)
                .into_iter()
                .map(|nb| NeighborRow {
                    token: name(nb.id),
                    id: nb.id,
                    score: nb.score,
                    group: groups.as_ref().map(|g| g.group_of(nb.id as usize)),
                    count: m.counts.as_ref().map(|c| c[nb.id as usize]),
                })
                .collect();
            neighbors.push((q.clone(), rows));
        }
    }
    let class_precision = match (&index, &m.classes, &groups) {
        (Some(index), Some(classes), Some(groups)) => {
            Some(class_precision(index, classes, groups, request.k)?)
        }
        _ => None,
    };
    Ok(InspectReport {
        source: m.source.clone(),
        step: m.step,
        panel,
        neighbors,
        similarity: request.similarity,
        class_precision,
        stolen: None,
        second_tier: None,
    })
}

fn class_precision_json(p: &ClassPrecision) -> Value {
    json!({
        "k": p.k,
        "total": num(p.total),
        "frequent": num(p.groups[0]),
        "medium": num(p.groups[1]),
        "rare": num(p.groups[2]),
    })
}

impl InspectReport {
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("source".into(), json!(self.source));
        m.insert("step".into(), json!(self.step));
        m.extend(panel_json(&self.panel));
        let key = match self.similarity {
            Similarity::Cosine => "cosine",
            Similarity::Euclidean => "distance",
        };
        let neighbors: Map<String, Value> = self
            .neighbors
            .iter()
            .map(|(q, rows)| {
                let arr = rows
                    .iter()
                    .map(|r| {
                        let mut o = Map::new();
                        o.insert("token".into(), json!(r.token));
                        o.insert(key.into(), json!(r.score));
                        o.insert("id".into(), json!(r.id));
                        if let Some(g) = r.group {
                            o.insert("group".into(), json!(g.name()));
                        }
                        if let Some(c) = r.count {
                            o.insert("count".into(), json!(c));
                        }
                        Value::Object(o)
                    })
                    .collect();
                (q.clone(), Value::Array(arr))
            })
            .collect();
        m.insert("neighbors".into(), Value::Object(neighbors));
        if let Some(p) = &self.class_precision {
            m.insert("class_precision".into(), class_precision_json(p));
        }
        if let Some(s) = &self.stolen {
            m.insert("stolen".into(), s.to_json());
        }
        if let Some(t) = &self.second_tier {
            m.insert("second_tier".into(), second_tier_json(t));
        }
        Value::Object(m)
    }

    pub fn render(&self) -> String {
        let mut out = format!(
            "{}{}: {} x {}\n",
            self.source,
            self.step
                .map(|s| format!(" (step {s})"))
                .unwrap_or_default(),
            thousands(self.panel.n as u64),
            self.panel.d
        );
        out.push_str(&panel_table(&self.panel));
        if let Some(p) = &self.class_precision {
            out.push_str(&format!(
                "same-class precision@{}: total {:.3} | frequent {:.3} | medium {:.3} | rare {:.3}\n",
                p.k, p.total, p.groups[0], p.groups[1], p.groups[2]
            ));
        }
        let header = match self.similarity {
            Similarity::Cosine => "cosine",
            Similarity::Euclidean => "distance",
        };
        for (q, rows) in &self.neighbors {
            out.push_str(&format!(
                "\nneighbours of {q:?}\n  {:>3}  {:<24} {:>9}  {:<8} {:>10}\n",
                "#", "token", header, "group", "count"
            ));
            for (i, r) in rows.iter().enumerate() {
                out.push_str(&format!(
                    "  {:>3}  {:<24} {:>9.4}  {:<8} {:>10}\n",
                    i + 1,
                    r.token,
                    r.score,
                    r.group.map(|g| g.name()).unwrap_or("-"),
                    r.count.map(thousands).unwrap_or_else(|| "-".into())
                ));
            }
        }
        if let Some(t) = &self.second_tier {
            out.push_str(&second_tier_text(t));
        }
        if let Some(s) = &self.stolen {
            out.push_str(&s.render());
        }
        out
    }
}

fn fmt(v: f64, width: usize) -> String {
    fmt_as(v, width, needs_scientific(v))
}

/// A value too large or too small for four decimals to say it in a 12-character column (a
/// u-perp of 3·10⁻⁵ must not print as 0.0000); a PPL of 230.2 or 49,353.2 is written plainly,
/// as the workbench writes it (issue #58: `2.302e2` beside a Rare PPL over 10⁵).
fn needs_scientific(v: f64) -> bool {
    let a = v.abs();
    v.is_finite() && a != 0.0 && !(1e-3..1e7).contains(&a)
}

fn fmt_as(v: f64, width: usize, scientific: bool) -> String {
    if !v.is_finite() {
        format!("{:>width$}", "-")
    } else if scientific {
        format!("{v:>width$.3e}")
    } else {
        format!("{v:>width$.4}")
    }
}

/// A row of values in one notation: scientific for all when one needs it (a row read across the
/// groups must not mix 1234.5678 with 1.235e5).
fn fmt_row(values: &[f64], width: usize) -> Vec<String> {
    let scientific = values.iter().any(|&v| needs_scientific(v));
    values
        .iter()
        .map(|&v| fmt_as(v, width, scientific))
        .collect()
}

/// Embedding metrics with the groups as columns (Yu et al. Table 3 layout).
pub fn panel_table(p: &EmbeddingPanel) -> String {
    let sets: Vec<(&str, &SetStats)> = match &p.groups {
        Some(g) => vec![
            ("frequent", &g[0]),
            ("medium", &g[1]),
            ("rare", &g[2]),
            ("total", &p.total),
        ],
        None => vec![("total", &p.total)],
    };
    let mut out = format!("{:<22}", "embedding");
    for (name, _) in &sets {
        out.push_str(&format!(" {name:>12}"));
    }
    out.push('\n');
    type Column = fn(&SetStats) -> f64;
    let rows: [(&str, Column); 15] = [
        ("rows", |s| s.rows as f64),
        ("I1(W)", |s| s.i1),
        ("I2(W)", |s| s.i2),
        ("I1 unit rows", |s| s.i1_unit),
        ("I2 unit rows", |s| s.i2_unit),
        ("IsoScore", |s| s.isoscore),
        ("mean norm", |s| s.mean_norm),
        ("mean cosine", |s| s.mean_cos),
        ("cosine to mean", |s| s.mean_cos_to_mean),
        ("top-D variance", |s| s.abtt_top_variance),
        ("cos w/o top-D", |s| s.abtt_mean_cos),
        ("rogue-3 share", |s| s.rogue_share),
        ("effective rank", |s| s.effective_rank),
        ("sigma_max", |s| s.sv_max),
        ("sigma_10 / sigma_max", |s| {
            s.sv_norm.get(9).copied().unwrap_or(f64::NAN)
        }),
    ];
    for (label, f) in rows {
        out.push_str(&format!("{label:<22}"));
        if label == "rows" {
            for (_, s) in &sets {
                out.push_str(&format!(" {:>12}", thousands(s.rows as u64)));
            }
        } else {
            let values: Vec<f64> = sets.iter().map(|(_, s)| f(s)).collect();
            for cell in fmt_row(&values, 12) {
                out.push_str(&format!(" {cell}"));
            }
        }
        out.push('\n');
    }
    if let Some(rf) = p.rare_frequent_cos {
        out.push_str(&format!(
            "mean cosine rare-frequent: {}\n",
            fmt(rf, 0).trim()
        ));
    }
    out
}

/// `conelab eval`: one checkpoint on one split.
pub struct EvalReport {
    pub run: String,
    pub step: u64,
    /// The objectives in force at the checkpoint, as a label (`MLE`, `CosReg γ=1`, …).
    pub objective: String,
    pub device: String,
    pub eval: EvalStats,
    pub panel: EmbeddingPanel,
    pub class_precision: Option<ClassPrecision>,
    /// The shifted model (`eval --shift-from`): scores minus that split's μ_z.
    pub shifted: Option<ShiftedOutputs>,
    /// The split whose μ_z is the shift.
    pub shift_from: Option<Split>,
    /// The split's sentences as scored (`eval --bootstrap`, `--paired`).
    pub scores: Option<SentenceScores>,
    /// Frequent, medium, rare and total PPL with their 95 % bootstrap interval, and the number
    /// of replicates.
    pub bootstrap: Option<([Interval; 4], usize)>,
}

/// What `conelab eval` computes for one checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct EvalOptions {
    pub split: Split,
    pub device: Option<DeviceSpec>,
    /// k of the same-class precision@k; 0 skips it.
    pub k: usize,
    /// Also report the shifted model, its shift the μ_z of this split (Goldberger & Melamud).
    pub shift_from: Option<Split>,
    /// Keep the split's per-sentence scores (for a bootstrap or a paired comparison).
    pub keep_scores: bool,
    /// Per-group 95 % intervals from this many resamplings of the split's sentences.
    pub bootstrap: Option<usize>,
}

/// The seed of every bootstrap's draws: the same intervals on every run of the command.
pub const BOOTSTRAP_SEED: u64 = 2026;

/// Where [`evaluate_checkpoint_reporting`] is, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalProgress {
    /// Scoring the split: prediction positions done of total.
    Scoring { done: u64, total: u64 },
    /// Resampling the split's sentences: replicates done of total.
    Bootstrap { done: u64, total: u64 },
    /// The embedding's geometry (one step, no count).
    Geometry,
}

pub fn evaluate_checkpoint(
    path: &Path,
    options: &EvalOptions,
) -> Result<EvalReport, AnalysisError> {
    evaluate_checkpoint_reporting(path, options, &mut |_| {})
}

/// [`evaluate_checkpoint`], telling `progress` where it is.
pub fn evaluate_checkpoint_reporting(
    path: &Path,
    options: &EvalOptions,
    progress: &mut dyn FnMut(EvalProgress),
) -> Result<EvalReport, AnalysisError> {
    let &EvalOptions {
        split,
        device,
        k,
        shift_from,
        keep_scores,
        bootstrap,
    } = options;
    let (trainer, run) = crate::checkpoint::resume_on(path, None, device)?;
    let (eval, scores) = if keep_scores || bootstrap.is_some() {
        let (eval, log_probs) = trainer.evaluate_scored_reporting(split, &mut |done, total| {
            progress(EvalProgress::Scoring { done, total })
        })?;
        let corpus = trainer.corpus();
        let groups = corpus.groups();
        let scores =
            SentenceScores::new(corpus.split(split), &log_probs, corpus.vocab().eos(), |t| {
                groups.group_of(t) as usize
            })?;
        (eval, Some(scores))
    } else {
        let eval = trainer.evaluate_reporting(split, &mut |done, total| {
            progress(EvalProgress::Scoring { done, total })
        })?;
        (eval, None)
    };
    let bootstrap = match (bootstrap, &scores) {
        (Some(n), Some(s)) => {
            let total = n as u64;
            let mut heard = |done: usize| {
                progress(EvalProgress::Bootstrap {
                    done: done as u64,
                    total,
                })
            };
            Some((
                bootstrap_ppl_reporting(s, n, BOOTSTRAP_SEED, &mut heard)?,
                n,
            ))
        }
        _ => None,
    };
    let shifted = match shift_from {
        Some(s) if s == split => Some(eval.outputs.shifted(eval.outputs.mu_z)),
        Some(s) => Some(eval.outputs.shifted(trainer.evaluate(s)?.outputs.mu_z)),
        None => None,
    };
    progress(EvalProgress::Geometry);
    let snapshot = trainer.snapshot()?;
    let w = Embeddings::new(snapshot.n, snapshot.d, &snapshot.weights)?;
    let groups = RowGroups::from_ranks(trainer.corpus().groups());
    let options = PanelOptions {
        projection: None,
        also_centred: false,
        scale_free: true,
        threads: Threads::All,
    };
    let panel = EmbeddingPanel::compute(w, Some(&groups), &options)?;
    let class_precision = match run_classes(&run, trainer.corpus().vocab().tokens()) {
        Some(classes) if k > 0 => {
            let index = NeighborIndex::new(w, Threads::All);
            Some(class_precision(&index, &classes, &groups, k)?)
        }
        _ => None,
    };
    Ok(EvalReport {
        run: run.path().display().to_string(),
        step: trainer.state().step,
        objective: trainer.objectives().label(),
        device: trainer.device_spec().to_string(),
        eval,
        panel,
        class_precision,
        shifted,
        shift_from,
        scores,
        bootstrap,
    })
}

/// Intervals of frequent, medium, rare and total as JSON: `{"replicates", "sentences", "seed",
/// "frequent": {"estimate", "lo", "hi"}, …}`.
pub fn bootstrap_json(intervals: &[Interval; 4], replicates: usize, sentences: usize) -> Value {
    let mut m = Map::new();
    m.insert("replicates".into(), json!(replicates));
    m.insert("sentences".into(), json!(sentences));
    m.insert("seed".into(), json!(BOOTSTRAP_SEED));
    for (name, i) in ["frequent", "medium", "rare", "total"]
        .iter()
        .zip(intervals)
    {
        m.insert(
            (*name).into(),
            json!({"estimate": num(i.estimate), "lo": num(i.lo), "hi": num(i.hi)}),
        );
    }
    Value::Object(m)
}

/// Goldberger & Melamud's Tables 3/4 layout, a row per run: μ_z, σ_z, PPL and unnormalised PPL,
/// of the model and (with `--shift-from`) of the shifted model. Markdown.
pub fn self_normalisation_markdown(reports: &[EvalReport]) -> String {
    let mut out = String::from(
        "| run | objective | split | μ_z | σ_z | perp | u-perp | shift | shifted μ_z | shifted u-perp |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in reports {
        let o = &r.eval.outputs;
        let (shift, mu, up) = match &r.shifted {
            Some(s) => (
                format!("{:.3}", s.shift),
                format!("{:.3}", s.mu_z),
                fmt(s.unnormalised_ppl, 0).trim().to_owned(),
            ),
            None => ("–".into(), "–".into(), "–".into()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.1} | {} | {shift} | {mu} | {up} |\n",
            run_name(&r.run),
            r.objective,
            r.eval.split,
            o.mu_z,
            o.sigma_z,
            o.ppl,
            fmt(o.unnormalised_ppl, 0).trim(),
        ));
    }
    out
}

fn run_name(run: &str) -> String {
    Path::new(run)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| run.to_owned())
}

/// Several evaluations side by side, one row per run (Yu et al. Table 1/3 layout): PPL and I1
/// per group, total Uniq, mean pairwise cosine. Markdown.
pub fn comparison_markdown(reports: &[EvalReport]) -> String {
    let mut out = String::from(
        "| run | objective | step | PPL freq | PPL med | PPL rare | PPL total | Uniq | I1 freq | I1 med | I1 rare | I1 total | mean cos |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in reports {
        let o = &r.eval.outputs;
        let name = run_name(&r.run);
        let i1 = |g: usize| {
            r.panel
                .groups
                .as_ref()
                .map(|gs| format!("{:.3}", gs[g].i1))
                .unwrap_or_else(|| "–".into())
        };
        out.push_str(&format!(
            "| {name} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {} | {} | {} | {:.3} | {:.3} |\n",
            r.objective,
            r.step,
            o.groups[0].ppl,
            o.groups[1].ppl,
            o.groups[2].ppl,
            r.eval.ppl,
            o.uniq,
            i1(0),
            i1(1),
            i1(2),
            r.panel.total.i1,
            r.panel.total.mean_cos,
        ));
    }
    out
}

impl EvalReport {
    pub fn to_json(&self) -> Value {
        let o = &self.eval.outputs;
        let groups: Map<String, Value> = Group::ALL
            .iter()
            .zip(&o.groups)
            .map(|(g, s)| {
                (
                    g.name().to_owned(),
                    json!({
                        "ppl": num(s.ppl),
                        "positions": s.positions,
                        "uniq": s.uniq,
                        "human_uniq": s.human_uniq,
                        "theorem2_below": s.theorem2_below,
                        "tokens": s.tokens,
                    }),
                )
            })
            .collect();
        let mut m = Map::new();
        m.insert("run".into(), json!(self.run));
        m.insert("step".into(), json!(self.step));
        m.insert("device".into(), json!(self.device));
        m.insert("objective".into(), json!(self.objective));
        m.insert("split".into(), json!(self.eval.split));
        m.insert(
            "outputs".into(),
            json!({
                "positions": o.positions,
                "loss": num(o.loss),
                "ppl": num(o.ppl),
                "uniq": o.uniq,
                "human_uniq": o.human_uniq,
                "block_length": o.block_length,
                "mu_z": num(o.mu_z),
                "sigma_z": num(o.sigma_z),
                "unnormalised_ppl": num(o.unnormalised_ppl),
                "entropy_log_z_corr": num(o.entropy_log_z_corr),
                "theorem2_gamma": o.theorem2_gamma,
                "theorem2_threshold": o.theorem2_threshold,
                "groups": groups,
                "histogram": o.histogram,
            }),
        );
        m.insert("embedding".into(), Value::Object(panel_json(&self.panel)));
        if let Some(h) = &self.eval.hidden {
            m.insert(
                "hidden".into(),
                serde_json::to_value(h).unwrap_or(Value::Null),
            );
        }
        if let Some(p) = &self.class_precision {
            m.insert("class_precision".into(), class_precision_json(p));
        }
        if let Some(s) = &self.shifted {
            m.insert(
                "shifted".into(),
                json!({
                    "shift_from": self.shift_from.map(Split::name),
                    "shift": num(s.shift),
                    "ppl": num(s.ppl),
                    "unnormalised_ppl": num(s.unnormalised_ppl),
                    "mu_z": num(s.mu_z),
                    "sigma_z": num(s.sigma_z),
                }),
            );
        }
        if let (Some((intervals, replicates)), Some(scores)) = (&self.bootstrap, &self.scores) {
            m.insert(
                "bootstrap".into(),
                bootstrap_json(intervals, *replicates, scores.sentences()),
            );
        }
        m.insert("seconds".into(), json!(self.eval.seconds));
        Value::Object(m)
    }

    pub fn render(&self) -> String {
        let o = &self.eval.outputs;
        let mut out = format!(
            "{} step {} on {} ({} split, {} positions, block length {}, {:.1} s)\n",
            self.run,
            self.step,
            self.device,
            self.eval.split,
            thousands(o.positions),
            o.block_length,
            self.eval.seconds
        );
        out.push_str(&format!(
            "{:<22} {:>12} {:>12} {:>12} {:>12}\n",
            "outputs", "frequent", "medium", "rare", "total"
        ));
        let g = &o.groups;
        out.push_str(&format!(
            "{:<22} {}\n",
            "PPL",
            fmt_row(&[g[0].ppl, g[1].ppl, g[2].ppl, o.ppl], 12).join(" ")
        ));
        if let Some((intervals, _)) = &self.bootstrap {
            for (label, pick) in [("  95 % low", 0), ("  95 % high", 1)] {
                let v = intervals.map(|i| if pick == 0 { i.lo } else { i.hi });
                out.push_str(&format!("{label:<22} {}\n", fmt_row(&v, 12).join(" ")));
            }
        }
        let ints: [(&str, [u64; 3], u64); 3] = [
            (
                "positions",
                [g[0].positions, g[1].positions, g[2].positions],
                o.positions,
            ),
            (
                "Uniq",
                [g[0].uniq as u64, g[1].uniq as u64, g[2].uniq as u64],
                o.uniq as u64,
            ),
            (
                "Uniq (human)",
                [
                    g[0].human_uniq as u64,
                    g[1].human_uniq as u64,
                    g[2].human_uniq as u64,
                ],
                o.human_uniq as u64,
            ),
        ];
        for (label, v, total) in ints {
            out.push_str(&format!(
                "{label:<22} {:>12} {:>12} {:>12} {:>12}\n",
                thousands(v[0]),
                thousands(v[1]),
                thousands(v[2]),
                thousands(total)
            ));
        }
        // Theorem 2 only means something while a cosine regulariser is on.
        let below = |c: Option<usize>| c.map_or("n/a".to_string(), |c| thousands(c as u64));
        let total_below = g.iter().map(|x| x.theorem2_below).sum::<Option<usize>>();
        out.push_str(&format!(
            "{:<22} {:>12} {:>12} {:>12} {:>12}\n",
            "Thm-2 tokens below",
            below(g[0].theorem2_below),
            below(g[1].theorem2_below),
            below(g[2].theorem2_below),
            below(total_below)
        ));
        let theorem2 = match o.theorem2_threshold {
            Some(t) => format!("Theorem-2 threshold {t:.6} (gamma {})", o.theorem2_gamma),
            None => "Theorem-2 n/a (no cosine regulariser on)".to_string(),
        };
        out.push_str(&format!(
            "log Z: mean {:.4}, std {:.4}; unnormalised PPL {}; corr(entropy, log Z) {:.4}; {theorem2}\n\n",
            o.mu_z,
            o.sigma_z,
            fmt(o.unnormalised_ppl, 0).trim(),
            o.entropy_log_z_corr,
        ));
        if let Some(s) = &self.shifted {
            // Goldberger & Melamud's Table 4 columns, for the model with log p̃ = s − shift.
            out.truncate(out.len() - 1);
            out.push_str(&format!(
                "shifted model (s − {:.4}, the {} μ_z): mean log Z {:.4}, std {:.4}; PPL {}; unnormalised PPL {}\n\n",
                s.shift,
                self.shift_from.map(Split::name).unwrap_or("?"),
                s.mu_z,
                s.sigma_z,
                fmt(s.ppl, 0).trim(),
                fmt(s.unnormalised_ppl, 0).trim(),
            ));
        }
        if let Some(h) = &self.eval.hidden {
            out.push_str(&hidden_text(h));
        }
        out.push_str(&panel_table(&self.panel));
        if let Some(p) = &self.class_precision {
            out.push_str(&format!(
                "same-class precision@{}: total {:.3} | frequent {:.3} | medium {:.3} | rare {:.3}\n",
                p.k, p.total, p.groups[0], p.groups[1], p.groups[2]
            ));
        }
        out
    }
}

/// The hidden-state geometry as `eval` prints it.
fn hidden_text(h: &HiddenStats) -> String {
    let verdict = match (h.separable, h.proven) {
        (true, _) => format!(
            "separable from the origin: margin {}, certificate min u·ĥ {} (u in --format json); cos(−u, mean Rare row) {}",
            fmt(h.margin, 0).trim(),
            fmt(h.certificate, 0).trim(),
            fmt(h.neg_u_rare_cos, 0).trim()
        ),
        (false, proven) => format!(
            "not separable{}: convex weights on {} places combine to norm {} (weights in --format json)",
            if proven {
                ""
            } else {
                " (not proven: the solver stopped at its cap)"
            },
            h.support,
            fmt(h.certificate, 0).trim()
        ),
    };
    format!(
        "hidden states ({} sampled places): mean cosine {}, IsoScore {}; {verdict}\n{:<22} {}\n\n",
        thousands(h.positions as u64),
        fmt(h.mean_cos, 0).trim(),
        fmt(h.isoscore, 0).trim(),
        "self-similarity",
        fmt_row(
            &[
                h.self_sim.first().copied().unwrap_or(f64::NAN),
                h.self_sim.get(1).copied().unwrap_or(f64::NAN),
                h.self_sim.get(2).copied().unwrap_or(f64::NAN),
            ],
            12
        )
        .join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #37: a row is in one notation, and a small value keeps its digits.
    #[test]
    fn a_row_of_values_is_in_one_notation_and_small_values_keep_their_digits() {
        let row = fmt_row(&[1234.5678, 123_456_789.0, f64::NAN], 12);
        assert_eq!(row[0].trim(), "1.235e3");
        assert_eq!(row[1].trim(), "1.235e8");
        assert_eq!(row[2].trim(), "-");
        // Issue #58: a PPL the workbench writes as 230.2 is not 2.302e2 beside a Rare of 10⁵.
        let row = fmt_row(&[230.2, 123_456.0], 12);
        assert_eq!((row[0].trim(), row[1].trim()), ("230.2000", "123456.0000"));
        assert!(row.iter().all(|c| c.len() == 12));
        let row = fmt_row(&[1234.5678, 0.5], 12);
        assert_eq!(row[0].trim(), "1234.5678");
        assert_eq!(row[1].trim(), "0.5000");
        // u-perp of 3·10⁻⁵ was "0.0".
        assert_eq!(fmt(3e-5, 0), "3.000e-5");
    }
}
