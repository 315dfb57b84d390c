//! Exact perplexity over a whole split, total and per frequency group of the target token
//! (methods.md §2), in inference mode. Every position of the split is predicted exactly once: all
//! windows including the last, shorter one, and the positions after the last stream. Besides the
//! perplexities, every model-output metric of methods.md §2 (Uniq, log Z statistics, Theorem 2).

use std::time::Instant;

use burn::prelude::*;

use super::EngineError;
use crate::model::TiedLm;
use crate::model::output::{host_outputs, output_tensors};
use crate::model::{LanguageModel, RecurrentState};
use conelab_core::events::EvalStats;
use conelab_data::{Corpus, Group, PartialWindow, Split, StreamBatcher};
use conelab_metrics::hidden::{HiddenPlan, hidden_geometry};
use conelab_metrics::{OutputAccumulator, OutputBatch};

/// How to evaluate: which split, in how many parallel streams of which window length, at which
/// step, with which cosine-regulariser weight for the Theorem-2 threshold.
pub struct EvalRequest {
    pub split: Split,
    pub streams: usize,
    pub window: usize,
    pub step: u64,
    pub cosine_weight: f64,
    /// Score with 10·tanh(s/5) of the logits (AND with squashing in force).
    pub squash: bool,
    /// The logits live in host memory (burn-flex): their statistics come from one host pass per
    /// row (`model::output::host_outputs`) instead of burn's graph of them.
    pub host: bool,
    /// An LSTM's layers run on the host (`model/lstm_host.rs`), as in training.
    pub host_lstm: bool,
    /// Keep the hidden states of the split's fixed sample and measure their geometry
    /// (`conelab_metrics::hidden`).
    pub hidden: bool,
}

/// The hidden states of a [`HiddenPlan`]'s places, gathered batch by batch as the split is scored.
struct HiddenCapture {
    plan: HiddenPlan,
    /// `plan.places.len()` × d, row-major; sized at the first batch (d is the model's).
    rows: Vec<f32>,
    d: usize,
    filled: usize,
}

impl HiddenCapture {
    /// Takes the rows of `hidden` (`[rows·time, d]`, row b's first target at `row_starts[b]`)
    /// whose places the plan keeps: a gather on the device, so only those rows travel.
    fn take(
        &mut self,
        hidden: &Tensor<2>,
        row_starts: &[usize],
        time: usize,
        device: &Device,
    ) -> Result<(), EngineError> {
        let places = &self.plan.places;
        let (mut source, mut target) = (Vec::new(), Vec::new());
        for (b, &start) in row_starts.iter().enumerate() {
            let lo = places.partition_point(|&p| p < start);
            let hi = places.partition_point(|&p| p < start + time);
            for (i, &p) in places.iter().enumerate().take(hi).skip(lo) {
                source.push((b * time + p - start) as u32);
                target.push(i);
            }
        }
        if source.is_empty() {
            return Ok(());
        }
        let [_, d] = hidden.dims();
        if self.d == 0 {
            self.d = d;
            self.rows = vec![0.0; places.len() * d];
        }
        let index = Tensor::<1, Int>::from_data(TensorData::new(source, [target.len()]), device);
        let picked = hidden
            .clone()
            .select(0, index)
            .try_into_vec_as::<f32>()
            .map_err(EngineError::backend("reading the sampled hidden states"))?;
        for (row, &i) in picked.chunks_exact(d).zip(&target) {
            self.rows[i * d..(i + 1) * d].copy_from_slice(row);
        }
        self.filled += target.len();
        Ok(())
    }
}

/// Scores a whole split; `progress(done, total)` hears of the prediction positions scored, once
/// before the first batch and after each. With `log_probs`, also writes each position's target
/// log-probability there, indexed by the target token's place in the split (entry 0, never a
/// target, left NaN): what a bootstrap over the split's sentences resamples.
pub fn evaluate_scored(
    model: &LanguageModel,
    device: &Device,
    corpus: &Corpus,
    request: &EvalRequest,
    progress: &mut dyn FnMut(u64, u64),
    mut log_probs: Option<&mut Vec<f32>>,
) -> Result<EvalStats, EngineError> {
    let &EvalRequest {
        split,
        streams,
        window,
        step,
        cosine_weight,
        squash,
        host,
        host_lstm,
        hidden: measure_hidden,
    } = request;
    let start = Instant::now();
    let model = model.valid();
    let tokens = corpus.split(split);
    let batcher = StreamBatcher::new(tokens, streams, window, PartialWindow::Keep)
        .map_err(EngineError::invalid(format!("{split} split")))?;
    if let Some(lp) = log_probs.as_deref_mut() {
        lp.clear();
        lp.resize(tokens.len(), f32::NAN);
    }
    // Each row's first target: stream b of window k starts at b·L + k·T, its target one later.
    let stream_len = batcher.stream_len();
    let mut acc = OutputAccumulator::new(*corpus.groups());
    let mut capture = measure_hidden.then(|| HiddenCapture {
        plan: HiddenPlan::new(tokens, |id| corpus.groups().group_of(id)),
        rows: Vec::new(),
        d: 0,
        filled: 0,
    });
    let mut state: Option<RecurrentState> = None;
    let read_f32 = |t: Tensor<1>, what: &str| {
        t.try_into_vec_as::<f32>()
            .map_err(EngineError::backend(format!("reading {what}")))
    };
    let mut keep = |row_starts: &[usize], time: usize, target_log_probs: &[f32]| {
        if let Some(lp) = log_probs.as_deref_mut() {
            for (row, &start) in row_starts.iter().enumerate() {
                lp[start..start + time]
                    .copy_from_slice(&target_log_probs[row * time..(row + 1) * time]);
            }
        }
    };
    let mut score = |inputs: Vec<u32>,
                     targets: Vec<u32>,
                     shape: [usize; 2],
                     row_starts: &[usize],
                     state: Option<RecurrentState>|
     -> Result<Option<RecurrentState>, EngineError> {
        let x = Tensor::<2, Int>::from_data(TensorData::new(inputs, shape), device);
        let mut state = state;
        let on_host = if host_lstm {
            model
                .hidden_on_host(x.clone(), &mut state, None)
                .map_err(EngineError::backend("the LSTM on the host"))?
        } else {
            None
        };
        let (hidden, next) = match on_host {
            Some((hidden, next, _window)) => (hidden, Some(next)),
            None => model.hidden(x, state),
        };
        if let Some(c) = capture.as_mut() {
            c.take(&hidden, row_starts, shape[1], device)?;
        }
        let mut logits = model.logits(hidden);
        if squash {
            logits = crate::objective::squash::squash(logits);
        }
        if host {
            let [_, vocab] = logits.dims();
            let values = logits
                .try_into_vec_as::<f32>()
                .map_err(EngineError::backend("reading the logits"))?;
            let out = host_outputs(&values, vocab, &targets)
                .map_err(EngineError::backend("the output metrics on the host"))?;
            keep(row_starts, shape[1], &out.target_log_probs);
            acc.add(OutputBatch {
                targets: &targets,
                target_log_probs: &out.target_log_probs,
                log_z: &out.log_z,
                entropy: &out.entropy,
                argmax: &out.argmax,
                prob_sum: &out.prob_sum,
            })
            .map_err(EngineError::backend("the output metrics"))?;
            return Ok(next);
        }
        let y = Tensor::<1, Int>::from_data(
            TensorData::new(targets.clone(), [shape[0] * shape[1]]),
            device,
        );
        let out = output_tensors(logits, y);
        let argmax = out
            .argmax
            .try_into_vec_as::<i64>()
            .map_err(EngineError::backend("reading argmax"))?
            .into_iter()
            .map(|a| a as u32)
            .collect::<Vec<_>>();
        let target_log_probs = read_f32(out.target_log_probs, "log-probabilities")?;
        keep(row_starts, shape[1], &target_log_probs);
        acc.add(OutputBatch {
            targets: &targets,
            target_log_probs: &target_log_probs,
            log_z: &read_f32(out.log_z, "log Z")?,
            entropy: &read_f32(out.entropy, "entropies")?,
            argmax: &argmax,
            prob_sum: &read_f32(out.prob_sum, "probability sums")?,
        })
        .map_err(EngineError::backend("the output metrics"))?;
        Ok(next)
    };
    let total = tokens.len().saturating_sub(1) as u64;
    let mut done = 0u64;
    progress(done, total);
    for (k, batch) in batcher.iter().enumerate() {
        let positions = (batch.batch * batch.time) as u64;
        let row_starts: Vec<usize> = (0..batch.batch)
            .map(|b| b * stream_len + k * window + 1)
            .collect();
        state = score(
            batch.inputs,
            batch.targets,
            [batch.batch, batch.time],
            &row_starts,
            state,
        )?;
        done += positions;
        progress(done, total);
    }
    if let Some(rest) = batcher.leftover() {
        // The leftover positions continue the last stream's text: carry that stream's state.
        let last = streams - 1;
        let carried = state.map(|layers| {
            layers
                .into_iter()
                .map(|s| {
                    burn::nn::LstmState::new(s.cell.narrow(0, last, 1), s.hidden.narrow(0, last, 1))
                })
                .collect()
        });
        let start = [streams * stream_len + 1];
        score(rest.inputs, rest.targets, [1, rest.time], &start, carried)?;
    }
    let hidden = match capture {
        Some(c) if c.d > 0 && c.filled == c.plan.places.len() => {
            // cos(−u, mean Rare row): the mean of W's Rare rows, read as d numbers.
            let rare = corpus.groups().range(Group::Rare);
            let rare_mean = if rare.is_empty() {
                None
            } else {
                let w = model.embedding();
                let mean = w
                    .narrow(0, rare.start, rare.len())
                    .mean_dim(0)
                    .try_into_vec_as::<f64>()
                    .map_err(EngineError::backend("reading the Rare group's mean row"))?;
                Some(mean)
            };
            let stats = hidden_geometry(&c.rows, c.d, &c.plan, rare_mean.as_deref())
                .map_err(EngineError::backend("the hidden-state geometry"))?;
            Some(Box::new(stats))
        }
        _ => None,
    };
    let outputs = acc.finish(window, cosine_weight);
    Ok(EvalStats::from_outputs(
        step,
        split.name().to_owned(),
        outputs,
        start.elapsed().as_secs_f64(),
        hidden,
    ))
}
