//! What a parallel corpus holds, as a table or as JSON (the translation counterpart of
//! [`crate::CorpusReport`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::{Language, MtGroup, ParallelCorpus, ParallelSplit, SideStats};
use crate::{Split, thousands};

/// Sentence lengths in words (no `</s>`), nearest-rank percentiles: the `⌈q·n⌉`-th smallest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LengthSummary {
    pub min: usize,
    pub median: usize,
    pub p95: usize,
    pub max: usize,
}

impl LengthSummary {
    /// The summary of `lengths` (all zeros when empty).
    pub fn of(mut lengths: Vec<usize>) -> Self {
        if lengths.is_empty() {
            return Self::default();
        }
        lengths.sort_unstable();
        let n = lengths.len();
        // ⌈q·n⌉ for q = p/100, in integers.
        let rank = |p: usize| (p * n).div_ceil(100).clamp(1, n) - 1;
        Self {
            min: lengths[0],
            median: lengths[rank(50)],
            p95: lengths[rank(95)],
            max: lengths[n - 1],
        }
    }
}

/// One side of one split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SideReport {
    #[serde(flatten)]
    pub stats: SideStats,
    pub length: LengthSummary,
}

/// One split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SplitReport {
    pub lines: usize,
    pub pairs: usize,
    pub skipped_empty: usize,
    pub skipped_one_sided: usize,
    pub source: SideReport,
    pub target: SideReport,
}

/// One group of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupReport {
    pub size: usize,
    pub first_id: usize,
    /// Share of the group's own population: of the target-side types for Frequent / Medium /
    /// Rare, of all types seen in train (target-side plus source-only) for Source-only.
    pub type_share: f64,
    /// Share of the side's training tokens (`</s>` included) that fall in the group: target
    /// tokens for the frequency groups, source tokens for Source-only.
    pub token_share: f64,
    /// Training counts on that side.
    pub min_count: u64,
    pub max_count: u64,
}

/// Statistics of a loaded parallel corpus. The field names are the stable JSON keys.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelReport {
    pub corpus: String,
    pub source: String,
    pub target: String,
    pub load_seconds: f64,
    pub vocab_size: usize,
    pub target_types: usize,
    pub source_only_types: usize,
    pub special_ids: BTreeMap<&'static str, u32>,
    /// Types by where they occur in train.
    pub languages: BTreeMap<Language, usize>,
    pub group_bounds: [f64; 2],
    pub groups: BTreeMap<MtGroup, GroupReport>,
    pub splits: BTreeMap<&'static str, SplitReport>,
}

fn split_report(stats: &super::ParallelSplitStats, split: &ParallelSplit) -> SplitReport {
    let n = split.len();
    SplitReport {
        lines: stats.lines,
        pairs: stats.pairs,
        skipped_empty: stats.skipped_empty,
        skipped_one_sided: stats.skipped_one_sided,
        source: SideReport {
            stats: stats.source,
            length: LengthSummary::of((0..n).map(|i| split.source_len(i) - 1).collect()),
        },
        target: SideReport {
            stats: stats.target,
            length: LengthSummary::of((0..n).map(|i| split.target_len(i)).collect()),
        },
    }
}

impl ParallelReport {
    pub fn new(corpus: &ParallelCorpus, load_seconds: f64) -> Self {
        let v = corpus.vocab();
        let g = corpus.groups();
        let share = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 / whole as f64
            }
        };
        let seen_types = v.target_types() + v.source_only_types();
        let groups = MtGroup::ALL
            .into_iter()
            .filter(|&grp| grp != MtGroup::Special)
            .map(|grp| {
                let range = g.range(grp);
                let (counts, types) = if grp == MtGroup::SourceOnly {
                    (v.source_counts(), seen_types)
                } else {
                    (v.target_counts(), v.target_types())
                };
                let slice = &counts[range.clone()];
                let report = GroupReport {
                    size: range.len(),
                    first_id: range.start,
                    type_share: share(range.len() as u64, types as u64),
                    token_share: share(slice.iter().sum(), counts.iter().sum()),
                    min_count: slice.iter().copied().min().unwrap_or(0),
                    max_count: slice.iter().copied().max().unwrap_or(0),
                };
                (grp, report)
            })
            .collect();
        let languages = Language::ALL
            .into_iter()
            .map(|l| {
                let n = (0..v.len() as u32).filter(|&i| v.language(i) == l).count();
                (l, n)
            })
            .collect();
        let bounds = corpus.group_bounds();
        Self {
            corpus: corpus.name().to_owned(),
            source: corpus.source_code().to_owned(),
            target: corpus.target_code().to_owned(),
            load_seconds,
            vocab_size: v.len(),
            target_types: v.target_types(),
            source_only_types: v.source_only_types(),
            special_ids: BTreeMap::from([
                ("pad", v.pad()),
                ("bos", v.bos()),
                ("eos", v.eos()),
                ("unk", v.unk()),
            ]),
            languages,
            group_bounds: [bounds.medium_start(), bounds.rare_start()],
            groups,
            splits: Split::ALL
                .iter()
                .map(|&s| (s.name(), split_report(corpus.stats(s), corpus.split(s))))
                .collect(),
        }
    }

    /// The human-readable table.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let n = |x: usize| thousands(x as u64);
        let _ = writeln!(out, "corpus      {}", self.corpus);
        let _ = writeln!(
            out,
            "direction   {} → {} (source → target)",
            self.source, self.target
        );
        let _ = writeln!(out, "loaded in   {:.3} s", self.load_seconds);
        let _ = writeln!(
            out,
            "vocabulary  {} ids, joint over both sides of train: {} target-side types (</s> included), {} source-only, specials {}",
            n(self.vocab_size),
            n(self.target_types),
            n(self.source_only_types),
            self.special_ids
                .iter()
                .map(|(k, id)| format!("{k}={id}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let _ = writeln!(
            out,
            "languages   {}",
            self.languages
                .iter()
                .map(|(l, c)| format!("{l} {}", n(*c)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<6} {:<4} {:>8} {:>8} {:>10} {:>8} {:>7} {:>9}   {:>3} {:>6} {:>3} {:>4}",
            "split",
            "side",
            "lines",
            "pairs",
            "words",
            "types",
            "<unk>",
            "oov types",
            "min",
            "median",
            "p95",
            "max"
        );
        for split in Split::ALL {
            let s = &self.splits[split.name()];
            for (code, r) in [(&self.source, &s.source), (&self.target, &s.target)] {
                let _ = writeln!(
                    out,
                    "{:<6} {:<4} {:>8} {:>8} {:>10} {:>8} {:>7} {:>9}   {:>3} {:>6} {:>3} {:>4}",
                    split.name(),
                    code,
                    n(s.lines),
                    n(s.pairs),
                    n(r.stats.words),
                    n(r.stats.types),
                    n(r.stats.unk),
                    n(r.stats.oov_types),
                    r.length.min,
                    r.length.median,
                    r.length.p95,
                    r.length.max
                );
            }
            if s.skipped_empty + s.skipped_one_sided > 0 {
                let _ = writeln!(
                    out,
                    "{:<6} skipped: {} lines empty on both sides, {} empty on one side",
                    "",
                    n(s.skipped_empty),
                    n(s.skipped_one_sided)
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<11} {:>8} {:>16} {:>7} {:>8} {:>10} {:>10}   (boundaries {}, {} of the target-side types)",
            "group",
            "size",
            "ids",
            "types",
            "tokens",
            "min count",
            "max count",
            self.group_bounds[0],
            self.group_bounds[1]
        );
        for (g, r) in &self.groups {
            let ids = format!("[{}, {})", r.first_id, r.first_id + r.size);
            let _ = writeln!(
                out,
                "{:<11} {:>8} {:>16} {:>6.1}% {:>7.1}% {:>10} {:>10}",
                g.name(),
                n(r.size),
                ids,
                100.0 * r.type_share,
                100.0 * r.token_share,
                thousands(r.min_count),
                thousands(r.max_count)
            );
        }
        let _ = writeln!(
            out,
            "(frequency groups: counts and token shares on the target side; source-only: on the source side, types as a share of all types seen in train)"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitText;
    use crate::parallel::ParallelOptions;

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(LengthSummary::of(vec![]), LengthSummary::default());
        assert_eq!(
            LengthSummary::of(vec![7]),
            LengthSummary {
                min: 7,
                median: 7,
                p95: 7,
                max: 7
            }
        );
        // 1..=20: median is the 10th smallest, p95 the 19th.
        let s = LengthSummary::of((1..=20).rev().collect());
        assert_eq!((s.min, s.median, s.p95, s.max), (1, 10, 19, 20));
        // 1..=21: ⌈10.5⌉ = 11th, ⌈19.95⌉ = 20th.
        let s = LengthSummary::of((1..=21).collect());
        assert_eq!((s.median, s.p95), (11, 20));
    }

    #[test]
    fn report_of_a_tiny_corpus() {
        let text = |name: &str, s: &str| {
            SplitText::from_bytes(name.into(), s.as_bytes().to_vec(), 1 << 20).expect("valid")
        };
        let c = ParallelCorpus::from_texts(
            "tiny".into(),
            "en",
            "de",
            [
                (
                    text("train.en", "a b a\nc a x\nb d\ne e e\n\n"),
                    text("train.de", "x y x\nz x\nw y q\ny\n\n"),
                ),
                (text("valid.en", "a zz\n"), text("valid.de", "x yy yy\n")),
                (text("test.en", "a\n"), text("test.de", "x\n")),
            ],
            &ParallelOptions::default(),
        )
        .expect("builds");
        let r = ParallelReport::new(&c, 0.5);
        assert_eq!(
            (r.vocab_size, r.target_types, r.source_only_types),
            (14, 6, 5)
        );
        assert_eq!(r.special_ids["eos"], 0);
        assert_eq!(r.languages[&Language::Both], 2);
        let train = &r.splits["train"];
        assert_eq!((train.lines, train.pairs, train.skipped_empty), (5, 4, 1));
        // Source words per line 3 3 2 3; target 3 2 3 1.
        assert_eq!(
            train.source.length,
            LengthSummary {
                min: 2,
                median: 3,
                p95: 3,
                max: 3
            }
        );
        assert_eq!(
            (train.target.length.min, train.target.length.median),
            (1, 2)
        );
        let valid = &r.splits["valid"];
        assert_eq!((valid.source.stats.unk, valid.target.stats.unk), (1, 2));
        assert_eq!(valid.target.stats.oov_types, 1);
        // Frequent = {</s>}: 4 of the 13 target tokens; Rare = {w, q}: 2 of 13.
        let f = &r.groups[&MtGroup::Frequent];
        assert_eq!((f.size, f.min_count, f.max_count), (1, 4, 4));
        assert!((f.token_share - 4.0 / 13.0).abs() < 1e-12);
        assert!((r.groups[&MtGroup::Rare].type_share - 2.0 / 6.0).abs() < 1e-12);
        let so = &r.groups[&MtGroup::SourceOnly];
        assert_eq!(
            (so.size, so.first_id, so.min_count, so.max_count),
            (5, 6, 1, 3)
        );
        // a 3 + e 3 + b 2 + c 1 + d 1 = 10 of 15 source tokens.
        assert!((so.token_share - 10.0 / 15.0).abs() < 1e-12);
        let table = r.render_table();
        assert!(table.contains("direction   en → de"), "{table}");
        assert!(table.contains("source-only"), "{table}");
    }
}
