//! The joint vocabulary of a parallel corpus and its four groups (methods.md §5).

use std::cmp::Reverse;
use std::ops::Range;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use super::{Paired, SideStats};
use crate::text::words;
use crate::vocab::UNK;
use crate::{DataError, FrequencyGroups, Group, GroupBounds};

/// Fills batches past a sentence's end; masked everywhere, never scored.
pub const PAD: &str = "<pad>";
/// The decoder's first input (begin of sentence); never a prediction target.
pub const BOS: &str = "<s>";
/// End of sentence: the last source token and the decoder's last target (fairseq's `</s>`).
pub const END_OF_SENTENCE: &str = "</s>";

const SOURCE: usize = 0;
const TARGET: usize = 1;

/// Where a type occurs in the training split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Only on the source side.
    Source,
    /// Only on the target side.
    Target,
    /// On both sides (`</s>` always; shared words, numbers, names, punctuation).
    Both,
    /// In no training text: `<s>`, `<pad>`, and `<unk>` unless the text holds its own.
    Special,
}

impl Language {
    pub const ALL: [Language; 4] = [
        Language::Source,
        Language::Target,
        Language::Both,
        Language::Special,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Language::Source => "source",
            Language::Target => "target",
            Language::Both => "both",
            Language::Special => "special",
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The joint vocabulary over both sides of the training split: one id space, one matrix row per
/// id (encoder input, decoder input and decoder output share it).
///
/// Ids, in order:
/// 1. the types of the target side of train, `</s>` among them (one per pair), by target count
///    descending, ties by first occurrence in the target text (`</s>` first occurs right after the
///    first pair's words): ids `0..target_types()`;
/// 2. the types that occur only on the source side of train, by source count descending, ties by
///    first occurrence in the source text: the next `source_only_types()` ids;
/// 3. the special tokens no training text holds, last: `<unk>` (unless the text has its own `<unk>`,
///    which is then an ordinary word of 1. or 2., as in the word-level vocabulary), `<s>`, `<pad>`.
///
/// Specials last (fairseq puts them at ids 0–3) so that ids follow the frequency rank exactly: the
/// Frequent / Medium / Rare groups are contiguous id ranges, as in the word-level [`crate::Vocab`],
/// and `</s>` — a target the decoder predicts once per sentence — sits at its rank.
#[derive(Debug, Clone)]
pub struct ParallelVocab {
    tokens: Vec<String>,
    index: FxHashMap<String, u32>,
    source_counts: Vec<u64>,
    target_counts: Vec<u64>,
    target_types: usize,
    source_only_types: usize,
    pad: u32,
    bos: u32,
    eos: u32,
    unk: u32,
}

/// One side of a split, encoded: `ids[offsets[i]..offsets[i + 1]]` is pair `i`.
#[derive(Debug)]
pub(super) struct SideIds {
    pub(super) ids: Vec<u32>,
    pub(super) offsets: Vec<usize>,
    pub(super) stats: SideStats,
}

impl SideIds {
    fn with_capacity(pairs: usize) -> Self {
        let mut offsets = Vec::with_capacity(pairs + 1);
        offsets.push(0);
        Self {
            ids: Vec::with_capacity(pairs * 16),
            offsets,
            stats: SideStats::default(),
        }
    }
}

/// Both sides of a split, encoded.
#[derive(Debug)]
pub(super) struct Encoded {
    pub(super) source: SideIds,
    pub(super) target: SideIds,
}

/// Provisional ids in order of first occurrence (target text first, then the source text), with
/// counts per side.
struct Interner<'a> {
    index: FxHashMap<&'a str, u32>,
    types: Vec<&'a str>,
    counts: Vec<[u64; 2]>,
    max_types: usize,
}

impl<'a> Interner<'a> {
    fn add(&mut self, word: &'a str, side: Option<usize>) -> Result<u32, DataError> {
        let next = self.types.len() as u32;
        let id = *self.index.entry(word).or_insert(next);
        if id == next {
            if self.types.len() >= self.max_types {
                return Err(DataError::VocabTooLarge {
                    limit: self.max_types,
                });
            }
            self.types.push(word);
            self.counts.push([0, 0]);
        }
        if let Some(side) = side {
            self.counts[id as usize][side] += 1;
        }
        Ok(id)
    }
}

fn check_reserved(word: &str, path: &Path, line: usize) -> Result<(), DataError> {
    if word.starts_with('<') && matches!(word, PAD | BOS | END_OF_SENTENCE) {
        return Err(DataError::ReservedToken {
            path: path.to_path_buf(),
            line,
            token: word.to_owned(),
        });
    }
    Ok(())
}

impl ParallelVocab {
    /// Counts both sides of the train pairs and returns the vocabulary with the train split
    /// encoded (source with `</s>`, target without).
    pub(super) fn build(
        train: &Paired<'_>,
        max_types: usize,
    ) -> Result<(Self, Encoded), DataError> {
        let pairs = train.lines.len();
        let mut interner = Interner {
            index: FxHashMap::default(),
            types: Vec::new(),
            counts: Vec::new(),
            max_types,
        };
        // The target text first, so that provisional ids are already in target first-occurrence
        // order, and source-only types come after every target type in source order.
        let mut target = SideIds::with_capacity(pairs);
        for (line, &number) in train.target.iter().zip(&train.lines) {
            for w in words(line) {
                check_reserved(w, train.target_path, number)?;
                target.ids.push(interner.add(w, Some(TARGET))?);
            }
            interner.add(END_OF_SENTENCE, Some(TARGET))?;
            target.offsets.push(target.ids.len());
        }
        let mut source = SideIds::with_capacity(pairs);
        for (line, &number) in train.source.iter().zip(&train.lines) {
            for w in words(line) {
                check_reserved(w, train.source_path, number)?;
                source.ids.push(interner.add(w, Some(SOURCE))?);
            }
            source
                .ids
                .push(interner.add(END_OF_SENTENCE, Some(SOURCE))?);
            source.offsets.push(source.ids.len());
        }
        for special in [UNK, BOS, PAD] {
            interner.add(special, None)?;
        }

        // Target types by target count, then source-only types by source count, then the
        // specials (both counts 0) in the order added; ties by provisional id = first occurrence.
        let counts = &interner.counts;
        let key = |p: usize| match counts[p] {
            [_, t] if t > 0 => (0u8, Reverse(t), p),
            [s, _] if s > 0 => (1, Reverse(s), p),
            _ => (2, Reverse(0), p),
        };
        let mut order: Vec<usize> = (0..interner.types.len()).collect();
        order.sort_unstable_by_key(|&p| key(p));
        let mut rank_of = vec![0u32; order.len()];
        for (rank, &p) in order.iter().enumerate() {
            rank_of[p] = rank as u32;
        }
        for id in source.ids.iter_mut().chain(target.ids.iter_mut()) {
            *id = rank_of[*id as usize];
        }
        let tokens: Vec<String> = order
            .iter()
            .map(|&p| interner.types[p].to_owned())
            .collect();
        let source_counts: Vec<u64> = order.iter().map(|&p| counts[p][SOURCE]).collect();
        let target_counts: Vec<u64> = order.iter().map(|&p| counts[p][TARGET]).collect();
        let index: FxHashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let target_types = target_counts.iter().filter(|&&c| c > 0).count();
        let source_only_types = (target_types..tokens.len())
            .filter(|&i| source_counts[i] > 0)
            .count();
        let id = |t: &str| index[t]; // all four were added above
        let vocab = Self {
            pad: id(PAD),
            bos: id(BOS),
            eos: id(END_OF_SENTENCE),
            unk: id(UNK),
            tokens,
            index,
            source_counts,
            target_counts,
            target_types,
            source_only_types,
        };

        let source_types = vocab.source_counts.iter().filter(|&&c| c > 0).count();
        source.stats = SideStats {
            words: source.ids.len() - pairs,
            tokens: source.ids.len(),
            types: source_types - 1, // </s>
            unk: vocab.source_counts[vocab.unk as usize] as usize,
            oov_types: 0,
            oov_tokens: 0,
        };
        target.stats = SideStats {
            words: target.ids.len(),
            tokens: target.ids.len() + pairs,
            types: target_types - 1, // </s>
            unk: vocab.target_counts[vocab.unk as usize] as usize,
            oov_types: 0,
            oov_tokens: 0,
        };
        Ok((vocab, Encoded { source, target }))
    }

    /// Encodes held-out pairs: words absent from the vocabulary become `<unk>`, counted per side.
    pub(super) fn encode(&self, paired: &Paired<'_>) -> Result<Encoded, DataError> {
        Ok(Encoded {
            source: self.encode_side(&paired.source, &paired.lines, paired.source_path, true)?,
            target: self.encode_side(&paired.target, &paired.lines, paired.target_path, false)?,
        })
    }

    fn encode_side(
        &self,
        lines: &[&str],
        numbers: &[usize],
        path: &Path,
        end: bool,
    ) -> Result<SideIds, DataError> {
        let mut side = SideIds::with_capacity(lines.len());
        let mut seen: FxHashSet<&str> = FxHashSet::default();
        let mut oov: FxHashSet<&str> = FxHashSet::default();
        for (line, &number) in lines.iter().zip(numbers) {
            for w in words(line) {
                check_reserved(w, path, number)?;
                side.stats.words += 1;
                seen.insert(w);
                let id = match self.index.get(w) {
                    Some(&id) => id,
                    None => {
                        side.stats.oov_tokens += 1;
                        oov.insert(w);
                        self.unk
                    }
                };
                side.ids.push(id);
            }
            if end {
                side.ids.push(self.eos);
            }
            side.offsets.push(side.ids.len());
        }
        side.stats.tokens = side.stats.words + lines.len();
        side.stats.types = seen.len();
        side.stats.oov_types = oov.len();
        side.stats.unk = side.ids.iter().filter(|&&id| id == self.unk).count();
        Ok(side)
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Tokens in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn id(&self, token: &str) -> Option<u32> {
        self.index.get(token).copied()
    }

    /// Target-side training counts in id order (`</s>`: one per pair; non-increasing over
    /// `0..target_types()`, 0 after).
    pub fn target_counts(&self) -> &[u64] {
        &self.target_counts
    }

    /// Source-side training counts in id order (`</s>`: one per pair).
    pub fn source_counts(&self) -> &[u64] {
        &self.source_counts
    }

    /// Number of types on the target side of train, `</s>` included: ids `0..target_types()`.
    pub fn target_types(&self) -> usize {
        self.target_types
    }

    /// Number of types only on the source side of train: the ids right after the target types.
    pub fn source_only_types(&self) -> usize {
        self.source_only_types
    }

    /// Where `id` occurs in the training split.
    pub fn language(&self, id: u32) -> Language {
        let i = id as usize;
        match (self.source_counts[i] > 0, self.target_counts[i] > 0) {
            (true, true) => Language::Both,
            (false, true) => Language::Target,
            (true, false) => Language::Source,
            (false, false) => Language::Special,
        }
    }

    pub fn pad(&self) -> u32 {
        self.pad
    }

    pub fn bos(&self) -> u32 {
        self.bos
    }

    pub fn eos(&self) -> u32 {
        self.eos
    }

    pub fn unk(&self) -> u32 {
        self.unk
    }
}

/// The four groups of a translation vocabulary, plus the special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MtGroup {
    Frequent,
    Medium,
    Rare,
    /// Types never on the target side of train: no PPL, no Uniq; every embedding measure.
    SourceOnly,
    /// `<s>`, `<pad>` and an `<unk>` no training text holds: in no group of methods.md §5.
    Special,
}

impl MtGroup {
    pub const ALL: [MtGroup; 5] = [
        MtGroup::Frequent,
        MtGroup::Medium,
        MtGroup::Rare,
        MtGroup::SourceOnly,
        MtGroup::Special,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MtGroup::Frequent => "frequent",
            MtGroup::Medium => "medium",
            MtGroup::Rare => "rare",
            MtGroup::SourceOnly => "source-only",
            MtGroup::Special => "special",
        }
    }

    /// The frequency group of a target-side type; `None` for source-only and special tokens.
    pub fn frequency_group(self) -> Option<Group> {
        match self {
            MtGroup::Frequent => Some(Group::Frequent),
            MtGroup::Medium => Some(Group::Medium),
            MtGroup::Rare => Some(Group::Rare),
            MtGroup::SourceOnly | MtGroup::Special => None,
        }
    }
}

impl From<Group> for MtGroup {
    fn from(g: Group) -> Self {
        match g {
            Group::Frequent => MtGroup::Frequent,
            Group::Medium => MtGroup::Medium,
            Group::Rare => MtGroup::Rare,
        }
    }
}

impl std::fmt::Display for MtGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Frequent / Medium / Rare over the target-side types (ids `0..target_types()`, the word-level
/// [`FrequencyGroups`] with its floor()-ed boundaries, fractions of the target types), then
/// Source-only, then the specials: five contiguous id ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtGroups {
    target: FrequencyGroups,
    source_only_end: usize,
    len: usize,
}

impl MtGroups {
    pub fn new(vocab: &ParallelVocab, bounds: GroupBounds) -> Self {
        Self {
            target: FrequencyGroups::new(vocab.target_types(), bounds),
            source_only_end: vocab.target_types() + vocab.source_only_types(),
            len: vocab.len(),
        }
    }

    /// The three frequency groups over the target-side types alone.
    pub fn target(&self) -> &FrequencyGroups {
        &self.target
    }

    /// The vocabulary size.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn range(&self, group: MtGroup) -> Range<usize> {
        match group.frequency_group() {
            Some(g) => self.target.range(g),
            None if group == MtGroup::SourceOnly => self.target.len()..self.source_only_end,
            None => self.source_only_end..self.len,
        }
    }

    pub fn size(&self, group: MtGroup) -> usize {
        self.range(group).len()
    }

    pub fn group_of(&self, id: u32) -> MtGroup {
        let i = id as usize;
        if i < self.target.len() {
            self.target.group_of(id).into()
        } else if i < self.source_only_end {
            MtGroup::SourceOnly
        } else {
            MtGroup::Special
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::{OneSidedEmpty, ParallelCorpus, ParallelOptions};
    use crate::{Split, SplitText};

    fn text(name: &str, s: &str) -> SplitText {
        SplitText::from_bytes(name.into(), s.as_bytes().to_vec(), 1 << 20).expect("valid")
    }

    fn corpus(train: (&str, &str), bounds: GroupBounds) -> ParallelCorpus {
        let held = || (text("v.src", "a\n"), text("v.tgt", "x\n"));
        ParallelCorpus::from_texts(
            "tiny".into(),
            "src",
            "tgt",
            [
                (text("train.src", train.0), text("train.tgt", train.1)),
                held(),
                held(),
            ],
            &ParallelOptions {
                groups: bounds,
                one_sided_empty: OneSidedEmpty::Refuse,
                ..ParallelOptions::default()
            },
        )
        .expect("builds")
    }

    /// The row order and the groups of a hand-made corpus, worked out by hand:
    ///
    /// target text `x y x` / `z x` / `w y q` / `y`, one `</s>` per line: x 3, y 3, </s> 4, z 1, w 1,
    /// q 1; first occurrences x, y, </s> (end of line 1), z, w, q. Order: </s> 4; x 3, y 3 (x
    /// first); z, w, q (1 each, in that order).
    ///
    /// source text `a b a` / `c a x` / `b d` / `e e e`: a 3, b 2, c 1, x 1 (also a target type),
    /// d 1, e 3, </s> 4. Source-only: a 3, e 3, b 2, c 1, d 1 (a before e: first occurrence; c
    /// before d).
    #[test]
    fn row_order_and_groups_computed_by_hand() {
        let c = corpus(
            ("a b a\nc a x\nb d\ne e e\n", "x y x\nz x\nw y q\ny\n"),
            GroupBounds::default(),
        );
        let v = c.vocab();
        assert_eq!(
            v.tokens(),
            [
                "</s>", "x", "y", "z", "w", "q", // target types
                "a", "e", "b", "c", "d", // source-only
                "<unk>", "<s>", "<pad>", // specials
            ]
        );
        assert_eq!(
            v.target_counts(),
            [4, 3, 3, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            v.source_counts(),
            [4, 1, 0, 0, 0, 0, 3, 3, 2, 1, 1, 0, 0, 0]
        );
        assert_eq!((v.target_types(), v.source_only_types()), (6, 5));
        assert_eq!((v.eos(), v.unk(), v.bos(), v.pad()), (0, 11, 12, 13));
        // Groups over the 6 target types: floor(0.3·6) = 1, floor(0.8·6) = 4.
        let g = c.groups();
        assert_eq!(g.range(MtGroup::Frequent), 0..1);
        assert_eq!(g.range(MtGroup::Medium), 1..4);
        assert_eq!(g.range(MtGroup::Rare), 4..6);
        assert_eq!(g.range(MtGroup::SourceOnly), 6..11);
        assert_eq!(g.range(MtGroup::Special), 11..14);
        let by_hand = [
            MtGroup::Frequent,
            MtGroup::Medium,
            MtGroup::Medium,
            MtGroup::Medium,
            MtGroup::Rare,
            MtGroup::Rare,
        ]
        .into_iter()
        .chain([MtGroup::SourceOnly; 5])
        .chain([MtGroup::Special; 3]);
        for (id, want) in by_hand.enumerate() {
            assert_eq!(g.group_of(id as u32), want, "id {id}");
        }
        let langs: Vec<Language> = (0..14).map(|i| v.language(i)).collect();
        use Language::{Both, Source, Special, Target};
        assert_eq!(
            langs,
            [
                Both, Both, Target, Target, Target, Target, Source, Source, Source, Source, Source,
                Special, Special, Special
            ]
        );
        // The encoded train pairs: source with </s>, target without.
        let t = c.split(Split::Train);
        assert_eq!(t.len(), 4);
        assert_eq!(t.source(1), [9, 6, 1, 0]); // c a x </s>
        assert_eq!(t.target(2), [4, 2, 5]); // w y q
        assert_eq!(t.target(3), [2]);
        let s = c.stats(Split::Train);
        assert_eq!(
            (s.source.words, s.source.tokens, s.source.types),
            (11, 15, 6)
        );
        assert_eq!(
            (s.target.words, s.target.tokens, s.target.types),
            (9, 13, 5)
        );
    }

    /// The text's own `<unk>` is an ordinary type: on the target side it is ranked and grouped.
    #[test]
    fn a_corpus_unk_is_an_ordinary_type() {
        let c = corpus(("a\nb\n", "<unk> y\n<unk>\n"), GroupBounds::default());
        let v = c.vocab();
        assert_eq!(v.tokens(), ["<unk>", "</s>", "y", "a", "b", "<s>", "<pad>"]);
        assert_eq!(v.unk(), 0);
        // Three target types: floor(0.3·3) = 0, so Frequent is empty and <unk> leads Medium.
        assert_eq!(c.groups().group_of(0), MtGroup::Medium);
        assert_eq!(c.groups().size(MtGroup::Frequent), 0);
        assert_eq!(c.stats(Split::Train).target.unk, 2);
    }
}
