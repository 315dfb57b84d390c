//! Reference n-gram models per frequency group (methods.md §2, the bar of §4): a unigram model
//! and an interpolated modified Kneser–Ney trigram (Chen & Goodman 1998), trained on a split
//! given as one stream of token ids (the history runs across `<eos>`, as the language models see
//! it) and scored on another, per group of the target token.
//!
//! Modified KN, per order k ∈ {3, 2, 1}, with counts c (raw counts at the highest order,
//! continuation counts N1+(•h w) below it: the number of distinct words seen before h w):
//!
//! ```text
//! P_k(w | h) = max(c(h w) − D_k(c(h w)), 0) / c(h •) + γ_k(h) · P_{k−1}(w | h')
//! γ_k(h)     = (D_k,1·N1(h •) + D_k,2·N2(h •) + D_k,3+·N3+(h •)) / c(h •)
//! D_k(c)     = D_k,1, D_k,2, D_k,3+ for c = 1, 2, ≥ 3;  Y = n1/(n1 + 2·n2),  D_k,j = j − (j+1)·Y·n_{j+1}/n_j
//! P_0(w)     = 1/N
//! ```
//!
//! where n_j is the number of n-grams of order k whose count is j. **Choice:** an order whose
//! n1…n4 are not all there (a small or synthetic text: every word of the built-in corpus follows
//! many others, so no unigram continuation count is 1), or whose estimate leaves a discount at 0
//! or below, uses one discount for every count instead,
//! Y = n1/(n1 + 2·n2) where n1 and n2 are there, else 0.75 — each order says which
//! ([`DiscountKind`]). A history never seen
//! (c(h •) = 0) passes all its mass to the order below. The first scored position of a split (one
//! word of history) is scored by the bigram level; the split's first token is no target, as in
//! the language models' stream.

use rustc_hash::FxHashMap;

/// Why a reference model cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NgramError {
    #[error(
        "the training text is too small for Kneser–Ney discounts: its {order}-grams have no count of {count} (every count 1 to 4 must occur at every order)"
    )]
    TooSmall { order: usize, count: usize },
    #[error(
        "the training text is too small for a trigram model: {tokens} tokens (at least 3 are needed)"
    )]
    NoTrigrams { tokens: usize },
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    OutOfVocabulary { id: u32, vocab: usize },
    #[error("the vocabulary must have between 1 and 2^21 tokens, not {0}")]
    VocabularySize(usize),
}

/// The three discounts of one order: for counts 1, 2 and 3 or more.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Discounts(pub [f64; 3]);

/// How an order's discounts were estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiscountKind {
    /// Chen & Goodman's three discounts from n1…n4.
    Modified,
    /// One discount Y = n1/(n1 + 2·n2): some of n3, n4 missing.
    Single,
    /// One discount 0.75: n1 or n2 missing.
    Fixed,
    /// Set by the caller ([`KneserNey::with_single_discount`]).
    Given,
}

impl DiscountKind {
    pub fn name(self) -> &'static str {
        match self {
            DiscountKind::Modified => "modified",
            DiscountKind::Single => "single Y",
            DiscountKind::Fixed => "fixed 0.75",
            DiscountKind::Given => "given",
        }
    }
}

impl Discounts {
    /// Modified KN's discounts where n1…n4 are all there, else the fallback of the module's
    /// **Choice** (one discount for every count).
    pub fn estimate(n: [u64; 4], order: usize) -> (Self, DiscountKind) {
        // A discount clamped to 0 would leave a history whose successors all have that count
        // nothing to give the lower order (an unseen word there would get probability 0).
        if let Ok(d) = Self::from_count_of_counts(n, order)
            && d.0.iter().all(|&x| x > 0.0)
        {
            return (d, DiscountKind::Modified);
        }
        if n[0] > 0 && n[1] > 0 {
            let y = n[0] as f64 / (n[0] as f64 + 2.0 * n[1] as f64);
            (Discounts([y; 3]), DiscountKind::Single)
        } else {
            (Discounts([0.75; 3]), DiscountKind::Fixed)
        }
    }
}

impl Discounts {
    /// From the count-of-counts n1…n4 of an order. Each discount is kept inside [0, j] (a
    /// discount outside would take more than the count, or add to it).
    pub fn from_count_of_counts(n: [u64; 4], order: usize) -> Result<Self, NgramError> {
        if let Some(j) = n.iter().position(|&c| c == 0) {
            return Err(NgramError::TooSmall {
                order,
                count: j + 1,
            });
        }
        let n = n.map(|c| c as f64);
        let y = n[0] / (n[0] + 2.0 * n[1]);
        let d = |j: usize| {
            let jf = j as f64;
            (jf - (jf + 1.0) * y * n[j] / n[j - 1]).clamp(0.0, jf)
        };
        Ok(Discounts([d(1), d(2), d(3)]))
    }

    /// The discount for a count (0 for an unseen n-gram).
    pub fn of(&self, count: u32) -> f64 {
        match count {
            0 => 0.0,
            1 => self.0[0],
            2 => self.0[1],
            _ => self.0[2],
        }
    }
}

/// What one order knows of a history h: c(h •) and the number of words after it with count 1,
/// 2 and ≥ 3.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct NgramContext {
    total: u64,
    n: [u64; 3],
}

impl NgramContext {
    fn add(&mut self, count: u32) {
        self.total += count as u64;
        self.n[(count.min(3) - 1) as usize] += 1;
    }

    fn gamma(&self, d: &Discounts) -> f64 {
        (d.0[0] * self.n[0] as f64 + d.0[1] * self.n[1] as f64 + d.0[2] * self.n[2] as f64)
            / self.total as f64
    }
}

/// An interpolated modified Kneser–Ney trigram model.
#[derive(Debug, Clone)]
pub struct KneserNey {
    vocab: usize,
    /// c(u v w), keyed by [`key3`].
    trigrams: FxHashMap<u64, u32>,
    /// Per (u, v): c(u v •) and N1/N2/N3+(u v •).
    trigram_histories: FxHashMap<u64, NgramContext>,
    /// N1+(• v w), keyed by [`key2`].
    bigrams: FxHashMap<u64, u32>,
    /// Per v: Σ_w N1+(• v w) and N1/N2/N3+ of those counts.
    bigram_histories: Vec<NgramContext>,
    /// N1+(• w) per w.
    unigrams: Vec<u32>,
    unigram_history: NgramContext,
    /// D for orders 1, 2, 3.
    pub discounts: [Discounts; 3],
    /// How each order's were estimated.
    pub discount_kinds: [DiscountKind; 3],
}

const BITS: u32 = 21;

fn key2(v: u32, w: u32) -> u64 {
    ((v as u64) << BITS) | w as u64
}

fn key3(u: u32, v: u32, w: u32) -> u64 {
    ((u as u64) << (2 * BITS)) | key2(v, w)
}

fn count_of_counts<'a>(counts: impl Iterator<Item = &'a u32>) -> [u64; 4] {
    let mut n = [0u64; 4];
    for &c in counts {
        if (1..=4).contains(&c) {
            n[c as usize - 1] += 1;
        }
    }
    n
}

fn check_ids(ids: &[u32], vocab: usize) -> Result<(), NgramError> {
    match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(&id) => Err(NgramError::OutOfVocabulary { id, vocab }),
        None => Ok(()),
    }
}

impl KneserNey {
    /// Trains on `train`, one stream of ids below `vocab`.
    pub fn train(train: &[u32], vocab: usize) -> Result<Self, NgramError> {
        if vocab == 0 || vocab > 1 << BITS {
            return Err(NgramError::VocabularySize(vocab));
        }
        check_ids(train, vocab)?;
        if train.len() < 3 {
            return Err(NgramError::NoTrigrams {
                tokens: train.len(),
            });
        }
        let mut trigrams: FxHashMap<u64, u32> = FxHashMap::default();
        for t in train.windows(3) {
            *trigrams.entry(key3(t[0], t[1], t[2])).or_default() += 1;
        }
        let mask = (1u64 << (2 * BITS)) - 1;
        let mut trigram_histories: FxHashMap<u64, NgramContext> = FxHashMap::default();
        let mut bigrams: FxHashMap<u64, u32> = FxHashMap::default();
        for (&k, &c) in &trigrams {
            trigram_histories.entry(k >> BITS).or_default().add(c);
            // One more distinct left context u for the bigram v w.
            *bigrams.entry(k & mask).or_default() += 1;
        }
        let mut bigram_histories = vec![NgramContext::default(); vocab];
        let mut unigrams = vec![0u32; vocab];
        for (&k, &c) in &bigrams {
            bigram_histories[(k >> BITS) as usize].add(c);
            unigrams[(k & ((1 << BITS) - 1)) as usize] += 1;
        }
        let mut unigram_history = NgramContext::default();
        for &c in unigrams.iter().filter(|&&c| c > 0) {
            unigram_history.add(c);
        }
        let estimated = [
            Discounts::estimate(count_of_counts(unigrams.iter()), 1),
            Discounts::estimate(count_of_counts(bigrams.values()), 2),
            Discounts::estimate(count_of_counts(trigrams.values()), 3),
        ];
        let discounts = estimated.map(|e| e.0);
        let discount_kinds = estimated.map(|e| e.1);
        Ok(Self {
            vocab,
            trigrams,
            trigram_histories,
            bigrams,
            bigram_histories,
            unigrams,
            unigram_history,
            discounts,
            discount_kinds,
        })
    }

    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The same counts with one discount `d` for every count and order: plain interpolated
    /// Kneser–Ney (Kneser & Ney 1995; d = 0.75 is the usual choice), the model methods.md quotes
    /// PTB's per-group references for.
    pub fn with_single_discount(mut self, d: f64) -> Self {
        self.discounts = [Discounts([d; 3]); 3];
        self.discount_kinds = [DiscountKind::Given; 3];
        self
    }

    /// P₁(w): continuation counts, interpolated with the uniform 1/N.
    pub fn p1(&self, w: u32) -> f64 {
        let h = &self.unigram_history;
        let d = &self.discounts[0];
        let c = self.unigrams[w as usize];
        (c as f64 - d.of(c)).max(0.0) / h.total as f64 + h.gamma(d) / self.vocab as f64
    }

    /// P₂(w | v).
    pub fn p2(&self, v: u32, w: u32) -> f64 {
        let lower = self.p1(w);
        let h = &self.bigram_histories[v as usize];
        if h.total == 0 {
            return lower;
        }
        let d = &self.discounts[1];
        let c = self.bigrams.get(&key2(v, w)).copied().unwrap_or(0);
        (c as f64 - d.of(c)).max(0.0) / h.total as f64 + h.gamma(d) * lower
    }

    /// P₃(w | u v).
    pub fn p3(&self, u: u32, v: u32, w: u32) -> f64 {
        let lower = self.p2(v, w);
        let Some(h) = self.trigram_histories.get(&key2(u, v)) else {
            return lower;
        };
        let d = &self.discounts[2];
        let c = self.trigrams.get(&key3(u, v, w)).copied().unwrap_or(0);
        (c as f64 - d.of(c)).max(0.0) / h.total as f64 + h.gamma(d) * lower
    }

    /// −ln P of every target of `split` (positions 1 ..): the first by the bigram level, the
    /// rest by the trigram.
    pub fn nll(&self, split: &[u32]) -> Result<Vec<f64>, NgramError> {
        check_ids(split, self.vocab)?;
        Ok((1..split.len())
            .map(|t| {
                let p = if t == 1 {
                    self.p2(split[0], split[1])
                } else {
                    self.p3(split[t - 2], split[t - 1], split[t])
                };
                -p.ln()
            })
            .collect())
    }
}

/// The unigram model: train count / train tokens (0 for a type the training text lacks, whose
/// PPL is then infinite). −ln P of every target of `split` (positions 1 .., as [`KneserNey::nll`]).
pub fn unigram_nll(train: &[u32], split: &[u32], vocab: usize) -> Result<Vec<f64>, NgramError> {
    check_ids(train, vocab)?;
    check_ids(split, vocab)?;
    let mut counts = vec![0u64; vocab];
    for &w in train {
        counts[w as usize] += 1;
    }
    let total = train.len() as f64;
    Ok(split
        .iter()
        .skip(1)
        .map(|&w| -(counts[w as usize] as f64 / total).ln())
        .collect())
}

/// Perplexity per group of the target and in total: `group[t]` is the group (0, 1, 2) of target
/// t's token. NaN for a group without targets.
pub fn group_ppl(nll: &[f64], groups: impl Iterator<Item = usize>) -> ([f64; 3], f64) {
    let mut sum = [0.0f64; 3];
    let mut n = [0usize; 3];
    for (x, g) in nll.iter().zip(groups) {
        if g < 3 {
            sum[g] += x;
            n[g] += 1;
        }
    }
    let ppl = |s: f64, n: usize| {
        if n == 0 {
            f64::NAN
        } else {
            (s / n as f64).exp()
        }
    };
    let total = ppl(sum.iter().sum(), n.iter().sum());
    ([0, 1, 2].map(|g| ppl(sum[g], n[g])), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pseudo-random stream with a skewed (Zipf-like) distribution, so every count 1–4 occurs
    /// at every order.
    fn stream(n: usize, vocab: u32, seed: u64) -> Vec<u32> {
        let mut s = seed;
        let mut prev = 0u32;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (s >> 33) as f64 / (1u64 << 31) as f64;
                // Zipf-ish by inverse transform, mixed with the previous word for some context.
                let w = ((vocab as f64).powf(r * r * r) as u32).min(vocab - 1);
                prev = if r < 0.2 { (prev + 1) % vocab } else { w };
                prev
            })
            .collect()
    }

    /// Every conditional distribution sums to one over the vocabulary — for seen and unseen
    /// histories, at every order: the interpolation weights are right.
    #[test]
    fn every_distribution_sums_to_one() {
        let vocab = 400;
        let train = stream(20_000, vocab, 3);
        let m = KneserNey::train(&train, vocab as usize).expect("model");
        let sum1: f64 = (0..vocab).map(|w| m.p1(w)).sum();
        assert!((sum1 - 1.0).abs() < 1e-12, "P1 sums to {sum1}");
        for v in [0, 1, 7, 399] {
            let s: f64 = (0..vocab).map(|w| m.p2(v, w)).sum();
            assert!((s - 1.0).abs() < 1e-12, "P2(·|{v}) sums to {s}");
        }
        for (u, v) in [(train[10], train[11]), (0, 399), (399, 399), (5, 2)] {
            let s: f64 = (0..vocab).map(|w| m.p3(u, v, w)).sum();
            assert!((s - 1.0).abs() < 1e-12, "P3(·|{u},{v}) sums to {s}");
        }
    }

    /// The model against a second implementation written from the formulas with plain nested
    /// loops over the training text (no hash maps, no precomputed histories).
    #[test]
    fn matches_a_from_scratch_computation() {
        let vocab = 80u32;
        let train = stream(4_000, vocab, 11);
        let m = KneserNey::train(&train, vocab as usize).expect("model");
        let n = vocab as usize;
        let mut c3 = vec![0u32; n * n * n];
        for t in train.windows(3) {
            c3[(t[0] as usize * n + t[1] as usize) * n + t[2] as usize] += 1;
        }
        // Continuation counts from the trigram table by definition.
        let n2 =
            |v: usize, w: usize| (0..n).filter(|&u| c3[(u * n + v) * n + w] > 0).count() as u32;
        let n1 = |w: usize| (0..n).filter(|&v| n2(v, w) > 0).count() as u32;
        let coc = |counts: &[u32]| {
            let mut k = [0u64; 4];
            for &c in counts {
                if (1..=4).contains(&c) {
                    k[c as usize - 1] += 1;
                }
            }
            k
        };
        let all2: Vec<u32> = (0..n * n).map(|k| n2(k / n, k % n)).collect();
        let all1: Vec<u32> = (0..n).map(n1).collect();
        let d3 = Discounts::from_count_of_counts(coc(&c3), 3).unwrap();
        let d2 = Discounts::from_count_of_counts(coc(&all2), 2).unwrap();
        let d1 = Discounts::from_count_of_counts(coc(&all1), 1).unwrap();
        assert_eq!(m.discounts, [d1, d2, d3]);
        assert_eq!(m.discount_kinds, [DiscountKind::Modified; 3]);
        let level = |counts: &[u32], d: &Discounts, w: usize, lower: f64| {
            let total: u32 = counts.iter().sum();
            if total == 0 {
                return lower;
            }
            let gamma: f64 = counts.iter().map(|&c| d.of(c)).sum::<f64>() / total as f64;
            (counts[w] as f64 - d.of(counts[w])).max(0.0) / total as f64 + gamma * lower
        };
        for (u, v, w) in [
            (0, 1, 2),
            (3, 3, 3),
            (11, 0, 5),
            (train[7], train[8], train[9]),
        ] {
            let (u, v, w) = (u as usize, v as usize, w as usize);
            let p1 = level(&all1, &d1, w, 1.0 / n as f64);
            let p2 = level(&all2[v * n..(v + 1) * n], &d2, w, p1);
            let p3 = level(&c3[(u * n + v) * n..(u * n + v + 1) * n], &d3, w, p2);
            assert!((m.p1(w as u32) - p1).abs() < 1e-14);
            assert!((m.p2(v as u32, w as u32) - p2).abs() < 1e-14);
            assert!(
                (m.p3(u as u32, v as u32, w as u32) - p3).abs() < 1e-14,
                "{u} {v} {w}: {} vs {p3}",
                m.p3(u as u32, v as u32, w as u32)
            );
        }
    }

    /// The discounts by hand: n = (10, 4, 2, 1): Y = 10/18, D1 = 1 − 2·Y·4/10 = 0.5556,
    /// D2 = 2 − 3·Y·2/4 = 1.1667, D3+ = 3 − 4·Y·1/2 = 1.8889.
    #[test]
    fn discounts_by_hand_and_a_text_too_small() {
        let d = Discounts::from_count_of_counts([10, 4, 2, 1], 2).unwrap();
        let y = 10.0 / 18.0;
        let want = [
            1.0 - 2.0 * y * 0.4,
            2.0 - 3.0 * y * 0.5,
            3.0 - 4.0 * y * 0.5,
        ];
        for (a, b) in d.0.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{d:?}");
        }
        assert_eq!(
            Discounts::from_count_of_counts([3, 1, 0, 1], 3),
            Err(NgramError::TooSmall { order: 3, count: 3 })
        );
        // Orders without every count fall back to one discount: Y where n1 and n2 are there,
        // else 0.75; the distributions still sum to one.
        assert_eq!(
            Discounts::estimate([3, 1, 0, 1], 3),
            (Discounts([0.6; 3]), DiscountKind::Single)
        );
        assert_eq!(
            Discounts::estimate([0, 4, 2, 1], 1),
            (Discounts([0.75; 3]), DiscountKind::Fixed)
        );
        // n = (10, 2, 8, 1): D2 = 2 − 3·(10/14)·8/2 < 0 → one discount Y = 10/14.
        let (d, kind) = Discounts::estimate([10, 2, 8, 1], 2);
        assert_eq!(kind, DiscountKind::Single);
        assert!((d.0[1] - 10.0 / 14.0).abs() < 1e-12);
        let m = KneserNey::train(&[0, 1, 2, 0, 1, 2, 1], 3).unwrap();
        assert_ne!(m.discount_kinds, [DiscountKind::Modified; 3]);
        let s: f64 = (0..3).map(|w| m.p3(0, 1, w)).sum();
        assert!((s - 1.0).abs() < 1e-12, "{s}");
        // Fewer than three tokens hold no trigram.
        assert_eq!(
            KneserNey::train(&[0, 1], 3).unwrap_err(),
            NgramError::NoTrigrams { tokens: 2 }
        );
        assert_eq!(
            KneserNey::train(&[0, 5], 3).unwrap_err(),
            NgramError::OutOfVocabulary { id: 5, vocab: 3 }
        );
    }

    #[test]
    fn unigram_and_group_perplexities_by_hand() {
        // Train: a a a b (a: 3/4, b: 1/4). Targets of "b a c": a, c (c unseen → infinite).
        let nll = unigram_nll(&[0, 0, 0, 1], &[1, 0, 2], 3).unwrap();
        assert!((nll[0] - -(0.75f64).ln()).abs() < 1e-15);
        assert!(nll[1].is_infinite());
        // Groups: targets in groups 0, 0, 2 with NLL ln 2, ln 8, ln 4.
        let (g, total) = group_ppl(
            &[2f64.ln(), 8f64.ln(), 4f64.ln()],
            [0usize, 0, 2].into_iter(),
        );
        assert!((g[0] - 4.0).abs() < 1e-12 && (g[2] - 4.0).abs() < 1e-12);
        assert!(g[1].is_nan(), "no medium targets");
        assert!((total - 4.0).abs() < 1e-12);
    }

    /// A held-out text from the same source: KN-3 beats the unigram model, and both PPLs lie
    /// between 1 and the vocabulary size.
    #[test]
    fn kneser_ney_beats_the_unigram_model_on_held_out_text() {
        let vocab = 400u32;
        let text = stream(60_000, vocab, 5);
        let (train, held) = text.split_at(50_000);
        let m = KneserNey::train(train, vocab as usize).unwrap();
        let kn = m.nll(held).unwrap();
        let uni = unigram_nll(train, held, vocab as usize).unwrap();
        assert_eq!(kn.len(), held.len() - 1);
        let ppl = |x: &[f64]| (x.iter().sum::<f64>() / x.len() as f64).exp();
        let (k, u) = (ppl(&kn), ppl(&uni));
        assert!(1.0 < k && k < u && u < vocab as f64, "KN {k} unigram {u}");
    }
}
