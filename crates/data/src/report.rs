//! `conelab data stats`: what a corpus holds, as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{Corpus, Group, GroupSummary, Split, SplitStats};

/// Statistics of a loaded corpus. The field names are the stable JSON keys.
#[derive(Debug, Clone, Serialize)]
pub struct CorpusReport {
    pub corpus: String,
    pub load_seconds: f64,
    pub train_tokens: usize,
    pub valid_tokens: usize,
    pub test_tokens: usize,
    pub vocab_size: usize,
    /// Exponent `s` of the least-squares fit `count ∝ rank^(−s)` over all types seen in train.
    pub zipf_exponent: f64,
    pub group_bounds: [f64; 2],
    pub groups: BTreeMap<Group, GroupSummary>,
    pub splits: BTreeMap<&'static str, SplitStats>,
}

impl CorpusReport {
    pub fn new(corpus: &Corpus, bounds: [f64; 2], load_seconds: f64) -> Self {
        let counts = corpus.vocab().counts();
        Self {
            corpus: corpus.name().to_owned(),
            load_seconds,
            train_tokens: corpus.stats(Split::Train).tokens,
            valid_tokens: corpus.stats(Split::Valid).tokens,
            test_tokens: corpus.stats(Split::Test).tokens,
            vocab_size: corpus.vocab().len(),
            zipf_exponent: zipf_exponent(counts),
            group_bounds: bounds,
            groups: corpus.groups().summary(counts).into_iter().collect(),
            splits: Split::ALL
                .iter()
                .map(|&s| (s.name(), *corpus.stats(s)))
                .collect(),
        }
    }

    /// The human-readable table.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "corpus      {}", self.corpus);
        let _ = writeln!(out, "loaded in   {:.3} s", self.load_seconds);
        let _ = writeln!(
            out,
            "vocabulary  {} types (from train; ids in frequency-rank order)",
            thousands(self.vocab_size as u64)
        );
        let _ = writeln!(
            out,
            "zipf        count ∝ rank^-{:.3} (least-squares fit)",
            self.zipf_exponent
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<6} {:>10} {:>12} {:>10} {:>10} {:>10}",
            "split", "lines", "tokens", "<unk>", "oov types", "oov tokens"
        );
        for (name, s) in Split::ALL.map(|s| (s.name(), &self.splits[s.name()])) {
            let _ = writeln!(
                out,
                "{:<6} {:>10} {:>12} {:>10} {:>10} {:>10}",
                name,
                thousands(s.lines as u64),
                thousands(s.tokens as u64),
                thousands(s.unk as u64),
                thousands(s.oov_types as u64),
                thousands(s.oov_tokens as u64)
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<9} {:>8} {:>16} {:>12} {:>12}   (boundaries {}, {} of the ranks)",
            "group",
            "size",
            "ranks",
            "min count",
            "max count",
            self.group_bounds[0],
            self.group_bounds[1]
        );
        for (g, s) in &self.groups {
            let ranks = format!("[{}, {})", s.first_rank, s.first_rank + s.size);
            let _ = writeln!(
                out,
                "{:<9} {:>8} {:>16} {:>12} {:>12}",
                g.name(),
                thousands(s.size as u64),
                ranks,
                thousands(s.min_count),
                thousands(s.max_count)
            );
        }
        out
    }
}

/// Least-squares slope of `ln count` against `ln rank` (ranks from 1, types with count > 0),
/// returned as the positive exponent `s` of `count ∝ rank^(−s)`.
pub fn zipf_exponent(counts_by_rank: &[u64]) -> f64 {
    let points: Vec<(f64, f64)> = counts_by_rank
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(r, &c)| (((r + 1) as f64).ln(), (c as f64).ln()))
        .collect();
    let n = points.len() as f64;
    if points.len() < 2 {
        return f64::NAN;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    // Equal counts give a slope of −0.0: printed "rank^--0.000" until it was made +0.
    -sxy / sxx + 0.0
}

/// `1234567` → `1,234,567`.
pub fn thousands(x: u64) -> String {
    let s = x.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_exponent_recovers_exact_power_laws() {
        for s in [0.8, 1.0, 1.3] {
            let counts: Vec<u64> = (1..=2000)
                .map(|r| (1e9 * (r as f64).powf(-s)).round() as u64)
                .collect();
            assert!((zipf_exponent(&counts) - s).abs() < 1e-3, "s={s}");
        }
        assert!(zipf_exponent(&[5]).is_nan());
        // Flat counts: exponent +0 (a −0 printed as "rank^--0.000").
        let flat = zipf_exponent(&[5, 5, 5]);
        assert!(flat == 0.0 && flat.is_sign_positive(), "{flat}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(929_589), "929,589");
        assert_eq!(thousands(2_088_628), "2,088,628");
    }
}
