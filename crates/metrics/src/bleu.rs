//! Corpus BLEU (Papineni et al. 2002) exactly as sacreBLEU 2.4.3 computes it with its defaults
//! (`BLEU(tokenize=…, lowercase=…)`: smoothing "exp", `force=False`, `effective_order=False`).
//!
//! Each sentence is optionally lower-cased, stripped of trailing whitespace and tokenised (`none`:
//! as it is; `13a`: [`tokenize_13a`]), then split on whitespace. Over the corpus, for n = 1…4:
//!
//! ```text
//! m_n = Σ_sentences Σ_{g ∈ n-grams(hyp)} min(count_hyp(g), max_refs count_ref(g))   (clipped matches)
//! t_n = Σ_sentences (number of n-grams of hyp)
//! c   = Σ_sentences |hyp|,   r = Σ_sentences |ref closest in length to hyp (the shorter on a tie)|
//! p_n = 100 · m_n / t_n                  when m_n > 0
//!     = 100 / (2^k · t_n)                when m_n = 0, the k-th such order so far ("exp" smoothing)
//!     = 0                                from the first order with t_n = 0 on
//! BP  = 1 if c ≥ r;  exp(1 − r/c) if 0 < c < r;  0 if c = 0
//! BLEU = BP · exp(¼ Σ_n log p_n),  with log 0 taken as −9 999 999 999 (so BLEU = 0);
//! BLEU = 0 outright when every m_n is 0.
//! ```
//!
//! The result carries sacreBLEU's signature string ([`BleuScore::signature`]), so a score can be
//! quoted next to one sacreBLEU printed.

use rustc_hash::FxHashMap;

/// The sacreBLEU release whose numbers and signature strings this module reproduces.
pub const SACREBLEU_VERSION: &str = "2.4.3";

/// The highest n-gram order of BLEU.
pub const MAX_NGRAM_ORDER: usize = 4;

/// Why a corpus cannot be scored (BLEU or chrF).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorpusError {
    #[error("no reference set: at least one list of references is needed")]
    NoReferences,
    #[error("no hypothesis: the corpus to score is empty")]
    NoHypotheses,
    #[error(
        "{hypotheses} hypotheses but {references} references in reference set {set} (sets count from 1): each set needs one reference per hypothesis"
    )]
    LengthMismatch {
        hypotheses: usize,
        references: usize,
        set: usize,
    },
}

/// Checks sacreBLEU's layout: one or more reference sets, each with one line per hypothesis.
pub(crate) fn check_corpus<H, R, S>(hypotheses: &[H], references: &[R]) -> Result<(), CorpusError>
where
    R: AsRef<[S]>,
{
    if hypotheses.is_empty() {
        return Err(CorpusError::NoHypotheses);
    }
    if references.is_empty() {
        return Err(CorpusError::NoReferences);
    }
    for (index, set) in references.iter().enumerate() {
        let lines = set.as_ref().len();
        if lines != hypotheses.len() {
            return Err(CorpusError::LengthMismatch {
                hypotheses: hypotheses.len(),
                references: lines,
                set: index + 1,
            });
        }
    }
    Ok(())
}

/// Python's `str.isspace()`: Unicode White_Space plus the four ASCII separators U+001C…U+001F,
/// which `str.split()` also splits on.
pub(crate) fn is_python_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `line.split()`: the runs of non-whitespace.
pub(crate) fn python_split(line: &str) -> impl Iterator<Item = &str> {
    line.split(is_python_whitespace)
        .filter(|token| !token.is_empty())
}

/// The tokeniser applied before n-grams are counted (sacreBLEU's `tokenize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BleuTokenize {
    /// `none`: the text is split on whitespace as it is (for text tokenised already).
    None,
    /// `13a`: mteval-v13a's tokeniser, sacreBLEU's default ([`tokenize_13a`]).
    #[default]
    Mteval13a,
}

impl BleuTokenize {
    /// sacreBLEU's name of the tokeniser, as in its signature.
    pub fn name(self) -> &'static str {
        match self {
            BleuTokenize::None => "none",
            BleuTokenize::Mteval13a => "13a",
        }
    }
}

/// The settings of a BLEU score; the default is sacreBLEU's (`13a`, case kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BleuOptions {
    pub tokenize: BleuTokenize,
    /// Lower-case hypotheses and references first (Python's `str.lower()`).
    pub lowercase: bool,
}

impl BleuOptions {
    /// sacreBLEU's signature of BLEU with these settings against `reference_sets` references
    /// per sentence, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3`.
    pub fn signature(&self, reference_sets: usize) -> String {
        let case = if self.lowercase { "lc" } else { "mixed" };
        format!(
            "nrefs:{reference_sets}|case:{case}|eff:no|tok:{}|smooth:exp|version:{SACREBLEU_VERSION}",
            self.tokenize.name()
        )
    }

    /// A sentence as sacreBLEU's `BLEU._preprocess_segment` hands it to n-gram counting.
    fn preprocess(&self, sentence: &str) -> String {
        let cased;
        let sentence = if self.lowercase {
            cased = sentence.to_lowercase();
            cased.as_str()
        } else {
            sentence
        };
        let trimmed = sentence.trim_end_matches(is_python_whitespace);
        match self.tokenize {
            BleuTokenize::None => trimmed.to_owned(),
            BleuTokenize::Mteval13a => tokenize_13a(trimmed),
        }
    }
}

/// A corpus BLEU score with the statistics behind it (sacreBLEU's `BLEUScore`).
#[derive(Debug, Clone, PartialEq)]
pub struct BleuScore {
    /// BLEU, 0 to 100.
    pub score: f64,
    /// p_1…p_4 in percent, after smoothing (sacreBLEU's `precisions`).
    pub precisions: [f64; MAX_NGRAM_ORDER],
    /// BP (sacreBLEU's `bp`).
    pub brevity_penalty: f64,
    /// c / r, 0 when r = 0 (sacreBLEU's `ratio`).
    pub length_ratio: f64,
    /// c: the hypotheses' tokens (sacreBLEU's `sys_len`).
    pub hypothesis_length: usize,
    /// r: the closest references' tokens (sacreBLEU's `ref_len`).
    pub reference_length: usize,
    /// m_1…m_4: clipped matching n-grams (sacreBLEU's `counts`).
    pub matching_ngrams: [usize; MAX_NGRAM_ORDER],
    /// t_1…t_4: the hypotheses' n-grams (sacreBLEU's `totals`).
    pub hypothesis_ngrams: [usize; MAX_NGRAM_ORDER],
    /// How many references each sentence had.
    pub reference_sets: usize,
    pub options: BleuOptions,
}

impl BleuScore {
    /// sacreBLEU's signature of this score (`BLEU.get_signature()`).
    pub fn signature(&self) -> String {
        self.options.signature(self.reference_sets)
    }
}

/// Corpus BLEU of `hypotheses` against `references`, laid out as sacreBLEU's `corpus_score`
/// takes them: one list per reference set, each with one line per hypothesis.
pub fn corpus_bleu<H, R, S>(
    hypotheses: &[H],
    references: &[R],
    options: &BleuOptions,
) -> Result<BleuScore, CorpusError>
where
    H: AsRef<str>,
    R: AsRef<[S]>,
    S: AsRef<str>,
{
    check_corpus(hypotheses, references)?;
    let mut hypothesis_length = 0;
    let mut reference_length = 0;
    let mut matching_ngrams = [0; MAX_NGRAM_ORDER];
    let mut hypothesis_ngrams = [0; MAX_NGRAM_ORDER];
    for (line, hypothesis) in hypotheses.iter().enumerate() {
        // `check_corpus` made every set as long as `hypotheses`.
        let reference_lines: Vec<String> = references
            .iter()
            .map(|set| options.preprocess(set.as_ref()[line].as_ref()))
            .collect();
        let reference_tokens: Vec<Vec<&str>> = reference_lines
            .iter()
            .map(|reference| python_split(reference).collect())
            .collect();
        let mut reference_counts: FxHashMap<&[&str], usize> = FxHashMap::default();
        for tokens in &reference_tokens {
            for (ngram, count) in ngram_counts(tokens) {
                let best = reference_counts.entry(ngram).or_insert(0);
                *best = (*best).max(count);
            }
        }
        let hypothesis_line = options.preprocess(hypothesis.as_ref());
        let hypothesis_tokens: Vec<&str> = python_split(&hypothesis_line).collect();
        hypothesis_length += hypothesis_tokens.len();
        reference_length += closest_reference_length(
            hypothesis_tokens.len(),
            reference_tokens.iter().map(Vec::len),
        );
        for (ngram, count) in ngram_counts(&hypothesis_tokens) {
            let order = ngram.len() - 1;
            hypothesis_ngrams[order] += count;
            if let Some(&in_reference) = reference_counts.get(ngram) {
                matching_ngrams[order] += count.min(in_reference);
            }
        }
    }
    Ok(score_from_statistics(
        matching_ngrams,
        hypothesis_ngrams,
        hypothesis_length,
        reference_length,
        references.len(),
        *options,
    ))
}

/// Every n-gram of `tokens`, n = 1…4, with its count.
fn ngram_counts<'a, 'b>(tokens: &'a [&'b str]) -> FxHashMap<&'a [&'b str], usize> {
    let mut counts = FxHashMap::default();
    for order in 1..=MAX_NGRAM_ORDER {
        for ngram in tokens.windows(order) {
            *counts.entry(ngram).or_insert(0) += 1;
        }
    }
    counts
}

/// The reference length closest to the hypothesis length; the shorter one on a tie
/// (sacreBLEU's `_get_closest_ref_len`).
fn closest_reference_length(
    hypothesis_length: usize,
    reference_lengths: impl Iterator<Item = usize>,
) -> usize {
    let mut closest: Option<(usize, usize)> = None; // (distance, length)
    for length in reference_lengths {
        let distance = hypothesis_length.abs_diff(length);
        closest = match closest {
            Some((best_distance, best_length))
                if distance > best_distance
                    || (distance == best_distance && length >= best_length) =>
            {
                Some((best_distance, best_length))
            }
            _ => Some((distance, length)),
        };
    }
    closest.map_or(0, |(_, length)| length)
}

/// sacreBLEU's `BLEU.compute_bleu` with `smooth_method="exp"`, `effective_order=False`.
fn score_from_statistics(
    matching_ngrams: [usize; MAX_NGRAM_ORDER],
    hypothesis_ngrams: [usize; MAX_NGRAM_ORDER],
    hypothesis_length: usize,
    reference_length: usize,
    reference_sets: usize,
    options: BleuOptions,
) -> BleuScore {
    let brevity_penalty = if hypothesis_length >= reference_length {
        1.0
    } else if hypothesis_length > 0 {
        (1.0 - reference_length as f64 / hypothesis_length as f64).exp()
    } else {
        0.0
    };
    let length_ratio = if reference_length > 0 {
        hypothesis_length as f64 / reference_length as f64
    } else {
        0.0
    };
    let mut precisions = [0.0; MAX_NGRAM_ORDER];
    let score = if matching_ngrams.iter().all(|&m| m == 0) {
        0.0
    } else {
        let mut exp_smoothing_divisor = 1.0;
        for order in 0..MAX_NGRAM_ORDER {
            let total = hypothesis_ngrams[order];
            if total == 0 {
                break;
            }
            precisions[order] = if matching_ngrams[order] == 0 {
                exp_smoothing_divisor *= 2.0;
                100.0 / (exp_smoothing_divisor * total as f64)
            } else {
                100.0 * matching_ngrams[order] as f64 / total as f64
            };
        }
        let log_sum: f64 = precisions.iter().map(|&p| floored_log(p)).sum();
        brevity_penalty * (log_sum / MAX_NGRAM_ORDER as f64).exp()
    };
    BleuScore {
        score,
        precisions,
        brevity_penalty,
        length_ratio,
        hypothesis_length,
        reference_length,
        matching_ngrams,
        hypothesis_ngrams,
        reference_sets,
        options,
    }
}

/// sacreBLEU's `my_log`: log, with log 0 = −9 999 999 999.
fn floored_log(value: f64) -> f64 {
    if value == 0.0 {
        -9_999_999_999.0
    } else {
        value.ln()
    }
}

/// sacreBLEU's `Tokenizer13a` (mteval-v13a): drops `<skipped>` and `-\n`, turns `\n` into a
/// space, decodes `&quot; &amp; &lt; &gt;` (in that order), then applies `TokenizerRegexp`'s
/// substitutions on ` line ` and joins the whitespace-split result with single spaces:
///
/// 1. `([\{-\~\[-\` -\&\(-\+\:-\@\/])` → ` \1 `: spaces around `{|}~[\]^_` ``!"#$%&()*+:;<=>?@/`;
/// 2. `([^0-9])([\.,])` → `\1 \2 `: a period or comma after a non-digit;
/// 3. `([\.,])([^0-9])` → ` \1 \2`: a period or comma before a non-digit;
/// 4. `([0-9])(-)` → `\1 \2 `: a dash after a digit.
///
/// Each regex runs as Python's `re.sub` does, left to right over non-overlapping matches: in
/// `a.,5` rule 2 takes `a.`, so the comma (preceded by the period, a non-digit) is not its match.
pub fn tokenize_13a(line: &str) -> String {
    let mut text = line
        .replace("<skipped>", "")
        .replace("-\n", "")
        .replace('\n', " ");
    if text.contains('&') {
        text = text
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }
    let mut spaced: Vec<char> = Vec::with_capacity(text.len() * 2 + 2);
    spaced.push(' ');
    for c in text.chars() {
        if is_13a_symbol(c) {
            spaced.extend([' ', c, ' ']);
        } else {
            spaced.push(c);
        }
    }
    spaced.push(' ');
    let is_period_or_comma = |c: char| c == '.' || c == ',';
    let spaced = substitute_pairs(
        &spaced,
        |first, second| !first.is_ascii_digit() && is_period_or_comma(second),
        |first, second| [first, ' ', second, ' '],
    );
    let spaced = substitute_pairs(
        &spaced,
        |first, second| is_period_or_comma(first) && !second.is_ascii_digit(),
        |first, second| [' ', first, ' ', second],
    );
    let spaced = substitute_pairs(
        &spaced,
        |first, second| first.is_ascii_digit() && second == '-',
        |first, second| [first, ' ', second, ' '],
    );
    let joined: String = spaced.into_iter().collect();
    python_split(&joined).collect::<Vec<_>>().join(" ")
}

/// The class `[\{-\~\[-\` -\&\(-\+\:-\@\/]` of 13a's first regex.
fn is_13a_symbol(c: char) -> bool {
    matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/')
}

/// `re.sub` of a two-character pattern: scanning left to right, each pair that `matches` is
/// replaced and the scan resumes after it; other characters are kept.
fn substitute_pairs(
    text: &[char],
    matches: impl Fn(char, char) -> bool,
    replacement: impl Fn(char, char) -> [char; 4],
) -> Vec<char> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 4);
    let mut position = 0;
    while position < text.len() {
        match (text[position], text.get(position + 1)) {
            (first, Some(&second)) if matches(first, second) => {
                out.extend(replacement(first, second));
                position += 2;
            }
            (first, _) => {
                out.push(first);
                position += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bleu(hypotheses: &[&str], references: &[Vec<&str>], options: BleuOptions) -> BleuScore {
        corpus_bleu(hypotheses, references, &options).expect("valid corpus")
    }

    fn none_tokenizer() -> BleuOptions {
        BleuOptions {
            tokenize: BleuTokenize::None,
            lowercase: false,
        }
    }

    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() < 1e-9
    }

    #[test]
    fn bleu_of_a_perfect_match_is_100() {
        let score = bleu(
            &["the cat sat on the mat .", "a dog runs"],
            &[vec!["the cat sat on the mat .", "a dog runs"]],
            BleuOptions::default(),
        );
        assert!(close(score.score, 100.0), "{score:?}");
        assert_eq!(score.precisions, [100.0; 4]);
        assert_eq!(score.brevity_penalty, 1.0);
        assert_eq!(score.length_ratio, 1.0);
        assert_eq!(score.hypothesis_length, 10);
        assert_eq!(score.reference_length, 10);
        // 10 unigrams, 8 bigrams, 6 trigrams, 4 four-grams (the second line has none).
        assert_eq!(score.matching_ngrams, [10, 8, 6, 4]);
        assert_eq!(score.hypothesis_ngrams, [10, 8, 6, 4]);
    }

    #[test]
    fn bleu_without_a_four_gram_match_uses_exp_smoothing() {
        // hyp "a b c x d e", ref "a b c d e f": c = r = 6, BP = 1.
        // 1-grams 5/6, 2-grams {ab, bc, de} 3/5, 3-grams {abc} 1/4, 4-grams 0/3.
        // exp smoothing, first zero order: p_4 = 100 / (2 · 3).
        // BLEU = (500/6 · 60 · 25 · 100/6)^(1/4) = (75 000 000 / 36)^(1/4) = 37.9918…
        let score = bleu(&["a b c x d e"], &[vec!["a b c d e f"]], none_tokenizer());
        assert_eq!(score.matching_ngrams, [5, 3, 1, 0]);
        assert_eq!(score.hypothesis_ngrams, [6, 5, 4, 3]);
        assert!(close(score.precisions[3], 100.0 / 6.0));
        let expected = (75_000_000.0f64 / 36.0).powf(0.25);
        assert!(
            close(score.score, expected),
            "{} vs {expected}",
            score.score
        );
        assert!((score.score - 37.9918).abs() < 1e-4);
    }

    #[test]
    fn bleu_exp_smoothing_halves_again_for_each_order_without_a_match() {
        // hyp "a b x c d y", ref "a b c d e f": 1-grams 4/6, 2-grams {ab, cd} 2/5,
        // 3-grams 0/4 → p_3 = 100 / (2 · 4) = 12.5, 4-grams 0/3 → p_4 = 100 / (4 · 3).
        // BLEU = (200/3 · 40 · 12.5 · 25/3)^(1/4) = (2 500 000 / 9)^(1/4) = 22.9575…
        let score = bleu(&["a b x c d y"], &[vec!["a b c d e f"]], none_tokenizer());
        assert_eq!(score.matching_ngrams, [4, 2, 0, 0]);
        assert!(close(score.precisions[2], 12.5));
        assert!(close(score.precisions[3], 100.0 / 12.0));
        let expected = (2_500_000.0f64 / 9.0).powf(0.25);
        assert!(
            close(score.score, expected),
            "{} vs {expected}",
            score.score
        );
    }

    #[test]
    fn bleu_brevity_penalty_of_a_short_hypothesis() {
        // c = 4, r = 8: BP = exp(1 − 8/4) = e^−1; every n-gram of the hypothesis matches, so
        // BLEU = 100 · e^−1 = 36.7879….
        let score = bleu(&["a b c d"], &[vec!["a b c d e f g h"]], none_tokenizer());
        assert_eq!(score.precisions, [100.0; 4]);
        assert!(close(score.brevity_penalty, (-1.0f64).exp()));
        assert!(close(score.length_ratio, 0.5));
        assert!(close(score.score, 100.0 * (-1.0f64).exp()));
    }

    #[test]
    fn bleu_of_no_match_or_no_four_gram_is_zero() {
        let empty = bleu(&[""], &[vec!["a b c d"]], none_tokenizer());
        assert_eq!(empty.score, 0.0);
        assert_eq!(empty.brevity_penalty, 0.0);
        assert_eq!(empty.hypothesis_ngrams, [0; 4]);
        // Three tokens have no 4-gram: p_4 = 0 and log 0 = −9 999 999 999 makes BLEU 0.
        let short = bleu(&["a b c"], &[vec!["a b c"]], none_tokenizer());
        assert_eq!(short.precisions, [100.0, 100.0, 100.0, 0.0]);
        assert_eq!(short.score, 0.0);
        let disjoint = bleu(&["w x y z"], &[vec!["a b c d"]], none_tokenizer());
        assert_eq!(disjoint.score, 0.0);
        assert_eq!(disjoint.precisions, [0.0; 4]);
    }

    #[test]
    fn bleu_with_two_references_clips_by_the_larger_count_and_takes_the_closest_length() {
        // hyp "a a b" (3 tokens); refs "a b c d" (4) and "a a" (2): both 1 away, the shorter
        // counts. Clipping by max over references: a → max(1, 2) = 2, b → max(1, 0) = 1;
        // bigrams "a a" (second) and "a b" (first) both match; "a a b" is in neither.
        let score = bleu(
            &["a a b"],
            &[vec!["a b c d"], vec!["a a"]],
            none_tokenizer(),
        );
        assert_eq!(score.reference_length, 2);
        assert_eq!(score.matching_ngrams, [3, 2, 0, 0]);
        assert_eq!(score.hypothesis_ngrams, [3, 2, 1, 0]);
        assert_eq!(score.reference_sets, 2);
        assert_eq!(
            score.signature(),
            "nrefs:2|case:mixed|eff:no|tok:none|smooth:exp|version:2.4.3"
        );
    }

    #[test]
    fn bleu_clips_a_repeated_word_to_its_reference_count() {
        // Papineni's example: "the the the the the the the" against "the cat is on the mat".
        let score = bleu(
            &["the the the the the the the"],
            &[vec!["the cat is on the mat"]],
            none_tokenizer(),
        );
        assert_eq!(score.matching_ngrams, [2, 0, 0, 0]);
        assert!(close(score.precisions[0], 200.0 / 7.0));
    }

    #[test]
    fn bleu_lowercase_option() {
        let hypotheses = ["The Cat Sat Down"];
        let references = [vec!["the cat sat down"]];
        assert_eq!(
            bleu(&hypotheses, &references, BleuOptions::default()).score,
            0.0
        );
        let lowercased = bleu(
            &hypotheses,
            &references,
            BleuOptions {
                lowercase: true,
                ..BleuOptions::default()
            },
        );
        assert!(close(lowercased.score, 100.0));
        assert_eq!(
            lowercased.signature(),
            "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.4.3"
        );
    }

    #[test]
    fn bleu_signature_of_the_defaults_is_sacrebleus() {
        assert_eq!(
            BleuOptions::default().signature(1),
            "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3"
        );
    }

    #[test]
    fn bleu_rejects_a_reference_set_of_another_length() {
        let error = corpus_bleu(
            &["a", "b", "c"],
            &[vec!["a", "b", "c"], vec!["a", "b"]],
            &BleuOptions::default(),
        )
        .expect_err("2 references for 3 hypotheses");
        assert_eq!(
            error,
            CorpusError::LengthMismatch {
                hypotheses: 3,
                references: 2,
                set: 2
            }
        );
        let message = error.to_string();
        assert!(
            message.contains("3 hypotheses") && message.contains("2 references"),
            "{message}"
        );
        let no_sets: [Vec<&str>; 0] = [];
        assert_eq!(
            corpus_bleu(&["a"], &no_sets, &BleuOptions::default()),
            Err(CorpusError::NoReferences)
        );
        let no_lines: [&str; 0] = [];
        assert_eq!(
            corpus_bleu(&no_lines, &[no_lines.to_vec()], &BleuOptions::default()),
            Err(CorpusError::NoHypotheses)
        );
    }

    #[test]
    fn bleu_13a_tokenizes_punctuation_numbers_and_dashes() {
        let cases = [
            ("Hello, world!", "Hello , world !"),
            // A period or comma between digits stays; after one it is split off.
            (
                "It costs $3.14, or 1,000 yen.",
                "It costs $ 3.14 , or 1,000 yen .",
            ),
            ("3.14. 2,", "3.14 . 2 ,"),
            (".5 ,5 x.5 5.x 5,x", ". 5 , 5 x . 5 5 . x 5 , x"),
            // A dash after a digit is split off; one after a letter or space is not.
            ("pages 10-20 and well-known", "pages 10 - 20 and well-known"),
            ("1990-1995 -5 a-5 5--6", "1990 - 1995 -5 a-5 5 - -6"),
            // re.sub's left-to-right matches: "a." is taken, so ",5" keeps its comma.
            ("a.,5", "a . ,5"),
            ("U.S.A.", "U . S . A ."),
            // The apostrophe is not in the symbol class.
            (
                "don't (x) [y] {z} ~a|b^c_d`e",
                "don't ( x ) [ y ] { z } ~ a | b ^ c _ d ` e",
            ),
            (
                "&quot;quoted&quot; &amp; &lt;tag&gt;",
                "\" quoted \" & < tag >",
            ),
            // Entities are decoded one after another: "&amp;lt;" → "&lt;" → "<".
            ("&amp;lt;", "<"),
            ("a<skipped>b", "ab"),
            ("line-\nbreak\nnext", "linebreak next"),
            ("i\u{a0}j\u{1c}k", "i j k"),
            ("über.  Straße,", "über . Straße ,"),
            ("", ""),
        ];
        for (raw, tokenized) in cases {
            assert_eq!(tokenize_13a(raw), tokenized, "{raw:?}");
        }
    }

    #[test]
    fn bleu_13a_and_none_differ_on_raw_punctuation() {
        let hypotheses = ["The cat, it sat."];
        let references = [vec!["The cat , it sat ."]];
        assert!(close(
            bleu(&hypotheses, &references, BleuOptions::default()).score,
            100.0
        ));
        assert!(bleu(&hypotheses, &references, none_tokenizer()).score < 100.0);
    }
}
