//! Exact perplexity over a whole split, total and per frequency group of the target token
//! (methods.md §2), in inference mode. Every position of the split is predicted exactly once: all
//! windows including the last, shorter one, and the positions after the last stream.

use std::time::Instant;

use burn::prelude::*;

use super::EngineError;
use super::protocol::EvalStats;
use crate::data::{Corpus, PartialWindow, Split, StreamBatcher};
use crate::model::output::target_log_probs;
use crate::model::{LanguageModel, RecurrentState};

pub fn evaluate(
    model: &LanguageModel,
    device: &Device,
    corpus: &Corpus,
    split: Split,
    streams: usize,
    window: usize,
    step: u64,
) -> Result<EvalStats, EngineError> {
    let start = Instant::now();
    let model = model.valid();
    let tokens = corpus.split(split);
    let groups = corpus.groups();
    let batcher = StreamBatcher::new(tokens, streams, window, PartialWindow::Keep)
        .map_err(|e| EngineError::Config(format!("{split} split: {e}")))?;
    let mut nll = [0f64; 3];
    let mut count = [0u64; 3];
    let mut state: Option<RecurrentState> = None;
    let mut score = |inputs: Vec<u32>,
                     targets: Vec<u32>,
                     shape: [usize; 2],
                     state: Option<RecurrentState>|
     -> Result<Option<RecurrentState>, EngineError> {
        let x = Tensor::<2, Int>::from_data(TensorData::new(inputs, shape), device);
        let y = Tensor::<1, Int>::from_data(
            TensorData::new(targets.clone(), [shape[0] * shape[1]]),
            device,
        );
        let (hidden, next) = model.hidden(x, state);
        let log_probs = target_log_probs(model.logits(hidden), y)
            .try_into_vec_as::<f32>()
            .map_err(|e| EngineError::Backend(format!("reading log-probabilities: {e:?}")))?;
        for (&target, &lp) in targets.iter().zip(&log_probs) {
            let g = groups.group_of(target) as usize;
            nll[g] -= lp as f64;
            count[g] += 1;
        }
        Ok(next)
    };
    for batch in batcher.iter() {
        state = score(
            batch.inputs,
            batch.targets,
            [batch.batch, batch.time],
            state,
        )?;
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
        score(rest.inputs, rest.targets, [1, rest.time], carried)?;
    }
    let positions: u64 = count.iter().sum();
    let total_nll: f64 = nll.iter().sum();
    let ppl_of = |nll: f64, n: u64| {
        if n == 0 {
            f64::NAN
        } else {
            (nll / n as f64).exp()
        }
    };
    let loss = total_nll / positions.max(1) as f64;
    Ok(EvalStats {
        step,
        split: split.name().to_owned(),
        loss,
        ppl: loss.exp(),
        groups: [0, 1, 2].map(|g| (ppl_of(nll[g], count[g]), count[g])),
        positions,
        seconds: start.elapsed().as_secs_f64(),
    })
}
