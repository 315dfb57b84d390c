//! Corpus chrF (Popović 2015) exactly as sacreBLEU 2.4.3 computes it with its defaults — chrF2:
//! character n-grams of order 1…6, no word n-grams, β = 2, whitespace removed before counting.
//!
//! Each sentence is optionally lower-cased and its whitespace deleted. For each order n, a
//! sentence contributes, against the reference whose sentence-level chrF is highest (the first one
//! on a tie):
//!
//! ```text
//! H_n = |n-grams(hyp)|  (0 when the reference has no n-gram of order n)
//! R_n = |n-grams(ref)|,   M_n = Σ_g min(count_hyp(g), count_ref(g))
//! ```
//!
//! summed over the corpus. With P_n = M_n / H_n and R'_n = M_n / R_n:
//!
//! ```text
//! default ("eff:yes"):  over the k orders with H_n > 0 and R_n > 0,
//!                       P = ΣP_n / k,  R = ΣR'_n / k,  chrF = 100 · (1 + β²)·P·R / (β²·P + R)  (0 if P + R = 0)
//! eps smoothing ("eff:no", chrF++.py, Moses, NLTK):
//!                       P_n = ε if H_n = 0,  R'_n = ε if R_n = 0  (ε = 10⁻¹⁶),
//!                       F_n = (1 + β²)·P_n·R'_n / (β²·P_n + R'_n)  (ε if the denominator is 0),
//!                       chrF = 100 · Σ_n F_n / 6
//! ```

use rustc_hash::FxHashMap;

use crate::bleu::{CorpusError, SACREBLEU_VERSION, check_corpus, python_split};

/// The highest character n-gram order (sacreBLEU's `CHAR_ORDER`).
pub const CHAR_ORDER: usize = 6;

/// β: recall weighs β² = 4 times as much as precision (sacreBLEU's `BETA`).
pub const BETA: u32 = 2;

/// sacreBLEU's ε of eps smoothing.
const EPSILON: f64 = 1e-16;

/// The settings of a chrF score; the default is sacreBLEU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChrfOptions {
    /// Lower-case hypotheses and references first (Python's `str.lower()`).
    pub lowercase: bool,
    /// ε smoothing per order (chrF++.py's) instead of the average over the effective orders.
    pub eps_smoothing: bool,
}

impl ChrfOptions {
    /// sacreBLEU's signature of chrF with these settings against `reference_sets` references
    /// per sentence, e.g. `nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.3`.
    pub fn signature(&self, reference_sets: usize) -> String {
        let case = if self.lowercase { "lc" } else { "mixed" };
        let effective_order = if self.eps_smoothing { "no" } else { "yes" };
        format!(
            "nrefs:{reference_sets}|case:{case}|eff:{effective_order}|nc:{CHAR_ORDER}|nw:0|space:no|version:{SACREBLEU_VERSION}"
        )
    }
}

/// The counts of one n-gram order, summed over sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CharNgramCounts {
    /// H_n: the hypotheses' n-grams (of sentences whose reference has n-grams of this order).
    pub hypothesis: usize,
    /// R_n: the references' n-grams.
    pub reference: usize,
    /// M_n: the clipped matches.
    pub matching: usize,
}

impl CharNgramCounts {
    fn add(&mut self, other: CharNgramCounts) {
        self.hypothesis += other.hypothesis;
        self.reference += other.reference;
        self.matching += other.matching;
    }
}

/// A corpus chrF score with the statistics behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChrfScore {
    /// chrF2, 0 to 100.
    pub score: f64,
    /// The counts of orders 1…6.
    pub counts: [CharNgramCounts; CHAR_ORDER],
    /// How many references each sentence had.
    pub reference_sets: usize,
    pub options: ChrfOptions,
}

impl ChrfScore {
    /// sacreBLEU's name of the metric: `chrF2`.
    pub fn name(&self) -> String {
        format!("chrF{BETA}")
    }

    /// sacreBLEU's signature of this score (`CHRF.get_signature()`).
    pub fn signature(&self) -> String {
        self.options.signature(self.reference_sets)
    }
}

/// Corpus chrF of `hypotheses` against `references`, laid out as sacreBLEU's `corpus_score`
/// takes them: one list per reference set, each with one line per hypothesis.
pub fn corpus_chrf<H, R, S>(
    hypotheses: &[H],
    references: &[R],
    options: &ChrfOptions,
) -> Result<ChrfScore, CorpusError>
where
    H: AsRef<str>,
    R: AsRef<[S]>,
    S: AsRef<str>,
{
    check_corpus(hypotheses, references)?;
    let mut counts = [CharNgramCounts::default(); CHAR_ORDER];
    for (line, hypothesis) in hypotheses.iter().enumerate() {
        let hypothesis_chars = without_whitespace(hypothesis.as_ref(), options);
        let hypothesis_ngrams = char_ngram_counts(&hypothesis_chars);
        let mut best: Option<(f64, [CharNgramCounts; CHAR_ORDER])> = None;
        for set in references {
            // `check_corpus` made every set as long as `hypotheses`.
            let reference_chars = without_whitespace(set.as_ref()[line].as_ref(), options);
            let reference_ngrams = char_ngram_counts(&reference_chars);
            let mut sentence = [CharNgramCounts::default(); CHAR_ORDER];
            for (order, counts) in sentence.iter_mut().enumerate() {
                *counts = match_counts(&hypothesis_ngrams[order], &reference_ngrams[order]);
            }
            let sentence_score = f_score(&sentence, options.eps_smoothing);
            if best.is_none_or(|(best_score, _)| sentence_score > best_score) {
                best = Some((sentence_score, sentence));
            }
        }
        if let Some((_, sentence)) = best {
            for (total, counts) in counts.iter_mut().zip(sentence) {
                total.add(counts);
            }
        }
    }
    Ok(ChrfScore {
        score: f_score(&counts, options.eps_smoothing),
        counts,
        reference_sets: references.len(),
        options: *options,
    })
}

/// The sentence, lower-cased if asked, with its whitespace deleted (Python's `''.join(s.split())`).
fn without_whitespace(sentence: &str, options: &ChrfOptions) -> String {
    if options.lowercase {
        python_split(&sentence.to_lowercase()).collect()
    } else {
        python_split(sentence).collect()
    }
}

/// The character n-grams of `text` of each order 1…6, with their counts.
fn char_ngram_counts(text: &str) -> [FxHashMap<&str, usize>; CHAR_ORDER] {
    let boundaries: Vec<usize> = text
        .char_indices()
        .map(|(index, _)| index)
        .chain([text.len()])
        .collect();
    let mut counts: [FxHashMap<&str, usize>; CHAR_ORDER] = Default::default();
    for (order, order_counts) in counts.iter_mut().enumerate() {
        for window in boundaries.windows(order + 2) {
            *order_counts
                .entry(&text[window[0]..window[order + 1]])
                .or_insert(0) += 1;
        }
    }
    counts
}

/// sacreBLEU's `_get_match_statistics` for one order.
fn match_counts(
    hypothesis: &FxHashMap<&str, usize>,
    reference: &FxHashMap<&str, usize>,
) -> CharNgramCounts {
    let mut hypothesis_total = 0;
    let mut matching = 0;
    for (ngram, &count) in hypothesis {
        hypothesis_total += count;
        if let Some(&in_reference) = reference.get(ngram) {
            matching += count.min(in_reference);
        }
    }
    CharNgramCounts {
        // sacreBLEU: "Don't count hits if no reference exists for that n-gram".
        hypothesis: if reference.is_empty() {
            0
        } else {
            hypothesis_total
        },
        reference: reference.values().sum(),
        matching,
    }
}

/// sacreBLEU's `CHRF._compute_f_score` with `word_order = 0`, in its order of operations.
fn f_score(counts: &[CharNgramCounts; CHAR_ORDER], eps_smoothing: bool) -> f64 {
    let factor = f64::from(BETA * BETA);
    let mut eps_score = 0.0;
    let mut effective_orders = 0;
    let (mut precision_sum, mut recall_sum) = (0.0, 0.0);
    for order in counts {
        let precision = if order.hypothesis > 0 {
            order.matching as f64 / order.hypothesis as f64
        } else {
            EPSILON
        };
        let recall = if order.reference > 0 {
            order.matching as f64 / order.reference as f64
        } else {
            EPSILON
        };
        let denominator = factor * precision + recall;
        eps_score += if denominator > 0.0 {
            (1.0 + factor) * precision * recall / denominator
        } else {
            EPSILON
        };
        if order.hypothesis > 0 && order.reference > 0 {
            precision_sum += precision;
            recall_sum += recall;
            effective_orders += 1;
        }
    }
    if eps_smoothing {
        return 100.0 * eps_score / CHAR_ORDER as f64;
    }
    let (precision, recall) = if effective_orders == 0 {
        (0.0, 0.0)
    } else {
        (
            precision_sum / effective_orders as f64,
            recall_sum / effective_orders as f64,
        )
    };
    if precision + recall != 0.0 {
        let score = (1.0 + factor) * precision * recall / (factor * precision + recall);
        100.0 * score
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chrf(hypotheses: &[&str], references: &[Vec<&str>], options: ChrfOptions) -> ChrfScore {
        corpus_chrf(hypotheses, references, &options).expect("valid corpus")
    }

    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() < 1e-9
    }

    #[test]
    fn chrf_of_a_perfect_match_is_100_and_ignores_whitespace() {
        let score = chrf(
            &["ein mann mit hut .", "a b c"],
            &[vec!["ein mann mit hut .", "abc"]],
            ChrfOptions::default(),
        );
        assert!(close(score.score, 100.0), "{score:?}");
        assert_eq!(score.name(), "chrF2");
        // "einmannmithut." has 14 characters, "abc" 3: 17 unigrams, …, 9 + 0 six-grams.
        assert_eq!(
            score.counts[0],
            CharNgramCounts {
                hypothesis: 17,
                reference: 17,
                matching: 17
            }
        );
        assert_eq!(score.counts[5].matching, 9);
    }

    #[test]
    fn chrf_averages_precision_and_recall_over_the_effective_orders() {
        // hyp "ab", ref "abc": order 1: P = 2/2, R = 2/3; order 2: P = 1/1, R = 1/2;
        // order 3: no hypothesis 3-gram; orders 4–6: neither side has one. k = 2:
        // P = 1, R = (2/3 + 1/2)/2 = 7/12, chrF = 100 · 5 · 7/12 / (4 + 7/12) = 100 · 7/11.
        let score = chrf(&["ab"], &[vec!["abc"]], ChrfOptions::default());
        assert!(close(score.score, 700.0 / 11.0), "{}", score.score);
        assert_eq!(
            score.counts[2],
            CharNgramCounts {
                hypothesis: 0,
                reference: 1,
                matching: 0
            }
        );
    }

    #[test]
    fn chrf_eps_smoothing_averages_the_f_scores_of_all_six_orders() {
        // Same pair: F_1 = 5·(2/3)/(4 + 2/3) = 5/7, F_2 = 5·(1/2)/(4 + 1/2) = 5/9; order 3 has
        // P = ε, R = 0: F_3 = 0; orders 4–6 have P = R = ε: F = ε each.
        // chrF = 100 · (5/7 + 5/9 + 3ε) / 6 = 100 · 80/63 / 6 = 21.164…
        let options = ChrfOptions {
            eps_smoothing: true,
            ..ChrfOptions::default()
        };
        let score = chrf(&["ab"], &[vec!["abc"]], options);
        assert!(
            close(score.score, 100.0 * 80.0 / 63.0 / 6.0),
            "{}",
            score.score
        );
        assert_eq!(
            score.signature(),
            "nrefs:1|case:mixed|eff:no|nc:6|nw:0|space:no|version:2.4.3"
        );
    }

    #[test]
    fn chrf_counts_no_hypothesis_ngram_of_an_order_its_reference_lacks() {
        // Line 1: hyp "abc", ref "a" — the reference has no 2- or 3-gram, so the hypothesis's
        // "ab", "bc", "abc" are not counted. Line 2: hyp = ref = "xy".
        // Order 1: H = 3 + 2, R = 1 + 2, M = 1 + 2 → P = 3/5, R = 1; order 2: H = R = M = 1.
        // P = (3/5 + 1)/2 = 4/5, R = 1: chrF = 100 · 5 · 4/5 / (16/5 + 1) = 100 · 20/21.
        // (Counting them would give order 2 P = 1/3 and chrF ≈ 81.4.)
        let score = chrf(&["abc", "xy"], &[vec!["a", "xy"]], ChrfOptions::default());
        assert_eq!(
            score.counts[1],
            CharNgramCounts {
                hypothesis: 1,
                reference: 1,
                matching: 1
            }
        );
        assert!(close(score.score, 2000.0 / 21.0), "{}", score.score);
    }

    #[test]
    fn chrf_takes_the_best_reference_per_sentence() {
        let score = chrf(
            &["abc", "def"],
            &[vec!["xyz", "def"], vec!["abc", "uvw"]],
            ChrfOptions::default(),
        );
        assert!(close(score.score, 100.0), "{}", score.score);
        assert_eq!(
            score.signature(),
            "nrefs:2|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.3"
        );
    }

    #[test]
    fn chrf_of_an_empty_hypothesis_or_no_match_is_zero() {
        assert_eq!(
            chrf(&[""], &[vec!["abc"]], ChrfOptions::default()).score,
            0.0
        );
        assert_eq!(
            chrf(&["xyz"], &[vec!["abc"]], ChrfOptions::default()).score,
            0.0
        );
    }

    #[test]
    fn chrf_lowercase_option_and_signature() {
        let options = ChrfOptions {
            lowercase: true,
            ..ChrfOptions::default()
        };
        let score = chrf(&["Ein Hund"], &[vec!["ein hund"]], options);
        assert!(close(score.score, 100.0));
        assert_eq!(
            score.signature(),
            "nrefs:1|case:lc|eff:yes|nc:6|nw:0|space:no|version:2.4.3"
        );
        assert!(chrf(&["Ein Hund"], &[vec!["ein hund"]], ChrfOptions::default()).score < 100.0);
        assert_eq!(
            ChrfOptions::default().signature(1),
            "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.4.3"
        );
    }

    #[test]
    fn chrf_rejects_a_reference_set_of_another_length() {
        let error = corpus_chrf(&["a", "b"], &[vec!["a"]], &ChrfOptions::default())
            .expect_err("1 reference for 2 hypotheses");
        let message = error.to_string();
        assert!(
            message.contains("2 hypotheses") && message.contains("1 references"),
            "{message}"
        );
    }
}
