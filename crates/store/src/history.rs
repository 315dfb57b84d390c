//! A run's history read back from its store: the events that made it, replayed in the order
//! they happened, so that a viewer folds a finished run exactly as it folds a live one (the one
//! fold: `RunView::on_event`). Metric rows become the steps, evaluations, references and
//! analysed snapshots they were written from; the events table's rows become the events they
//! record — typed where the store's words say all of it (a learning rate, a setting, a pause),
//! in words where they are all that was kept (an objective change: the objectives in force at
//! the end come with the newest checkpoint).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::Path;

use conelab_core::change::{Change, ConfigChange};
use conelab_core::events::{
    AppliedCommand, Command, EmbeddingStats, EvalStats, Event, FinishReason, Recorded,
    RecordedWhat, ReferencePpl, RunStarted, SecondTierStats, SplitReferencePpl, StepStats,
    StoredHistory,
};
use conelab_core::objective::Objectives;
use conelab_core::series::{GROUPS, series_key, split};
use conelab_metrics::OutputMetrics;
use conelab_metrics::embedding::SetStats;
use conelab_metrics::hidden::HiddenStats;
use conelab_metrics::outputs::{GroupOutputs, Histogram2d};

use crate::query::OBJECTIVE_CHANGE_KINDS;
use crate::writer as w;
use crate::{Frame, StoreError, col};

/// The history of the run in `run_dir` from its store, events in the order they happened.
/// `NoStore` when the run has none.
pub fn read(run_dir: &Path) -> Result<StoredHistory, StoreError> {
    let st = crate::load_columns(run_dir, &[col::KEY, col::STEP, col::VALUE, col::EPOCH])?;
    let rows = Rows::of(&st.metrics)?;
    let mut timeline = Timeline::default();
    for &(step, loss) in rows.get(split::TRAIN, "total", "loss") {
        timeline.push(step, Rank::Step, Event::Step(rows.step_at(step, loss)));
    }
    for split_name in [split::VALID, split::TEST] {
        for &(step, _) in rows.get(split_name, "total", "ppl") {
            let rank = if split_name == split::VALID {
                Rank::Valid
            } else {
                Rank::Test
            };
            timeline.push(step, rank, Event::Eval(rows.eval_at(split_name, step)));
        }
    }
    if let Some(r) = rows.reference() {
        timeline.push(r.step, Rank::Reference, Event::Reference(Box::new(r)));
    }
    for &(step, _) in rows.get(split::EMBEDDING, "total", "i1") {
        timeline.push(
            step,
            Rank::Embedding,
            Event::Embedding(Box::new(rows.embedding_at(step))),
        );
    }
    let ev = &st.events;
    let (steps, kinds, details, befores, afters) = (
        ev.column(col::STEP)?.u64()?,
        ev.column(col::KIND)?.str()?,
        ev.column(col::DETAIL)?.str()?,
        ev.column(col::BEFORE)?.str()?,
        ev.column(col::AFTER)?.str()?,
    );
    for i in 0..ev.height() {
        let row = EventRow {
            step: steps.get(i).unwrap_or(0),
            kind: kinds.get(i).unwrap_or(""),
            detail: details.get(i).unwrap_or(""),
            before: befores.get(i).unwrap_or(""),
            after: afters.get(i).unwrap_or(""),
        };
        timeline.push(row.step, Rank::Recorded, row.event(run_dir, &rows));
    }
    Ok(StoredHistory {
        events: timeline.events(),
        projection_steps: crate::projection::list(&st.dir)?,
        warnings: st.warnings,
    })
}

/// Where an event stands among those of its step: its step's numbers, then its evaluations
/// (valid, then test), then what the events table recorded at it, in the table's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    Step,
    Valid,
    Test,
    Reference,
    Embedding,
    Recorded,
}

#[derive(Default)]
struct Timeline(Vec<(u64, Rank, usize, Event)>);

impl Timeline {
    fn push(&mut self, step: u64, rank: Rank, event: Event) {
        let seq = self.0.len();
        self.0.push((step, rank, seq, event));
    }

    fn events(mut self) -> Vec<Event> {
        self.0.sort_by_key(|e| (e.0, e.1, e.2));
        self.0.into_iter().map(|e| e.3).collect()
    }
}

/// A row of the events table.
struct EventRow<'a> {
    step: u64,
    kind: &'a str,
    detail: &'a str,
    before: &'a str,
    after: &'a str,
}

impl EventRow<'_> {
    /// The event the row recorded (the writer's `record` in reverse).
    fn event(&self, run_dir: &Path, rows: &Rows) -> Event {
        let step = self.step;
        let words =
            |what: RecordedWhat, text: String| Event::Recorded(Recorded { step, what, text });
        let change_words = || format!("{} → {}", self.before, self.after);
        match self.kind {
            "start" => {
                let run = |metric: &str| rows.value_at_or_before(split::RUN, metric, step);
                Event::Started(Box::new(RunStarted {
                    step,
                    total_steps: run("total_steps").unwrap_or(0.0) as u64,
                    windows_per_epoch: run("windows_per_epoch").unwrap_or(0.0) as u64,
                    parameters: run("parameters").unwrap_or(0.0) as usize,
                    device: self.after.to_string(),
                    run_dir: Some(run_dir.to_path_buf()),
                    objective: self.detail.to_string(),
                    // The label is what the store keeps; the objectives in force come with the
                    // newest checkpoint.
                    objectives: Objectives::default(),
                }))
            }
            "config" => match ConfigChange::from_words(self.detail, self.before, self.after) {
                Some(change) => Event::ConfigChanged { step, change },
                None => words(
                    RecordedWhat::Change,
                    format!("{}: {}", self.detail, change_words()),
                ),
            },
            "lr" => match Change::lr_from_words(self.before, self.after) {
                Some(change @ Change::Lr { after, .. }) => Event::Applied(AppliedCommand {
                    step,
                    command: Command::SetLr { lr: after },
                    change,
                    ticket: None,
                    coalesced: false,
                }),
                _ => words(RecordedWhat::Intervention, change_words()),
            },
            k if OBJECTIVE_CHANGE_KINDS.contains(&k) => {
                words(RecordedWhat::Intervention, change_words())
            }
            "stop" => {
                let save = self.detail == "stop and save";
                Event::Applied(AppliedCommand {
                    step,
                    command: Command::Stop { save },
                    change: Change::Stopping { save },
                    ticket: None,
                    coalesced: false,
                })
            }
            // Recorded from the acknowledgement, at the step the pause came before.
            "pause" => Event::Paused {
                step: step.saturating_sub(1),
            },
            "resume" => Event::Resumed {
                step: step.saturating_sub(1),
            },
            "checkpoint" => Event::Checkpoint {
                step,
                path: self.detail.into(),
            },
            "rejected" => words(RecordedWhat::Refused, format!("refused {}", self.detail)),
            "nan" => match self.detail.strip_prefix("loss ").map(str::parse::<f64>) {
                Some(Ok(loss)) => Event::Diverged { step, loss },
                _ => words(
                    RecordedWhat::Other,
                    format!("{} at step {step}: the step was not applied", self.detail),
                ),
            },
            crate::writer::WEIGHTS_BROKEN => Event::WeightsBroken {
                step,
                reason: self.detail.to_string(),
            },
            crate::writer::WORSE_THAN_UNIFORM => {
                let typed = self.detail.split_once("; ").and_then(|(measure, steps)| {
                    Some(Event::WorseThanUniform {
                        step,
                        measure: conelab_core::events::UniformMeasure::from_name(measure)?,
                        value: self.before.parse().ok()?,
                        bound: self.after.parse().ok()?,
                        steps: steps.strip_suffix(" steps")?.parse().ok()?,
                    })
                });
                typed.unwrap_or_else(|| {
                    words(
                        RecordedWhat::Other,
                        format!("worse than uniform: {}", self.detail),
                    )
                })
            }
            "warning" => Event::Warning {
                step,
                message: self.detail.to_string(),
            },
            "finish" => match [
                FinishReason::Completed,
                FinishReason::Stopped,
                FinishReason::Diverged,
            ]
            .into_iter()
            .find(|r| r.name() == self.detail)
            {
                Some(reason) => Event::Finished { step, reason },
                None => words(RecordedWhat::Other, format!("finished ({})", self.detail)),
            },
            "failed" => Event::Failed {
                step,
                message: self.detail.to_string(),
            },
            other => words(RecordedWhat::Other, format!("{other}: {}", self.detail)),
        }
    }
}

/// Every series of a metrics table, by its key, as (step, value) in step order, one row per step
/// (of rows written twice for a step, the later: a resumed run's); one pass.
struct Rows {
    series: HashMap<i64, Vec<(u64, f64)>, BuildHasherDefault<SeriesKeyHasher>>,
    /// Training epoch by step (the train loss rows' epoch column), in step order.
    epochs: Vec<(u64, f64)>,
    /// The spectrum series sv0000, sv0001, … that exist, in order.
    spectrum: Vec<i64>,
}

/// Series keys are 64-bit FNV-1a hashes already ([`conelab_core::series::series_key`]): hashing them again with
/// SipHash was a tenth of opening a long run's store.
#[derive(Default)]
struct SeriesKeyHasher(u64);

impl std::hash::Hasher for SeriesKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn write_i64(&mut self, key: i64) {
        self.0 = key as u64;
    }
}

/// Sorts by step, stably, and keeps the last of the rows of one step.
fn last_per_step<T>(v: &mut Vec<(u64, T)>) {
    v.sort_by_key(|p| p.0);
    let mut out: Vec<(u64, T)> = Vec::with_capacity(v.len());
    for p in v.drain(..) {
        match out.last_mut() {
            Some(q) if q.0 == p.0 => *q = p,
            _ => out.push(p),
        }
    }
    *v = out;
}

impl Rows {
    /// From the key, step, value and epoch columns of a metrics table, in arrival order
    /// (deduplicated or not).
    fn of(df: &Frame) -> Result<Self, StoreError> {
        let train_loss = series_key(split::TRAIN, "total", "loss");
        let mut series: HashMap<i64, Vec<(u64, f64)>, BuildHasherDefault<SeriesKeyHasher>> =
            HashMap::default();
        let mut epoch_of = Vec::new();
        for r in crate::rows::metric_rows(df)? {
            series
                .entry(r.key)
                .or_default()
                .push((r.step, r.value.unwrap_or(f64::NAN)));
            if r.key == train_loss
                && let Some(e) = r.epoch
            {
                epoch_of.push((r.step, e));
            }
        }
        for v in series.values_mut() {
            // Rows of one series arrive in step order except across a resume.
            last_per_step(v);
        }
        last_per_step(&mut epoch_of);
        let spectrum = (0..)
            .map(|k| {
                series_key(
                    split::SPECTRUM,
                    "total",
                    &conelab_core::series::spectrum_metric(k),
                )
            })
            .take_while(|key| series.contains_key(key))
            .collect();
        Ok(Self {
            series,
            epochs: epoch_of,
            spectrum,
        })
    }

    fn get(&self, split: &str, group: &str, metric: &str) -> &[(u64, f64)] {
        self.series
            .get(&series_key(split, group, metric))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn value_at(&self, split: &str, group: &str, metric: &str, step: u64) -> Option<f64> {
        at_step(self.get(split, group, metric), step)
    }

    fn epoch_at(&self, step: u64) -> Option<f64> {
        at_step(&self.epochs, step)
    }

    /// The newest value of a `run` fact at or before `step` (they are recorded as a run
    /// starts, and again at a resume).
    fn value_at_or_before(&self, split: &str, metric: &str, step: u64) -> Option<f64> {
        let s = self.get(split, "total", metric);
        let i = s.partition_point(|p| p.0 <= step);
        i.checked_sub(1)
            .and_then(|i| s.get(i))
            .or(s.first())
            .map(|p| p.1)
    }

    /// The training step `step` with the loss `loss`.
    fn step_at(&self, step: u64, loss: f64) -> StepStats {
        let at = |m: &str| self.value_at(split::TRAIN, "total", m, step);
        StepStats {
            step,
            epoch: self.epoch_at(step).unwrap_or(f64::NAN),
            loss,
            penalty: at("penalty").unwrap_or(0.0),
            lr: at("lr").unwrap_or(f64::NAN),
            grad_norm: at("grad_norm").unwrap_or(f64::NAN),
            tokens_per_sec: at("tokens_per_sec").unwrap_or(f64::NAN),
            step_ms: at("step_ms").unwrap_or(f64::NAN),
            rare_tokens: at("rare_tokens").map(|v| v as usize),
            rare_g1: at("rare_g1"),
            rare_in_group: at("rare_in_group").map(|v| v as usize),
        }
    }

    /// The corpus's reference perplexities (recorded as runs start since they exist), per
    /// held-out split: frequent, medium, rare, total.
    fn reference(&self) -> Option<ReferencePpl> {
        let mut step = None;
        let splits: Vec<SplitReferencePpl> = [split::VALID, split::TEST]
            .into_iter()
            .filter_map(|s| {
                let mut series = |metric: &str| -> Vec<f64> {
                    ["frequent", "medium", "rare", "total"]
                        .iter()
                        .map(|g| {
                            let rows = self.get(s, g, metric);
                            if let Some(&(at, _)) = rows.last() {
                                step = Some(step.map_or(at, |st: u64| st.max(at)));
                            }
                            rows.last().map_or(f64::NAN, |p| p.1)
                        })
                        .collect()
                };
                let kn3 = series("ref_ppl");
                let unigram = series("ref_unigram_ppl");
                kn3.iter()
                    .any(|v| v.is_finite())
                    .then(|| SplitReferencePpl {
                        split: s.to_string(),
                        kn3,
                        unigram,
                    })
            })
            .collect();
        Some(ReferencePpl {
            step: step?,
            splits,
        })
        .filter(|r| !r.splits.is_empty())
    }

    fn eval_at(&self, split_name: &str, step: u64) -> EvalStats {
        let at = |group: &str, m: &str| self.value_at(split_name, group, m, step);
        let total = |m: &str| at("total", m).unwrap_or(f64::NAN);
        let count = |group: &str, m: &str| at(group, m).unwrap_or(0.0) as usize;
        let groups: [GroupOutputs; 3] = [0, 1, 2].map(|g| {
            let name = GROUPS[g + 1];
            GroupOutputs {
                ppl: at(name, "ppl").unwrap_or(f64::NAN),
                positions: count(name, "positions") as u64,
                uniq: count(name, "uniq"),
                human_uniq: count(name, "human_uniq"),
                theorem2_below: at(name, "theorem2_below")
                    .filter(|v| v.is_finite())
                    .map(|v| v as usize),
                tokens: count(name, "tokens"),
            }
        });
        let bins = [
            count("total", w::HIST_ENTROPY_BINS),
            count("total", w::HIST_LOG_Z_BINS),
        ];
        let mut counts = vec![0u64; bins[0] * bins[1]];
        for (i, c) in counts.iter_mut().enumerate() {
            if let Some(v) = at("total", &w::hist_cell(i)) {
                *c = v as u64;
            }
        }
        let outputs = OutputMetrics {
            positions: total("positions") as u64,
            loss: total("loss"),
            ppl: total("ppl"),
            groups: groups.clone(),
            uniq: count("total", "uniq"),
            human_uniq: count("total", "human_uniq"),
            block_length: count("total", "block_length"),
            mu_z: total("mu_z"),
            sigma_z: total("sigma_z"),
            unnormalised_ppl: total("unnormalised_ppl"),
            entropy_log_z_corr: total("entropy_log_z_corr"),
            histogram: Histogram2d {
                entropy_range: [total(w::HIST_ENTROPY_LO), total(w::HIST_ENTROPY_HI)],
                log_z_range: [total(w::HIST_LOG_Z_LO), total(w::HIST_LOG_Z_HI)],
                entropy_bins: bins[0],
                log_z_bins: bins[1],
                counts,
            },
            theorem2_gamma: total("theorem2_gamma"),
            theorem2_threshold: Some(total("theorem2_threshold")).filter(|v| v.is_finite()),
        };
        let hidden = self.hidden_at(split_name, step).map(Box::new);
        EvalStats {
            step,
            split: split_name.to_string(),
            loss: total("loss"),
            ppl: total("ppl"),
            groups: [0, 1, 2].map(|g| (groups[g].ppl, groups[g].positions)),
            positions: total("positions") as u64,
            seconds: total("seconds"),
            outputs: Box::new(outputs),
            hidden,
        }
    }

    fn embedding_at(&self, step: u64) -> EmbeddingStats {
        let set = |group: &str| {
            let at = |m: &str| {
                self.value_at(split::EMBEDDING, group, m, step)
                    .unwrap_or(f64::NAN)
            };
            SetStats {
                rows: self
                    .value_at(split::EMBEDDING, group, "rows", step)
                    .unwrap_or(0.0) as usize,
                i1: at("i1"),
                i2: at("i2"),
                mean_norm: at("mean_norm"),
                sv_norm: Vec::new(),
                sv_max: at("sv_max"),
                effective_rank: at("effective_rank"),
                mean_cos: at("mean_cos"),
                mean_cos_to_mean: at("mean_cos_to_mean"),
                i1_unit: at("i1_unit"),
                i2_unit: at("i2_unit"),
                isoscore: at("isoscore"),
                isoscore_random: at("isoscore_random"),
                abtt_top_variance: at("abtt_top_variance"),
                abtt_mean_cos: at("abtt_mean_cos"),
                rogue_share: at("rogue_share"),
            }
        };
        let mut total = set("total");
        total.sv_norm = self
            .spectrum
            .iter()
            .map_while(|key| {
                let s = self.series.get(key).map(Vec::as_slice).unwrap_or(&[]);
                at_step(s, step)
            })
            .collect();
        EmbeddingStats {
            step,
            total,
            groups: [set("frequent"), set("medium"), set("rare")],
            rare_frequent_cos: self
                .value_at(split::EMBEDDING, "total", "rare_frequent_cos", step)
                .unwrap_or(f64::NAN),
            seconds: self
                .value_at(split::EMBEDDING, "total", "seconds", step)
                .unwrap_or(f64::NAN),
            // The store keeps spectrum control's summaries (`sc_*`), not σ and its targets: the
            // Spectrum pane's line waits for the next snapshot of a live run.
            spectral: None,
            second_tier: self.second_tier_at(step),
        }
    }

    /// The hidden-state geometry of the evaluation of `split_name` at `step`; `None` for a run
    /// from before the sample (no `h_positions`).
    fn hidden_at(&self, split_name: &str, step: u64) -> Option<HiddenStats> {
        let at = |group: &str, m: &str| self.value_at(split_name, group, m, step);
        let total = |m: &str| at("total", m).unwrap_or(f64::NAN);
        let count = |group: &str, m: &str| at(group, m).unwrap_or(0.0) as usize;
        let positions = at("total", w::H_POSITIONS)?;
        let names = &GROUPS[1..];
        Some(HiddenStats {
            positions: positions as usize,
            mean_cos: total(w::H_MEAN_COS),
            isoscore: total(w::H_ISOSCORE),
            self_sim: names
                .iter()
                .map(|g| at(g, w::H_SELF_SIM).unwrap_or(f64::NAN))
                .collect(),
            self_sim_types: [0, 1, 2].map(|g| count(names[g], w::H_SELF_SIM_TYPES)),
            separable: total(w::H_SEPARABLE) == 1.0,
            margin: total(w::H_MARGIN),
            certificate: total(w::H_CERTIFICATE),
            proven: total(w::H_PROVEN) == 1.0,
            support: count("total", w::H_SUPPORT),
            neg_u_rare_cos: total(w::H_NEG_U_RARE_COS),
            direction: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// The second tier of the snapshot at `step`, if it was due there.
    fn second_tier_at(&self, step: u64) -> Option<SecondTierStats> {
        let seconds = self.value_at(split::EMBEDDING, "total", w::ST_SECONDS, step)?;
        let per_group = |metric: &str| -> Vec<f64> {
            GROUPS[1..]
                .iter()
                .map(|g| {
                    self.value_at(split::EMBEDDING, g, metric, step)
                        .unwrap_or(f64::NAN)
                })
                .collect()
        };
        let counts = |metric: &str| -> Vec<usize> {
            per_group(metric)
                .into_iter()
                .map(|v| if v.is_finite() { v as usize } else { 0 })
                .collect()
        };
        Some(SecondTierStats {
            same_group: per_group(w::ST_SAME_GROUP),
            two_nn: per_group(w::ST_TWO_NN),
            two_nn_duplicates: counts(w::ST_TWO_NN_DUPLICATES),
            stolen_at_most: counts(w::ST_STOLEN_AT_MOST),
            seconds,
        })
    }
}

/// The value of a step-ordered series at `step`.
fn at_step(series: &[(u64, f64)], step: u64) -> Option<f64> {
    let i = series.partition_point(|p| p.0 < step);
    series.get(i).filter(|p| p.0 == step).map(|p| p.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of a series as a resumed run leaves them (steps 3–4 written twice): step order, and
    /// of two rows of a step the later one.
    #[test]
    fn a_series_keeps_the_last_row_of_each_step_in_step_order() {
        let mut v = vec![
            (1, 'a'),
            (2, 'b'),
            (3, 'c'),
            (4, 'd'),
            (3, 'C'),
            (4, 'D'),
            (5, 'E'),
        ];
        last_per_step(&mut v);
        assert_eq!(v, vec![(1, 'a'), (2, 'b'), (3, 'C'), (4, 'D'), (5, 'E')]);
        let mut empty: Vec<(u64, char)> = Vec::new();
        last_per_step(&mut empty);
        assert!(empty.is_empty());
        assert_eq!(at_step(&[(2, 1.5), (4, 2.5)], 4), Some(2.5));
        assert_eq!(at_step(&[(2, 1.5), (4, 2.5)], 3), None);
    }
}
