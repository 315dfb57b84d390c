//! Greedy decoding and beam search over [`TranslationTransformer::decode_step`], batched:
//! every sentence's hypotheses are rows of one [`DecoderCache`], reordered after each step,
//! and a sentence that is done leaves the batch.
//!
//! Beam search follows fairseq's `SequenceGenerator` with `BeamSearch`: at each step the
//! 2·beam best continuations (cumulative log-probability) of a sentence's live hypotheses are
//! its candidates; a candidate ending in EOS among the first `beam` of them is finished, with
//! the score Σ log p / len^lenpen where len counts the EOS; the first `beam` candidates not
//! ending in EOS are the live hypotheses of the next step. `<pad>` is never generated; at a
//! sentence's maximum length a·|src| + b (|src| its non-pad source tokens, capped at the
//! model's positions less one) only EOS is. When a sentence is done, [`BeamStop`] says.

use burn::prelude::*;

use super::TranslationTransformer;

/// When beam search stops working on a sentence (besides its maximum length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BeamStop {
    /// Once it has `beam` finished hypotheses none of which a live hypothesis could still beat:
    /// a live hypothesis of cumulative log-probability s can at best finish with s (log-probs
    /// are ≤ 0) at any length up to the maximum, s / len^lenpen (fairseq's old
    /// `--no-early-stop`). The search then returns the best hypothesis the beam can reach.
    Exact,
    /// Once it has `beam` finished hypotheses, whatever the live ones could become (fairseq's
    /// `SequenceGenerator` today). With lenpen = 0 this is [`BeamStop::Exact`]; with lenpen > 0
    /// a live hypothesis may later finish with a better normalised score, which this misses.
    Fairseq,
}

/// Everything [`TranslationTransformer::beam_search_with`] takes besides the sources.
#[derive(Clone, Copy, Debug)]
pub struct BeamOptions {
    pub beam: usize,
    pub lenpen: f64,
    pub max_len_a: f64,
    pub max_len_b: usize,
    pub bos: u32,
    pub eos: u32,
    pub stop: BeamStop,
}

/// A finished hypothesis: its tokens without BOS and EOS, its log-probability (EOS included)
/// and its score, the log-probability over len^lenpen (len = tokens + 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Hypothesis {
    pub tokens: Vec<u32>,
    pub log_prob: f32,
    pub score: f32,
}

/// A live hypothesis: its tokens so far (without BOS) and cumulative log-probability.
#[derive(Clone)]
struct Live {
    tokens: Vec<u32>,
    score: f32,
}

/// A sentence being searched.
struct Sentence {
    id: usize,
    max_len: usize,
    /// `beam` of them, row `j` of this sentence's block of the cache.
    live: Vec<Live>,
    finished: Vec<Hypothesis>,
}

/// A candidate continuation: the live hypothesis it extends, the token and the cumulative
/// log-probability.
#[derive(Clone, Copy)]
struct Candidate {
    parent: usize,
    token: u32,
    score: f32,
}

fn int1(values: Vec<i64>, device: &Device) -> Tensor<1, Int> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

impl TranslationTransformer {
    /// `[1, N]`: 0, and −∞ at `<pad>` (never generated).
    fn never_pad(&self, device: &Device) -> Tensor<2> {
        let n = self.vocab();
        let row: Vec<f32> = (0..n)
            .map(|v| {
                if v == self.pad {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        Tensor::from_data(TensorData::new(row, [1, n]), device)
    }

    /// Each source's non-pad length.
    fn source_lengths(src_pad: &Tensor<2, Bool>) -> Vec<usize> {
        let [b, s] = src_pad.dims();
        let pads = src_pad
            .clone()
            .int()
            .sum_dim(1)
            .reshape([b])
            .try_into_vec_as::<i64>()
            .expect("the source mask reads back");
        pads.into_iter().map(|p| s - p as usize).collect()
    }

    /// The longest output `max_len` allows: what the decoder's positions hold, BOS and the EOS
    /// step's input included.
    fn cap(&self, max_len: usize) -> usize {
        max_len.min(self.max_positions.saturating_sub(1))
    }

    /// Greedy decoding of sources `src` `[b, s]` (pad mask `src_pad`): from `bos`, the most
    /// probable token (never `<pad>`) until `eos` or `max_len` tokens (capped by the model's
    /// positions); the outputs without BOS and EOS.
    pub fn greedy(
        &self,
        src: Tensor<2, Int>,
        src_pad: Tensor<2, Bool>,
        bos: u32,
        eos: u32,
        max_len: usize,
    ) -> Vec<Vec<u32>> {
        let [b, _] = src.dims();
        let device = src.device();
        let encoded = self.encode(src, src_pad);
        let mut cache = self.decoder_cache(&encoded, None);
        let never_pad = self.never_pad(&device);
        let mut out = vec![Vec::new(); b];
        // The sentence of each row of the cache, and the token it is fed next.
        let mut rows: Vec<usize> = (0..b).collect();
        let mut last = vec![bos; b];
        for _ in 0..self.cap(max_len) {
            let lp = self.decode_step(&mut cache, int1(to_i64(&last), &device));
            let next = (lp + never_pad.clone())
                .argmax(1)
                .reshape([rows.len()])
                .try_into_vec_as::<i64>()
                .expect("argmax reads back");
            let keep: Vec<usize> = (0..rows.len()).filter(|&r| next[r] as u32 != eos).collect();
            for &r in &keep {
                out[rows[r]].push(next[r] as u32);
            }
            if keep.is_empty() {
                break;
            }
            if keep.len() < rows.len() {
                cache.reorder(int1(keep.iter().map(|&r| r as i64).collect(), &device));
            }
            last = keep.iter().map(|&r| next[r] as u32).collect();
            rows = keep.iter().map(|&r| rows[r]).collect();
        }
        out
    }

    /// Beam search with fairseq's semantics (the module's comment) and [`BeamStop::Exact`]:
    /// the best hypothesis of each source, without BOS and EOS. The maximum length of a
    /// sentence is ⌊`max_len_a`·|src| + `max_len_b`⌋ tokens before EOS.
    #[allow(clippy::too_many_arguments)]
    pub fn beam_search(
        &self,
        src: Tensor<2, Int>,
        src_pad: Tensor<2, Bool>,
        beam: usize,
        lenpen: f64,
        max_len_a: f64,
        max_len_b: usize,
        bos: u32,
        eos: u32,
    ) -> Vec<Vec<u32>> {
        let options = BeamOptions {
            beam,
            lenpen,
            max_len_a,
            max_len_b,
            bos,
            eos,
            stop: BeamStop::Exact,
        };
        self.beam_search_with(src, src_pad, &options)
            .into_iter()
            .map(|hyps| {
                hyps.into_iter()
                    .next()
                    .map(|h| h.tokens)
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Beam search: each source's finished hypotheses, best first (at most `beam`).
    pub fn beam_search_with(
        &self,
        src: Tensor<2, Int>,
        src_pad: Tensor<2, Bool>,
        options: &BeamOptions,
    ) -> Vec<Vec<Hypothesis>> {
        let &BeamOptions {
            beam,
            lenpen,
            max_len_a,
            max_len_b,
            bos,
            eos,
            stop,
        } = options;
        assert!(beam >= 1, "a beam of at least one hypothesis");
        let [b, _] = src.dims();
        let device = src.device();
        let n = self.vocab();
        let lengths = Self::source_lengths(&src_pad);
        let encoded = self.encode(src, src_pad);
        let mut cache = self.decoder_cache(&encoded, None);
        // `beam` rows a sentence; at the first step all of them are the same, so only the first
        // may continue (the others start at −∞), as fairseq takes only the first beam.
        cache.reorder(int1(
            (0..b).flat_map(|i| vec![i as i64; beam]).collect(),
            &device,
        ));
        let mut active: Vec<Sentence> = lengths
            .iter()
            .enumerate()
            .map(|(id, &len)| Sentence {
                id,
                max_len: self.cap((max_len_a * len as f64 + max_len_b as f64).floor() as usize),
                live: (0..beam)
                    .map(|j| Live {
                        tokens: Vec::new(),
                        score: if j == 0 { 0.0 } else { f32::NEG_INFINITY },
                    })
                    .collect(),
                finished: Vec::new(),
            })
            .collect();
        let mut done: Vec<Option<Vec<Hypothesis>>> = vec![None; b];
        let never_pad = self.never_pad(&device);
        let mut last = vec![bos; b * beam];
        let k = (2 * beam).min(beam * n);
        for step in 0.. {
            let rows = active.len() * beam;
            let lp = self.decode_step(&mut cache, int1(to_i64(&last), &device)) + never_pad.clone();
            let eos_lp = lp
                .clone()
                .narrow(1, eos as usize, 1)
                .reshape([rows])
                .try_into_vec_as::<f32>()
                .expect("log-probs read back");
            let scores: Vec<f32> = active
                .iter()
                .flat_map(|s| s.live.iter().map(|l| l.score))
                .collect();
            let cumulative =
                lp + Tensor::<2>::from_data(TensorData::new(scores, [rows, 1]), &device);
            let (values, indices) = cumulative
                .reshape([active.len(), beam * n])
                .topk_with_indices(k, 1);
            let values = values.try_into_vec_as::<f32>().expect("scores read back");
            let indices = indices.try_into_vec_as::<i64>().expect("indices read back");
            let mut reorder = Vec::with_capacity(rows);
            let mut next_last = Vec::with_capacity(rows);
            let mut still = Vec::with_capacity(active.len());
            for (a, mut sentence) in active.into_iter().enumerate() {
                let candidates: Vec<Candidate> = if step >= sentence.max_len {
                    // Only EOS: each live hypothesis ends.
                    let mut c: Vec<Candidate> = (0..beam)
                        .map(|j| Candidate {
                            parent: j,
                            token: eos,
                            score: sentence.live[j].score + eos_lp[a * beam + j],
                        })
                        .collect();
                    c.sort_by(|x, y| y.score.total_cmp(&x.score));
                    c
                } else {
                    (0..k)
                        .map(|c| {
                            let flat = indices[a * k + c] as usize;
                            Candidate {
                                parent: flat / n,
                                token: (flat % n) as u32,
                                score: values[a * k + c],
                            }
                        })
                        .collect()
                };
                let len_norm = ((step + 1) as f64).powf(lenpen) as f32;
                for c in candidates.iter().take(beam) {
                    if c.token == eos && c.score.is_finite() {
                        if stop == BeamStop::Fairseq && sentence.finished.len() >= beam {
                            break;
                        }
                        sentence.finished.push(Hypothesis {
                            tokens: sentence.live[c.parent].tokens.clone(),
                            log_prob: c.score,
                            score: c.score / len_norm,
                        });
                    }
                }
                sentence
                    .finished
                    .sort_by(|x, y| y.score.total_cmp(&x.score));
                sentence.finished.truncate(beam);
                let mut live: Vec<(Candidate, Live)> = candidates
                    .iter()
                    .filter(|c| c.token != eos)
                    .take(beam)
                    .map(|c| {
                        let mut tokens = sentence.live[c.parent].tokens.clone();
                        tokens.push(c.token);
                        (
                            *c,
                            Live {
                                tokens,
                                score: c.score,
                            },
                        )
                    })
                    .collect();
                // Fewer continuations than the beam (a tiny vocabulary): dead hypotheses.
                while live.len() < beam {
                    let dead = Candidate {
                        parent: 0,
                        token: eos,
                        score: f32::NEG_INFINITY,
                    };
                    live.push((
                        dead,
                        Live {
                            tokens: Vec::new(),
                            score: f32::NEG_INFINITY,
                        },
                    ));
                }
                let finished = step >= sentence.max_len
                    || live.iter().all(|(_, l)| l.score == f32::NEG_INFINITY)
                    || (sentence.finished.len() >= beam
                        && match stop {
                            BeamStop::Fairseq => true,
                            BeamStop::Exact => {
                                let worst = sentence.finished[beam - 1].score;
                                live.iter().all(|(_, l)| {
                                    best_reachable(l.score, step, sentence.max_len, lenpen) <= worst
                                })
                            }
                        });
                if finished {
                    done[sentence.id] = Some(sentence.finished);
                    continue;
                }
                for (c, _) in &live {
                    reorder.push((a * beam + c.parent) as i64);
                    next_last.push(c.token);
                }
                sentence.live = live.into_iter().map(|(_, l)| l).collect();
                still.push(sentence);
            }
            active = still;
            if active.is_empty() {
                break;
            }
            cache.reorder(int1(reorder, &device));
            last = next_last;
        }
        done.into_iter().map(Option::unwrap_or_default).collect()
    }
}

/// The best normalised score a live hypothesis of cumulative log-probability `score`, after
/// `step + 1` tokens, could finish with: s / len^lenpen for len from step + 2 to max_len + 1
/// (further log-probs are ≤ 0, and s / len^α is monotone in len, so an end of the range).
fn best_reachable(score: f32, step: usize, max_len: usize, lenpen: f64) -> f32 {
    if score == f32::NEG_INFINITY {
        return score;
    }
    let at = |len: usize| score / (len as f64).powf(lenpen) as f32;
    at(step + 2).max(at((max_len + 1).max(step + 2)))
}

fn to_i64(tokens: &[u32]) -> Vec<i64> {
    tokens.iter().map(|&t| t as i64).collect()
}

#[cfg(test)]
mod tests {
    use burn::tensor::activation::log_softmax;
    use conelab_core::model::{DeviceSpec, NormPlacement, TranslationConfig};

    use super::*;
    use crate::model::DeviceSpecExt;
    use crate::model::translation::tests::{
        BOS, EOS, PAD, config, ints, model, model_with, read, sources,
    };

    fn plain() -> Device {
        DeviceSpec::Cpu.device().expect("flex")
    }

    /// log p(· | prefix) after `prefix` (BOS first) for source `src` (no pad), from the full
    /// teacher-forced pass: the computation the search's incremental steps must reproduce.
    fn next_log_probs(m: &TranslationTransformer, src: &[i64], prefix: &[i64]) -> Vec<f32> {
        let device = plain();
        let (s, p) = sources(&[src], &device);
        let encoded = m.encode(s, p);
        let lp = read(log_softmax(
            m.logits(m.decode_hidden(&encoded, ints(&[prefix], &device), None)),
            1,
        ));
        let n = m.vocab();
        lp[(prefix.len() - 1) * n..].to_vec()
    }

    fn with_bos(tokens: &[u32]) -> Vec<i64> {
        std::iter::once(BOS)
            .chain(tokens.iter().map(|&t| t as i64))
            .collect()
    }

    /// A model whose layers mix their inputs more than fairseq's initialisation lets an
    /// untrained model do (which mostly copies its input token): N(0, 0.5) weights, the output
    /// bias N(0, 1) plus `eos_bias` on EOS. `(norm, eos_bias, seed)` are picked so that greedy
    /// outputs differ in length (one empty, one ended early, one at the maximum).
    fn mixing(norm: NormPlacement) -> TranslationTransformer {
        let (eos_bias, seed) = match norm {
            NormPlacement::Post => (2.0, 26),
            NormPlacement::Pre => (0.0, 21),
        };
        let cfg = TranslationConfig {
            init_std: Some(0.5),
            ..config(norm, 0.1)
        };
        model_with(&cfg, 11, eos_bias, seed, &plain())
    }

    /// The stopping bound is the best of s / len^lenpen over every length a live hypothesis
    /// could still end at, tried one by one (negative, zero and slightly positive sums, length
    /// penalties of either sign).
    #[test]
    fn translation_the_exact_bound_tries_every_length() {
        for s in [-7.5f32, -0.25, 0.0, 1e-6, f32::NEG_INFINITY] {
            for lenpen in [-1.0, 0.0, 0.6, 1.0, 2.0] {
                for max_len in 1..6 {
                    for step in 0..max_len {
                        let want = (step + 2..=max_len + 1)
                            .map(|len| s / (len as f64).powf(lenpen) as f32)
                            .fold(f32::NEG_INFINITY, f32::max);
                        let got = best_reachable(s, step, max_len, lenpen);
                        assert!(
                            got == want || (got - want).abs() <= 1e-6 * want.abs(),
                            "s {s} lenpen {lenpen} step {step} max {max_len}: {got} {want}"
                        );
                    }
                }
            }
        }
    }

    /// A batch of sources of different lengths, right-padded.
    const SOURCES: [&[i64]; 3] = [
        &[5, 6, 7, 2, 0, 0],
        &[8, 3, 9, 4, 10, 2],
        &[4, 2, 0, 0, 0, 0],
    ];

    fn unpadded(src: &[i64]) -> Vec<i64> {
        src.iter().copied().filter(|&t| t != PAD).collect()
    }

    /// Greedy decoding of a padded batch against one sentence at a time through the full
    /// pass: the most probable non-pad token after each prefix, until EOS or `max_len`.
    #[test]
    fn translation_greedy_follows_the_full_pass() {
        let device = plain();
        for norm in [NormPlacement::Post, NormPlacement::Pre] {
            let m = mixing(norm);
            let max_len = 7;
            let (src, pad) = sources(&SOURCES, &device);
            let got = m.greedy(src, pad, BOS as u32, EOS as u32, max_len);
            let mut ended_early = false;
            let mut at_most = false;
            for (i, row) in SOURCES.iter().enumerate() {
                let src = unpadded(row);
                let mut want: Vec<u32> = Vec::new();
                while want.len() < max_len {
                    let mut lp = next_log_probs(&m, &src, &with_bos(&want));
                    lp[PAD as usize] = f32::NEG_INFINITY;
                    let best = (0..lp.len())
                        .max_by(|&a, &b| lp[a].total_cmp(&lp[b]).then(b.cmp(&a)))
                        .expect("a token");
                    if best as i64 == EOS {
                        ended_early = true;
                        break;
                    }
                    want.push(best as u32);
                }
                at_most |= want.len() == max_len;
                assert_eq!(got[i], want, "{norm:?}: sentence {i}");
            }
            assert!(
                ended_early && at_most && got.iter().any(|g| !g.is_empty()),
                "{norm:?}: some sentences end before max_len, not all at once: {got:?}"
            );
        }
    }

    /// A beam of one is greedy decoding: exactly with fairseq's stopping rule at any length
    /// penalty, and with the exact rule at lenpen = 0 (where the two rules agree).
    #[test]
    fn translation_beam_of_one_is_greedy() {
        let device = plain();
        for norm in [NormPlacement::Post, NormPlacement::Pre] {
            let m = mixing(norm);
            let (src, pad) = sources(&SOURCES, &device);
            let greedy = m.greedy(src.clone(), pad.clone(), BOS as u32, EOS as u32, 6);
            let exact = m.beam_search(
                src.clone(),
                pad.clone(),
                1,
                0.0,
                0.0,
                6,
                BOS as u32,
                EOS as u32,
            );
            assert_eq!(exact, greedy, "{norm:?}: exact rule, lenpen 0");
            for lenpen in [0.0, 1.0, 2.0] {
                let options = BeamOptions {
                    beam: 1,
                    lenpen,
                    max_len_a: 0.0,
                    max_len_b: 6,
                    bos: BOS as u32,
                    eos: EOS as u32,
                    stop: BeamStop::Fairseq,
                };
                let fairseq: Vec<Vec<u32>> = m
                    .beam_search_with(src.clone(), pad.clone(), &options)
                    .into_iter()
                    .map(|h| h[0].tokens.clone())
                    .collect();
                assert_eq!(fairseq, greedy, "{norm:?}: fairseq's rule, lenpen {lenpen}");
            }
        }
    }

    /// Every hypothesis of at most `max_len` tokens (any token but pad and EOS), scored through
    /// the full pass with fairseq's normalisation: (Σ log p incl. EOS) / (len + 1)^lenpen, best
    /// first.
    fn exhaustive(
        m: &TranslationTransformer,
        src: &[i64],
        max_len: usize,
        lenpen: f64,
    ) -> Vec<(f64, Vec<u32>)> {
        let n = m.vocab() as u32;
        let tokens: Vec<u32> = (0..n)
            .filter(|&t| t as i64 != PAD && t as i64 != EOS)
            .collect();
        let mut all = vec![Vec::new()];
        let mut frontier: Vec<Vec<u32>> = vec![Vec::new()];
        for _ in 0..max_len {
            frontier = frontier
                .iter()
                .flat_map(|p| {
                    tokens.iter().map(move |&t| {
                        let mut q = p.clone();
                        q.push(t);
                        q
                    })
                })
                .collect();
            all.extend(frontier.iter().cloned());
        }
        let mut scored: Vec<(f64, Vec<u32>)> = all
            .into_iter()
            .map(|y| {
                let mut with_eos = with_bos(&y);
                with_eos.push(EOS);
                let (s, p) = sources(&[src], &plain());
                let encoded = m.encode(s, p);
                let lp = read(log_softmax(
                    m.logits(m.decode_hidden(&encoded, ints(&[&with_eos[..]], &plain()), None)),
                    1,
                ));
                let nv = n as usize;
                let sum: f64 = (1..with_eos.len())
                    .map(|i| lp[(i - 1) * nv + with_eos[i] as usize] as f64)
                    .sum();
                (sum / ((y.len() + 1) as f64).powf(lenpen), y)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored
    }

    /// With a beam wider than every hypothesis (5 tokens, 3 of them generable, up to 3
    /// tokens: 40 hypotheses), beam search is exhaustive: its best is the best of all
    /// sequences under fairseq's length-normalised score, for several length penalties, two
    /// sentences batched, and both stopping rules.
    #[test]
    fn translation_wide_beam_finds_the_exhaustive_best() {
        let device = plain();
        let m = model(NormPlacement::Pre, 5, 1.0, 23, &device);
        let rows: [&[i64]; 2] = [&[3, 4, 4, 2], &[4, 3, 2, 0]];
        let (src, pad) = sources(&rows, &device);
        let mut lengths = Vec::new();
        for lenpen in [0.0, 1.0, 3.0] {
            for stop in [BeamStop::Exact, BeamStop::Fairseq] {
                let options = BeamOptions {
                    beam: 41,
                    lenpen,
                    max_len_a: 0.0,
                    max_len_b: 3,
                    bos: BOS as u32,
                    eos: EOS as u32,
                    stop,
                };
                let got = m.beam_search_with(src.clone(), pad.clone(), &options);
                for (i, row) in rows.iter().enumerate() {
                    let all = exhaustive(&m, &unpadded(row), 3, lenpen);
                    assert_eq!(all.len(), 40);
                    assert!(
                        all[0].0 - all[1].0 > 1e-3,
                        "a clear best ({} against {})",
                        all[0].0,
                        all[1].0
                    );
                    assert_eq!(
                        got[i][0].tokens, all[0].1,
                        "lenpen {lenpen} {stop:?} sentence {i}"
                    );
                    assert!(
                        (got[i][0].score as f64 - all[0].0).abs() < 1e-4,
                        "score {} against {}",
                        got[i][0].score,
                        all[0].0
                    );
                    // The whole list, best first, is the exhaustive ranking's head.
                    assert_eq!(got[i].len(), 40.min(options.beam));
                    for (h, (score, tokens)) in got[i].iter().zip(&all) {
                        assert!((h.score as f64 - score).abs() < 1e-4);
                        assert_eq!(&h.tokens, tokens);
                    }
                    lengths.push(all[0].1.len());
                }
            }
            let public = m.beam_search(src.clone(), pad.clone(), 41, lenpen, 0.0, 3, 1, 2);
            for (i, row) in rows.iter().enumerate() {
                assert_eq!(public[i], exhaustive(&m, &unpadded(row), 3, lenpen)[0].1);
            }
        }
        // The length penalty matters here: the best lengths are not all the same.
        lengths.sort_unstable();
        lengths.dedup();
        assert!(lengths.len() > 1, "best lengths {lengths:?}");
    }

    /// fairseq's beam search written out plainly for one sentence: live hypotheses as lists
    /// (no cache, no batch, no dead rows), each step's log-probs from the full pass, the
    /// candidates sorted, the stopping bound by trying every length.
    fn reference(m: &TranslationTransformer, src: &[i64], o: &BeamOptions) -> Vec<(Vec<u32>, f32)> {
        let max_len = ((o.max_len_a * src.len() as f64 + o.max_len_b as f64).floor() as usize)
            .min(m.max_positions - 1);
        let n = m.vocab();
        let mut live: Vec<(Vec<u32>, f32)> = vec![(Vec::new(), 0.0)];
        let mut finished: Vec<(Vec<u32>, f32)> = Vec::new();
        for step in 0..=max_len {
            let mut candidates: Vec<(f32, usize, u32)> = Vec::new();
            for (j, (tokens, score)) in live.iter().enumerate() {
                let lp = next_log_probs(m, src, &with_bos(tokens));
                for v in 0..n as u32 {
                    let forced_out = step >= max_len && v != o.eos;
                    if v as i64 == PAD || forced_out {
                        continue;
                    }
                    candidates.push((score + lp[v as usize], j, v));
                }
            }
            // Best first; ties in the order of (hypothesis, token), as top-k of the flat rows.
            candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            candidates.truncate(2 * o.beam);
            let norm = ((step + 1) as f64).powf(o.lenpen) as f32;
            for &(score, j, v) in candidates.iter().take(o.beam) {
                let room = o.stop == BeamStop::Exact || finished.len() < o.beam;
                if v == o.eos && room {
                    finished.push((live[j].0.clone(), score / norm));
                }
            }
            finished.sort_by(|a, b| b.1.total_cmp(&a.1));
            finished.truncate(o.beam);
            live = candidates
                .iter()
                .filter(|c| c.2 != o.eos)
                .take(o.beam)
                .map(|&(score, j, v)| {
                    let mut t = live[j].0.clone();
                    t.push(v);
                    (t, score)
                })
                .collect();
            if step >= max_len || live.is_empty() {
                break;
            }
            if finished.len() >= o.beam {
                if o.stop == BeamStop::Fairseq {
                    break;
                }
                let worst = finished[o.beam - 1].1;
                let could = live
                    .iter()
                    .flat_map(|(_, s)| {
                        (step + 2..=max_len + 1)
                            .map(move |len| s / (len as f64).powf(o.lenpen) as f32)
                    })
                    .fold(f32::NEG_INFINITY, f32::max);
                if could <= worst {
                    break;
                }
            }
        }
        finished
    }

    /// Narrow beams on a batch of three sources of different lengths (so different maximum
    /// lengths, a·|src| + b), both stopping rules, two length penalties: the batched search
    /// (cache, reorder, sentences leaving the batch) finds the same hypotheses with the same
    /// scores as the plain one-sentence reference.
    #[test]
    fn translation_narrow_beams_match_the_plain_reference() {
        let device = plain();
        // Whether the two rules' best hypotheses ever differ (else the bound goes untested).
        let mut rules_differ = false;
        for (norm, eos_bias, seed) in [
            (NormPlacement::Post, 2.0, 24),
            (NormPlacement::Pre, 0.0, 21),
        ] {
            let cfg = TranslationConfig {
                init_std: Some(0.5),
                ..config(norm, 0.1)
            };
            let m = model_with(&cfg, 11, eos_bias, seed, &device);
            let (src, pad) = sources(&SOURCES, &device);
            for beam in [2, 3] {
                for lenpen in [0.6, 1.0] {
                    let mut bests = Vec::new();
                    for stop in [BeamStop::Exact, BeamStop::Fairseq] {
                        let o = BeamOptions {
                            beam,
                            lenpen,
                            max_len_a: 1.0,
                            max_len_b: 1,
                            bos: BOS as u32,
                            eos: EOS as u32,
                            stop,
                        };
                        let got = m.beam_search_with(src.clone(), pad.clone(), &o);
                        bests.push(got.iter().map(|h| h[0].tokens.clone()).collect::<Vec<_>>());
                        for (i, row) in SOURCES.iter().enumerate() {
                            let want = reference(&m, &unpadded(row), &o);
                            let what = format!("{norm:?} beam {beam} lenpen {lenpen} {stop:?} {i}");
                            assert_eq!(got[i].len(), want.len(), "{what}");
                            for (h, (tokens, score)) in got[i].iter().zip(&want) {
                                assert_eq!(&h.tokens, tokens, "{what}");
                                assert!((h.score - score).abs() < 1e-4, "{what}");
                                let len = (h.tokens.len() + 1) as f32;
                                let normed = h.log_prob / len.powf(lenpen as f32);
                                assert!((h.score - normed).abs() < 1e-5, "{what}");
                            }
                        }
                    }
                    rules_differ |= bests[0] != bests[1];
                }
            }
        }
        assert!(
            rules_differ,
            "the exact rule finds a better hypothesis somewhere"
        );
    }
}
