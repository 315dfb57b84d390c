//! Byte-pair encoding of a word-level corpus (Sennrich et al. 2016, subword-nmt's `learn_bpe`):
//! merges learnt on the train split's word counts, applied to every split, so that rare words
//! become pieces a model sees often enough to learn (issue #38: Yu et al.'s rare tokens occur
//! 1–7 times in word-level PTB).
//!
//! A word is its characters with an end-of-word mark on the last; each merge joins the most
//! frequent adjacent pair of symbols over the train words (weighted by their counts). Ties go to
//! the pair whose symbols were made first — characters in code-point order before any merged
//! symbol, merged symbols in merge order — so the merges are the same on every machine. Words
//! of the form `<…>` (`<unk>`) are kept whole. A segmented word is written subword-nmt's way:
//! every piece but the last ends in `@@` (`low@@ er`), so the words come back by deleting `@@ `.
//!
//! Learning keeps, for each pair, its count and the words it occurs in, and updates both for the
//! words a merge touches only; the next pair comes from a max-heap whose stale entries (a count
//! changed since) are skipped. 8,000 merges on WikiText-2's train split take about a second.

use std::collections::BinaryHeap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::text::words;

/// Marks a piece that a word continues after (`low@@ er`).
pub const CONTINUATION: &str = "@@";

/// At most this many merges (a bound on the learner's work and the table it writes).
pub const MAX_MERGES: usize = 1_000_000;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BpeError {
    #[error("--merges {0}: at least 1")]
    NoMerges(usize),
    #[error("--merges {0}: at most {MAX_MERGES}")]
    TooManyMerges(usize),
    #[error(
        "--merges {asked}: the train split allows only {possible} (after them every word is one symbol)"
    )]
    Exhausted { asked: usize, possible: usize },
}

/// A symbol: an index into [`Merges::symbols`].
type Sym = u32;

/// A learnt segmentation: the merges in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Merges {
    /// Every symbol's text: characters (the last of a word with `</w>`), then merged symbols.
    symbols: Vec<String>,
    /// The merges, in the order learnt: (left, right) → the merged symbol.
    order: Vec<(Sym, Sym)>,
    /// Pair → its rank (position in `order`) and the symbol it makes.
    rank: FxHashMap<(Sym, Sym), (usize, Sym)>,
    /// The characters' symbols by text (merged symbols are reached through `rank`).
    index: FxHashMap<String, Sym>,
}

/// The first word of `lines` that already ends with [`CONTINUATION`] (line number from 1, the
/// word): segmenting such a text could not be undone by deleting `@@ ` (a corpus segmented
/// already, or one that uses the mark itself).
pub fn first_marked_word<'a>(lines: impl Iterator<Item = &'a str>) -> Option<(usize, String)> {
    lines.enumerate().find_map(|(i, line)| {
        words(line)
            .find(|w| w.ends_with(CONTINUATION))
            .map(|w| (i + 1, w.to_owned()))
    })
}

/// The end-of-word mark inside the learner (never written out).
const END: &str = "</w>";

fn is_atomic(word: &str) -> bool {
    word.len() > 2 && word.starts_with('<') && word.ends_with('>')
}

impl Merges {
    /// Learns `merges` merges from the words of `lines` (the train split).
    pub fn learn<'a>(
        lines: impl Iterator<Item = &'a str>,
        merges: usize,
    ) -> Result<Self, BpeError> {
        Self::learn_reporting(lines, merges, &mut |_| {})
    }

    /// [`Self::learn`], telling `progress(done)` the merges learnt after each (of `merges`).
    pub fn learn_reporting<'a>(
        lines: impl Iterator<Item = &'a str>,
        merges: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Self, BpeError> {
        if merges == 0 {
            return Err(BpeError::NoMerges(merges));
        }
        if merges > MAX_MERGES {
            return Err(BpeError::TooManyMerges(merges));
        }
        let mut counts: FxHashMap<&str, i64> = FxHashMap::default();
        for line in lines {
            for w in words(line) {
                if !is_atomic(w) {
                    *counts.entry(w).or_default() += 1;
                }
            }
        }
        // The alphabet in code-point order, so that ties break the same everywhere.
        let mut alphabet: Vec<String> = counts
            .keys()
            .flat_map(|w| {
                let n = w.chars().count();
                w.chars().enumerate().map(move |(i, c)| {
                    if i + 1 == n {
                        format!("{c}{END}")
                    } else {
                        c.to_string()
                    }
                })
            })
            .collect::<FxHashSet<_>>()
            .into_iter()
            .collect();
        alphabet.sort();
        let mut learnt = Self {
            index: alphabet
                .iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), i as Sym))
                .collect(),
            symbols: alphabet,
            order: Vec::new(),
            rank: FxHashMap::default(),
        };
        // The train words as symbol sequences, in a fixed order.
        let mut vocab: Vec<(&str, i64)> = counts.into_iter().collect();
        vocab.sort_unstable();
        let mut seqs: Vec<Vec<Sym>> = vocab.iter().map(|(w, _)| learnt.initial(w)).collect();
        let freq: Vec<i64> = vocab.iter().map(|&(_, c)| c).collect();

        let mut pairs: FxHashMap<(Sym, Sym), i64> = FxHashMap::default();
        let mut where_: FxHashMap<(Sym, Sym), FxHashSet<usize>> = FxHashMap::default();
        for (i, seq) in seqs.iter().enumerate() {
            for p in seq.windows(2) {
                *pairs.entry((p[0], p[1])).or_default() += freq[i];
                where_.entry((p[0], p[1])).or_default().insert(i);
            }
        }
        // Max count first; among equal counts the smallest (left, right) symbol ids.
        let mut heap: BinaryHeap<(i64, std::cmp::Reverse<(Sym, Sym)>)> = pairs
            .iter()
            .map(|(&p, &c)| (c, std::cmp::Reverse(p)))
            .collect();
        while learnt.order.len() < merges {
            let Some((count, std::cmp::Reverse(pair))) = heap.pop() else {
                return Err(BpeError::Exhausted {
                    asked: merges,
                    possible: learnt.order.len(),
                });
            };
            if pairs.get(&pair) != Some(&count) || count <= 0 {
                continue;
            }
            let merged = learnt.push(pair);
            progress(learnt.order.len());
            let touched: Vec<usize> = where_.remove(&pair).into_iter().flatten().collect();
            pairs.remove(&pair);
            let mut changed: FxHashSet<(Sym, Sym)> = FxHashSet::default();
            for i in touched {
                let old = std::mem::take(&mut seqs[i]);
                for p in old.windows(2) {
                    let p = (p[0], p[1]);
                    if p != pair {
                        *pairs.entry(p).or_default() -= freq[i];
                        changed.insert(p);
                    }
                }
                let new = merge_pair(&old, pair, merged);
                for p in new.windows(2) {
                    let p = (p[0], p[1]);
                    *pairs.entry(p).or_default() += freq[i];
                    where_.entry(p).or_default().insert(i);
                    changed.insert(p);
                }
                seqs[i] = new;
            }
            for p in changed {
                match pairs.get(&p) {
                    Some(&c) if c > 0 => heap.push((c, std::cmp::Reverse(p))),
                    _ => {
                        pairs.remove(&p);
                    }
                }
            }
        }
        Ok(learnt)
    }

    /// A word as its characters, the last one marked.
    fn initial(&self, word: &str) -> Vec<Sym> {
        let n = word.chars().count();
        word.chars()
            .enumerate()
            .map(|(i, c)| {
                let s = if i + 1 == n {
                    format!("{c}{END}")
                } else {
                    c.to_string()
                };
                // A character the train split never had gets a symbol of its own (no merge
                // involves it).
                self.index.get(&s).copied().unwrap_or(Sym::MAX)
            })
            .collect()
    }

    fn push(&mut self, pair: (Sym, Sym)) -> Sym {
        let text = format!(
            "{}{}",
            self.symbols[pair.0 as usize], self.symbols[pair.1 as usize]
        );
        let id = self.symbols.len() as Sym;
        self.rank.insert(pair, (self.order.len(), id));
        self.order.push(pair);
        // Not into `index`, which holds the characters `initial` looks up: a merged text can
        // equal a marked character's (a word with a literal `x</w>` in it).
        self.symbols.push(text);
        id
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The merges in order as text, `left right` per line (`</w>` marking a word's end), as
    /// subword-nmt writes its codes file.
    pub fn to_text(&self) -> String {
        self.order
            .iter()
            .map(|&(a, b)| {
                format!(
                    "{} {}\n",
                    self.symbols[a as usize], self.symbols[b as usize]
                )
            })
            .collect()
    }

    /// The pieces of one word: the lowest-ranked merge applied first, everywhere in the word,
    /// until none applies. A character the train split never saw stays a piece of its own.
    pub fn segment(&self, word: &str) -> Vec<String> {
        if is_atomic(word) {
            return vec![word.to_owned()];
        }
        let chars: Vec<char> = word.chars().collect();
        let mut seq = self.initial(word);
        loop {
            let best = seq
                .windows(2)
                .filter_map(|p| {
                    self.rank
                        .get(&(p[0], p[1]))
                        .map(|&(r, m)| (r, (p[0], p[1]), m))
                })
                .min();
            let Some((_, pair, merged)) = best else {
                break;
            };
            seq = merge_pair(&seq, pair, merged);
        }
        // Unknown characters (Sym::MAX) take their text from the word itself.
        let mut pieces = Vec::with_capacity(seq.len());
        let mut at = 0;
        for s in seq {
            let text = match self.symbols.get(s as usize) {
                Some(t) => t.strip_suffix(END).unwrap_or(t).to_owned(),
                None => chars[at].to_string(),
            };
            at += text.chars().count();
            pieces.push(text);
        }
        pieces
    }

    /// A line with every word segmented, pieces but a word's last marked [`CONTINUATION`].
    pub fn apply_line(&self, line: &str, cache: &mut FxHashMap<String, String>) -> String {
        let mut out = String::with_capacity(line.len() + line.len() / 2);
        for (i, w) in words(line).enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let segmented = cache.entry(w.to_owned()).or_insert_with(|| {
                let pieces = self.segment(w);
                let last = pieces.len() - 1;
                pieces
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        if k < last {
                            format!("{p}{CONTINUATION}")
                        } else {
                            p.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            out.push_str(segmented);
        }
        out
    }

    /// A whole split's text segmented, line by line (empty lines stay empty).
    pub fn apply_text<'a>(
        &self,
        lines: impl Iterator<Item = &'a str>,
        cache: &mut FxHashMap<String, String>,
    ) -> String {
        let mut out = String::new();
        for line in lines {
            out.push_str(&self.apply_line(line, cache));
            out.push('\n');
        }
        out
    }
}

/// `seq` with every non-overlapping occurrence of `pair`, left to right, replaced by `merged`.
fn merge_pair(seq: &[Sym], pair: (Sym, Sym), merged: Sym) -> Vec<Sym> {
    let mut out = Vec::with_capacity(seq.len());
    let mut i = 0;
    while i < seq.len() {
        if i + 1 < seq.len() && (seq[i], seq[i + 1]) == pair {
            out.push(merged);
            i += 2;
        } else {
            out.push(seq[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sennrich et al.'s example (their Figure 1): low ×5, lower ×2, newest ×6, widest ×3,
    /// counted by hand. Symbol ids: d e i l n o r</w> s t</w> w w</w> in code-point order.
    /// (e, s) and (s, t</w>) tie at 9: `e s` (ids 1, 7 before 7, 8); then `es t</w>` (9);
    /// `l o` (7); then (n, e), (e, w) and (w, est</w>) tie at 6 — (lo, w</w>) has only 5 — and
    /// `e w` has the earliest symbols; then (n, ew) and (ew, est</w>) tie at 6: `n ew`.
    #[test]
    fn the_papers_example_by_hand() {
        let text = "low low low low low lower lower newest newest newest newest newest newest widest widest widest";
        let m = Merges::learn(std::iter::once(text), 5).expect("merges");
        assert_eq!(m.to_text(), "e s\nes t</w>\nl o\ne w\nn ew\n");
        assert_eq!(m.segment("newest"), ["new", "est"]);
        assert_eq!(m.segment("lowest"), ["lo", "w", "est"]);
        // A character never seen in train is its own piece.
        assert_eq!(m.segment("löw"), ["l", "ö", "w"]);
        let mut cache = FxHashMap::default();
        assert_eq!(
            m.apply_line("lowest <unk> low", &mut cache),
            "lo@@ w@@ est <unk> lo@@ w"
        );
    }

    #[test]
    fn segmenting_and_joining_gives_the_words_back() {
        let text = "the cat sat on the mat with the other cats and a hat @-@ that";
        let m = Merges::learn(std::iter::once(text), 10).expect("merges");
        let mut cache = FxHashMap::default();
        let out = m.apply_line(text, &mut cache);
        assert_eq!(out.replace("@@ ", ""), text, "{out}");
    }

    /// The incremental learner against the plain algorithm that recounts every pair of every
    /// word at each merge, on a text with many ties and repeated pairs ("aaaa").
    #[test]
    fn the_incremental_counts_equal_recounting_every_merge() {
        let words = [
            "aaaa", "abab", "banana", "bandana", "ananas", "cab", "abba", "baba", "nab", "an",
        ];
        let text: Vec<String> = (0..40)
            .map(|i| {
                (0..7)
                    .map(|j| words[(i * 7 + j * 3 + i / 5) % words.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let lines = || text.iter().map(String::as_str);
        let Err(BpeError::Exhausted { possible, .. }) = Merges::learn(lines(), 1000) else {
            panic!("1,000 merges cannot be possible on ten words");
        };
        let mut heard = Vec::new();
        let fast =
            Merges::learn_reporting(lines(), possible, &mut |d| heard.push(d)).expect("merges");
        // A progress bar hears every merge once, in order.
        assert_eq!(heard, (1..=possible).collect::<Vec<_>>());
        // The plain way, on the same symbols.
        let mut naive = Merges::learn(text.iter().map(String::as_str), 1).expect("alphabet");
        naive.order.clear();
        naive.rank.clear();
        naive.symbols.truncate(naive.symbols.len() - 1);
        naive
            .index
            .retain(|_, &mut id| (id as usize) < naive.symbols.len());
        let mut counts: FxHashMap<&str, i64> = FxHashMap::default();
        for line in &text {
            for w in line.split_whitespace() {
                *counts.entry(w).or_default() += 1;
            }
        }
        let mut seqs: Vec<(Vec<Sym>, i64)> =
            counts.iter().map(|(w, &c)| (naive.initial(w), c)).collect();
        loop {
            let mut pairs: FxHashMap<(Sym, Sym), i64> = FxHashMap::default();
            for (seq, c) in &seqs {
                for p in seq.windows(2) {
                    *pairs.entry((p[0], p[1])).or_default() += c;
                }
            }
            let Some((&pair, _)) = pairs
                .iter()
                .max_by_key(|&(&p, &c)| (c, std::cmp::Reverse(p)))
            else {
                break;
            };
            let merged = naive.push(pair);
            for (seq, _) in &mut seqs {
                *seq = merge_pair(seq, pair, merged);
            }
        }
        assert_eq!(naive.len(), possible, "the same number of merges possible");
        assert_eq!(fast.to_text(), naive.to_text());
    }

    #[test]
    fn impossible_numbers_of_merges_are_refused() {
        assert_eq!(
            Merges::learn(std::iter::once("ab ab"), 0),
            Err(BpeError::NoMerges(0))
        );
        // "ab" has one pair: after `a b</w>` every word is one symbol.
        assert_eq!(
            Merges::learn(std::iter::once("ab ab"), 2),
            Err(BpeError::Exhausted {
                asked: 2,
                possible: 1
            })
        );
        assert_eq!(
            Merges::learn(std::iter::once("ab"), MAX_MERGES + 1),
            Err(BpeError::TooManyMerges(MAX_MERGES + 1))
        );
    }
}
