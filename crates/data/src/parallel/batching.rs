//! Token-based batching of sentence pairs: fairseq's `--max-tokens`.
//!
//! A pair needs `max(source length, target length + 1)` tokens per row — the source with its
//! `</s>`, the decoder's sequences one longer than the target (`<s>` + target, target + `</s>`).
//! That is fairseq's `num_tokens` (`max(src_sizes, tgt_sizes)`, both sizes counting the `</s>`
//! fairseq appends to each side). A batch of `n` pairs costs `n × max over its pairs` — its padded
//! size, as `batch_by_size` counts it — and that stays ≤ `max_tokens`.
//!
//! As fairseq does (`LanguagePairDataset.ordered_indices`, `data_utils.batch_by_size`,
//! `EpochBatchIterator`): the pairs in a seeded random order, stably sorted by source length and
//! then target length (so equal lengths meet in a seeded order), cut greedily into batches; the
//! batches are formed once, and only their order is shuffled each epoch. The order of epoch `e`
//! is a pure function of `(seed, e)` — ChaCha8 keyed by both — so a run resumed at epoch `e`,
//! batch `k` continues with exactly the batches the uninterrupted run would have seen.
//!
//! A pair longer than `max_tokens` cannot fit any batch. By default it is refused with an error
//! naming its file and line ([`LongPairs::Refuse`]; fairseq asserts the same): on a valid or test
//! split a dropped pair would silently change BLEU and PPL. [`LongPairs::Skip`] drops and counts
//! such pairs instead (for a training split with a few stray long lines).

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::{ParallelCorpus, ParallelSplit};
use crate::order::below;
use crate::{DataError, Split};

/// What to do with a pair that needs more than `max_tokens` tokens on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LongPairs {
    /// An error naming the file, line and lengths (the default).
    #[default]
    Refuse,
    /// Left out of every batch and counted ([`TokenBatcher::skipped`]).
    Skip,
}

/// How batches are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBatchOptions {
    /// Upper bound on a batch's padded size, `pairs × max(source len, target len + 1)`.
    pub max_tokens: usize,
    /// Upper bound on the pairs per batch (fairseq's `--batch-size`), if any.
    pub max_sentences: Option<usize>,
    pub long_pairs: LongPairs,
}

impl TokenBatchOptions {
    /// Batches of at most `max_tokens` padded tokens, no sentence cap, long pairs refused.
    pub fn new(max_tokens: usize) -> Self {
        Self {
            max_tokens,
            max_sentences: None,
            long_pairs: LongPairs::Refuse,
        }
    }
}

/// One batch, padded, row-major `[batch, len]` with `<pad>` after each sequence's end (right
/// padding; the lengths say where each row's real tokens stop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairBatch {
    /// The pairs of the batch, by index into the split, in row order.
    pub pairs: Vec<usize>,
    /// Number of rows.
    pub batch: usize,
    /// Columns of `source`: the longest source, `</s>` included.
    pub source_len: usize,
    /// Columns of `decoder_input` and `decoder_output`: the longest target + 1.
    pub target_len: usize,
    /// `[batch, source_len]`: source ids, `</s>`, then `<pad>`.
    pub source: Vec<u32>,
    /// `[batch, target_len]`: `<s>`, target ids, then `<pad>`.
    pub decoder_input: Vec<u32>,
    /// `[batch, target_len]`: target ids, `</s>`, then `<pad>` (never scored).
    pub decoder_output: Vec<u32>,
    /// Real tokens per row of `source` (`</s>` included).
    pub source_lengths: Vec<usize>,
    /// Real tokens per row of the decoder sequences (target + 1): the scored positions.
    pub target_lengths: Vec<usize>,
}

impl PairBatch {
    /// `pairs` of `split` right-padded with `pad`: the source as it is (it ends with `</s>`),
    /// the decoder's input `bos` + target, its output target + `eos` (fairseq's convention). The
    /// one place a batch is laid out: [`TokenBatcher::batch`] and the translation trainer both
    /// call it.
    pub fn pad(split: &ParallelSplit, pairs: Vec<usize>, [pad, bos, eos]: [u32; 3]) -> Self {
        let n = pairs.len();
        let source_len = pairs
            .iter()
            .map(|&i| split.source_len(i))
            .max()
            .unwrap_or(0);
        let target_len = pairs
            .iter()
            .map(|&i| split.target_len(i) + 1)
            .max()
            .unwrap_or(0);
        let mut source = vec![pad; n * source_len];
        let mut decoder_input = vec![pad; n * target_len];
        let mut decoder_output = vec![pad; n * target_len];
        let mut source_lengths = Vec::with_capacity(n);
        let mut target_lengths = Vec::with_capacity(n);
        for (row, &i) in pairs.iter().enumerate() {
            let s = split.source(i);
            source[row * source_len..][..s.len()].copy_from_slice(s);
            let t = split.target(i);
            let input = &mut decoder_input[row * target_len..][..t.len() + 1];
            input[0] = bos;
            input[1..].copy_from_slice(t);
            let output = &mut decoder_output[row * target_len..][..t.len() + 1];
            output[..t.len()].copy_from_slice(t);
            output[t.len()] = eos;
            source_lengths.push(s.len());
            target_lengths.push(t.len() + 1);
        }
        Self {
            pairs,
            batch: n,
            source_len,
            target_len,
            source,
            decoder_input,
            decoder_output,
            source_lengths,
            target_lengths,
        }
    }

    /// The batch's size as `--max-tokens` counts it: `batch × max(source_len, target_len)`.
    pub fn padded_tokens(&self) -> usize {
        self.batch * self.source_len.max(self.target_len)
    }

    /// Scored target positions (`</s>` included, padding not).
    pub fn target_tokens(&self) -> usize {
        self.target_lengths.iter().sum()
    }
}

/// Random streams of the batcher, by purpose: the key is (seed, purpose, epoch).
const TIES: u64 = 1;
const EPOCH_ORDER: u64 = 2;

fn stream(seed: u64, purpose: u64, epoch: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&purpose.to_le_bytes());
    key[16..24].copy_from_slice(&epoch.to_le_bytes());
    ChaCha8Rng::from_seed(key)
}

/// Fisher–Yates, as [`crate::order::shuffle_lines`] does it.
fn shuffle<T>(items: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..items.len()).rev() {
        items.swap(i, below(rng, i + 1));
    }
}

/// The batches of one split, formed once; per epoch, a seeded order of them.
#[derive(Debug, Clone)]
pub struct TokenBatcher<'a> {
    split: &'a ParallelSplit,
    pad: u32,
    bos: u32,
    eos: u32,
    seed: u64,
    batches: Vec<Vec<usize>>,
    skipped: Vec<usize>,
}

impl<'a> TokenBatcher<'a> {
    pub fn new(
        corpus: &'a ParallelCorpus,
        split: Split,
        options: &TokenBatchOptions,
        seed: u64,
    ) -> Result<Self, DataError> {
        let param = |option, value: usize, reason: &str| DataError::InvalidParameter {
            option,
            value: value.to_string(),
            reason: reason.to_owned(),
        };
        let max_tokens = options.max_tokens;
        if max_tokens == 0 {
            return Err(param("--max-tokens", 0, "must be at least 1"));
        }
        if options.max_sentences == Some(0) {
            return Err(param("--max-sentences", 0, "must be at least 1"));
        }
        let max_sentences = options.max_sentences.unwrap_or(usize::MAX);
        let pairs = corpus.split(split);
        let need = |i: usize| pairs.source_len(i).max(pairs.target_len(i) + 1);

        let mut kept = Vec::with_capacity(pairs.len());
        let mut skipped = Vec::new();
        for i in 0..pairs.len() {
            if need(i) <= max_tokens {
                kept.push(i);
            } else if options.long_pairs == LongPairs::Skip {
                skipped.push(i);
            } else {
                return Err(DataError::PairTooLong {
                    split,
                    path: pairs.paths().0.to_path_buf(),
                    line: pairs.line(i),
                    source_len: pairs.source_len(i),
                    target_len: pairs.target_len(i),
                    need: need(i),
                    max_tokens,
                });
            }
        }
        shuffle(&mut kept, &mut stream(seed, TIES, 0));
        kept.sort_by_key(|&i| (pairs.source_len(i), pairs.target_len(i))); // stable

        // Greedy: a pair joins the open batch unless the batch would then exceed a bound
        // (`batch_by_size` with a batch-size multiple of 1).
        let mut batches = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let mut open_max = 0;
        for i in kept {
            let widest = open_max.max(need(i));
            if !open.is_empty()
                && ((open.len() + 1) * widest > max_tokens || open.len() + 1 > max_sentences)
            {
                batches.push(std::mem::take(&mut open));
                open_max = 0;
            }
            open_max = open_max.max(need(i));
            open.push(i);
        }
        if !open.is_empty() {
            batches.push(open);
        }
        let vocab = corpus.vocab();
        Ok(Self {
            split: pairs,
            pad: vocab.pad(),
            bos: vocab.bos(),
            eos: vocab.eos(),
            seed,
            batches,
            skipped,
        })
    }

    pub fn num_batches(&self) -> usize {
        self.batches.len()
    }

    /// The batches' pairs (indices into the split), in length order.
    pub fn batches(&self) -> &[Vec<usize>] {
        &self.batches
    }

    /// Pairs left out as too long ([`LongPairs::Skip`]), by index into the split.
    pub fn skipped(&self) -> &[usize] {
        &self.skipped
    }

    /// The order of the batches in epoch `epoch` (a permutation of `0..num_batches()`): a pure
    /// function of the seed and the epoch.
    pub fn epoch_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.batches.len()).collect();
        shuffle(&mut order, &mut stream(self.seed, EPOCH_ORDER, epoch));
        order
    }

    /// Batch `k` (in length order), padded; `None` past the end.
    pub fn batch(&self, k: usize) -> Option<PairBatch> {
        let pairs = self.batches.get(k)?.clone();
        Some(PairBatch::pad(
            self.split,
            pairs,
            [self.pad, self.bos, self.eos],
        ))
    }

    /// The batches of epoch `epoch`, in that epoch's order.
    pub fn epoch(&self, epoch: u64) -> impl Iterator<Item = PairBatch> + '_ {
        self.epoch_order(epoch)
            .into_iter()
            .filter_map(|k| self.batch(k))
    }

    /// The batches in length order (evaluation: every pair once, no shuffle).
    pub fn in_order(&self) -> impl Iterator<Item = PairBatch> + '_ {
        (0..self.batches.len()).filter_map(|k| self.batch(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitText;
    use crate::parallel::ParallelOptions;

    /// A corpus whose train split has `pairs` pairs of varied lengths (1–40 source words, 1–30
    /// target words, from a fixed linear congruential sequence).
    fn corpus(pairs: usize) -> ParallelCorpus {
        let mut x: u64 = 12345;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let (mut src, mut tgt) = (String::new(), String::new());
        for _ in 0..pairs {
            let (ls, lt) = (1 + next(40), 1 + next(30));
            let line = |len, prefix: &str, next: &mut dyn FnMut(u64) -> u64| {
                (0..len)
                    .map(|_| format!("{prefix}{}", next(50)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            src.push_str(&line(ls, "s", &mut next));
            src.push('\n');
            tgt.push_str(&line(lt, "t", &mut next));
            tgt.push('\n');
        }
        let text = |name: &str, s: &str| {
            SplitText::from_bytes(name.into(), s.as_bytes().to_vec(), 1 << 20).expect("valid")
        };
        let held = || (text("valid.s", "s1\n"), text("valid.t", "t1\n"));
        ParallelCorpus::from_texts(
            "batching".into(),
            "s",
            "t",
            [
                (text("train.s", &src), text("train.t", &tgt)),
                held(),
                held(),
            ],
            &ParallelOptions::default(),
        )
        .expect("builds")
    }

    #[test]
    fn every_pair_once_per_epoch_within_the_token_bound() {
        let c = corpus(600);
        let split = c.split(Split::Train);
        for (max_tokens, max_sentences) in [(41, None), (64, None), (500, None), (2000, Some(7))] {
            let options = TokenBatchOptions {
                max_sentences,
                ..TokenBatchOptions::new(max_tokens)
            };
            let b = TokenBatcher::new(&c, Split::Train, &options, 9).expect("batches");
            assert!(b.skipped().is_empty());
            for epoch in 0..3 {
                let mut seen = vec![0u32; split.len()];
                for batch in b.epoch(epoch) {
                    assert!(batch.padded_tokens() <= max_tokens, "{max_tokens}");
                    // The same bound recomputed from the pairs themselves.
                    let widest = batch
                        .pairs
                        .iter()
                        .map(|&i| split.source(i).len().max(split.target(i).len() + 1))
                        .max()
                        .expect("non-empty");
                    assert!(batch.pairs.len() * widest <= max_tokens);
                    assert!(batch.batch <= max_sentences.unwrap_or(usize::MAX));
                    for &i in &batch.pairs {
                        seen[i] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "max_tokens {max_tokens}");
            }
        }
    }

    /// Greedy as fairseq's `batch_by_size`: in length order, each batch (but the last) is closed
    /// only because its next pair would have broken a bound.
    #[test]
    fn batches_are_greedy_in_length_order() {
        let c = corpus(400);
        let split = c.split(Split::Train);
        let need = |i: usize| split.source_len(i).max(split.target_len(i) + 1);
        let options = TokenBatchOptions {
            max_sentences: Some(9),
            ..TokenBatchOptions::new(300)
        };
        let b = TokenBatcher::new(&c, Split::Train, &options, 1).expect("batches");
        let flat: Vec<usize> = b.batches().concat();
        let lengths: Vec<(usize, usize)> = flat
            .iter()
            .map(|&i| (split.source_len(i), split.target_len(i)))
            .collect();
        assert!(lengths.windows(2).all(|w| w[0] <= w[1]), "sorted by length");
        for w in b.batches().windows(2) {
            let (full, next) = (&w[0], w[1][0]);
            let widest = full
                .iter()
                .map(|&i| need(i))
                .max()
                .expect("non-empty")
                .max(need(next));
            assert!((full.len() + 1) * widest > 300 || full.len() + 1 > 9);
        }
    }

    #[test]
    fn the_epoch_order_is_a_function_of_seed_and_epoch() {
        let c = corpus(300);
        let options = TokenBatchOptions::new(120);
        let a = TokenBatcher::new(&c, Split::Train, &options, 5).expect("batches");
        let again = TokenBatcher::new(&c, Split::Train, &options, 5).expect("batches");
        assert!(a.num_batches() > 20);
        // Epoch 3 straight away (a resumed run) is epoch 3 of a run that went through 0..3.
        let _ = (0..3).map(|e| a.epoch(e).count()).sum::<usize>();
        assert_eq!(a.epoch_order(3), again.epoch_order(3));
        assert_eq!(
            a.epoch(3).collect::<Vec<_>>(),
            again.epoch(3).collect::<Vec<_>>()
        );
        assert_ne!(a.epoch_order(0), a.epoch_order(1));
        assert_ne!(a.epoch_order(1), a.epoch_order(2));
        let mut sorted = a.epoch_order(7);
        sorted.sort_unstable();
        assert_eq!(sorted, (0..a.num_batches()).collect::<Vec<_>>());
        let other = TokenBatcher::new(&c, Split::Train, &options, 6).expect("batches");
        assert_ne!(a.epoch_order(0), other.epoch_order(0));
    }

    #[test]
    fn padded_tensors_have_the_documented_layout() {
        let c = corpus(50);
        let split = c.split(Split::Train);
        let v = c.vocab();
        let b =
            TokenBatcher::new(&c, Split::Train, &TokenBatchOptions::new(200), 2).expect("batches");
        for batch in b.in_order() {
            let (sl, tl) = (batch.source_len, batch.target_len);
            assert_eq!(batch.source.len(), batch.batch * sl);
            assert_eq!(batch.decoder_input.len(), batch.batch * tl);
            for (row, &i) in batch.pairs.iter().enumerate() {
                let (s, t) = (split.source(i), split.target(i));
                let src = &batch.source[row * sl..(row + 1) * sl];
                assert_eq!(&src[..s.len()], s);
                assert_eq!(*s.last().expect("</s>"), v.eos());
                assert!(src[s.len()..].iter().all(|&x| x == v.pad()));
                let input = &batch.decoder_input[row * tl..(row + 1) * tl];
                let output = &batch.decoder_output[row * tl..(row + 1) * tl];
                let mut want_in = vec![v.bos()];
                want_in.extend_from_slice(t);
                let mut want_out = t.to_vec();
                want_out.push(v.eos());
                want_in.resize(tl, v.pad());
                want_out.resize(tl, v.pad());
                assert_eq!((input, output), (&want_in[..], &want_out[..]));
                assert_eq!(
                    (batch.source_lengths[row], batch.target_lengths[row]),
                    (s.len(), t.len() + 1)
                );
            }
        }
    }

    #[test]
    fn a_pair_longer_than_the_bound_is_refused_or_skipped() {
        let c = corpus(200);
        let split = c.split(Split::Train);
        let need = |i: usize| split.source_len(i).max(split.target_len(i) + 1);
        let longest = (0..split.len())
            .max_by_key(|&i| (need(i), std::cmp::Reverse(i)))
            .expect("pairs");
        let first_long = (0..split.len())
            .find(|&i| need(i) == need(longest))
            .expect("found");
        let bound = need(longest) - 1;
        let err = TokenBatcher::new(&c, Split::Train, &TokenBatchOptions::new(bound), 0)
            .unwrap_err()
            .to_string();
        let want = format!(
            "train.s line {} (train split): the pair needs {} tokens per sentence (source {} with </s>, target {} + 1), over the batch limit of {bound} tokens",
            split.line(first_long),
            need(first_long),
            split.source_len(first_long),
            split.target_len(first_long)
        );
        assert_eq!(err, want);
        let options = TokenBatchOptions {
            long_pairs: LongPairs::Skip,
            ..TokenBatchOptions::new(bound)
        };
        let b = TokenBatcher::new(&c, Split::Train, &options, 0).expect("skips");
        let too_long: Vec<usize> = (0..split.len()).filter(|&i| need(i) > bound).collect();
        assert_eq!(b.skipped(), too_long);
        let batched: usize = b.batches().iter().map(Vec::len).sum();
        assert_eq!(batched + too_long.len(), split.len());
        assert!(TokenBatcher::new(&c, Split::Train, &TokenBatchOptions::new(0), 0).is_err());
    }
}
