//! Parallel corpora for translation (methods.md §5): two files per split, line `i` of the source
//! file translating line `i` of the target file, read into one joint vocabulary.
//!
//! Layout: a folder with `train.XX`/`train.YY`, `valid.XX`/`valid.YY`, `test.XX`/`test.YY` for two
//! language codes `XX`, `YY` (`[a-z_-]{1,16}`): Multi30k's files and what fairseq's IWSLT/WMT
//! preparation scripts write. Which side is the source is never guessed: `en-de` and `de-en` are
//! different experiments (different target groups, different BLEU), so the loader asks for the
//! direction even when the folder holds exactly two codes.
//!
//! Tokens are whitespace-split words, as in §1. The source sentence ends with `</s>`; the decoder
//! reads `<s>` + target and predicts target + `</s>` (fairseq's convention); `<pad>` fills batches
//! and is never scored. The vocabulary, its row order and the groups are in [`ParallelVocab`] and
//! [`MtGroups`]; token-based batching (fairseq's `--max-tokens`) in [`TokenBatcher`].
//!
//! Bad input is refused with a one-line error naming the file(s): the two sides of a split with
//! different line counts, a line empty on one side only (by default; [`OneSidedEmpty`]), a side
//! missing, a file that is not UTF-8 text or has an over-long line (the limits of the word-level
//! loader, [`DEFAULT_MAX_LINE_BYTES`]), a word the vocabulary reserves (`<pad>`, `<s>`, `</s>`).
//! A line empty on both sides carries no pair: it is skipped and counted.

mod batching;
mod report;
mod vocab;

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::text::{DEFAULT_MAX_LINE_BYTES, SplitText, words};
use super::{DataError, GroupBounds, Split};

pub use batching::{LongPairs, PairBatch, TokenBatchOptions, TokenBatcher};
pub use report::{GroupReport, LengthSummary, ParallelReport, SideReport, SplitReport};
pub use vocab::{BOS, END_OF_SENTENCE, Language, MtGroup, MtGroups, PAD, ParallelVocab};

/// Longest language code accepted in a file name (`train.CODE`).
const MAX_CODE_LEN: usize = 16;
/// File-name endings that look like language codes but are not: the word-level layout's
/// `train.txt` (a folder with `train.txt` and `train.en` is not a parallel corpus in `txt`).
const NOT_LANGUAGE_CODES: [&str; 1] = ["txt"];
/// How many line numbers a one-sided-empty error lists.
const LINES_LISTED: usize = 5;

/// What to do with a line that is empty (no words) on one side of a split and not on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OneSidedEmpty {
    /// Refuse the corpus (the default): the two files are most likely misaligned from that line on
    /// (a sentence split in two on one side, a line lost in an export), and every pair after it
    /// would teach the model a wrong translation. Line counts alone do not catch a deletion
    /// balanced by an insertion.
    #[default]
    Refuse,
    /// Drop such lines and count them ([`ParallelSplitStats::skipped_one_sided`]): for corpora
    /// known to hold untranslated lines (web-crawled data).
    Skip,
}

/// Options that change how a parallel corpus is read.
#[derive(Debug, Clone, PartialEq)]
pub struct ParallelOptions {
    /// Frequent / Medium / Rare over the target-side types (methods.md §5).
    pub groups: GroupBounds,
    /// Longest line accepted in any of the six files (the word-level loader's bound).
    pub max_line_bytes: usize,
    pub one_sided_empty: OneSidedEmpty,
    /// Most ids the joint vocabulary may have, special tokens included. The default, `u32::MAX`,
    /// is what a `u32` id addresses (as in [`crate::VocabBuilder`]); lower caps exist for tests.
    pub max_types: usize,
}

impl Default for ParallelOptions {
    fn default() -> Self {
        Self {
            groups: GroupBounds::default(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            one_sided_empty: OneSidedEmpty::Refuse,
            max_types: u32::MAX as usize,
        }
    }
}

/// Counts for one side of one split.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SideStats {
    /// Whitespace-separated words of the kept pairs.
    pub words: usize,
    /// Words plus one `</s>` per pair: the encoder's input length (source) or the decoder's output
    /// length (target), summed.
    pub tokens: usize,
    /// Distinct words as written (before unknown words become `<unk>`).
    pub types: usize,
    /// `<unk>` ids after mapping: the text's own `<unk>` plus words absent from the vocabulary.
    pub unk: usize,
    /// Words absent from the vocabulary (0 for train), as types and as tokens.
    pub oov_types: usize,
    pub oov_tokens: usize,
}

/// Counts for one split. `lines` counts the lines of each file (equal on both sides);
/// `pairs = lines − skipped_empty − skipped_one_sided`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ParallelSplitStats {
    pub lines: usize,
    pub pairs: usize,
    /// Lines empty on both sides (no pair to learn from: skipped, always).
    pub skipped_empty: usize,
    /// Lines empty on one side only, skipped under [`OneSidedEmpty::Skip`] (else an error).
    pub skipped_one_sided: usize,
    pub source: SideStats,
    pub target: SideStats,
}

/// One split's sentence pairs, encoded. Pair `i`'s source ends with `</s>`; its target has no
/// `</s>` and no `<s>` (the batcher adds them: decoder input `<s>` + target, output target + `</s>`).
#[derive(Debug, Clone)]
pub struct ParallelSplit {
    split: Split,
    source_path: PathBuf,
    target_path: PathBuf,
    source: Vec<u32>,
    source_offsets: Vec<usize>,
    target: Vec<u32>,
    target_offsets: Vec<usize>,
    lines: Vec<usize>,
    references: Vec<String>,
}

impl ParallelSplit {
    pub fn split(&self) -> Split {
        self.split
    }

    /// The files the split was read from (source, target); for generated corpora, the names
    /// used in messages.
    pub fn paths(&self) -> (&Path, &Path) {
        (&self.source_path, &self.target_path)
    }

    /// Number of sentence pairs.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Source ids of pair `i`, ending with `</s>`.
    pub fn source(&self, i: usize) -> &[u32] {
        &self.source[self.source_offsets[i]..self.source_offsets[i + 1]]
    }

    /// Target ids of pair `i` (the words only).
    pub fn target(&self, i: usize) -> &[u32] {
        &self.target[self.target_offsets[i]..self.target_offsets[i + 1]]
    }

    /// Source length of pair `i` in tokens, `</s>` included.
    pub fn source_len(&self, i: usize) -> usize {
        self.source_offsets[i + 1] - self.source_offsets[i]
    }

    /// Target length of pair `i` in words (the decoder's sequences are one longer).
    pub fn target_len(&self, i: usize) -> usize {
        self.target_offsets[i + 1] - self.target_offsets[i]
    }

    /// The line (from 1) of both files that pair `i` came from: lines skipped as empty make it
    /// differ from `i + 1`.
    pub fn line(&self, i: usize) -> usize {
        self.lines[i]
    }

    /// Pair `i`'s target sentence as written (words joined by one space), for BLEU against the
    /// real reference rather than its `<unk>`-mapped ids. Kept for valid and test only (`None`
    /// for train, whose text would double the corpus's memory for nothing).
    pub fn reference(&self, i: usize) -> Option<&str> {
        self.references.get(i).map(String::as_str)
    }
}

/// A loaded parallel corpus: three splits of encoded sentence pairs over one joint vocabulary.
#[derive(Debug, Clone)]
pub struct ParallelCorpus {
    name: String,
    source_code: String,
    target_code: String,
    vocab: ParallelVocab,
    groups: MtGroups,
    group_bounds: GroupBounds,
    splits: [ParallelSplit; 3],
    stats: [ParallelSplitStats; 3],
}

/// One split's lines paired up: the kept pairs (line number, source line, target line).
#[derive(Debug)]
struct Paired<'a> {
    split: Split,
    source_path: &'a Path,
    target_path: &'a Path,
    lines: Vec<usize>,
    source: Vec<&'a str>,
    target: Vec<&'a str>,
    stats: ParallelSplitStats,
}

impl ParallelCorpus {
    /// The language codes of `dir`: every `CODE` with a `train.CODE`, `valid.CODE` or `test.CODE`
    /// file, sorted. Two or more make the folder a parallel corpus; none, and the caller can try
    /// the word-level layout. A code with some of its files only still counts, so that
    /// [`Self::load`], which knows the direction, can name the file that is missing.
    pub fn detect(dir: &Path) -> Result<Vec<String>, DataError> {
        if !dir.exists() {
            return Err(DataError::ParallelDir {
                dir: dir.to_path_buf(),
                reason: "does not exist",
            });
        }
        if !dir.is_dir() {
            return Err(DataError::ParallelDir {
                dir: dir.to_path_buf(),
                reason: "is not a directory",
            });
        }
        let io = |source| DataError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut codes = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(code) = Split::ALL
                .iter()
                .find_map(|s| name.strip_prefix(s.name())?.strip_prefix('.'))
                && is_language_code(code)
                && entry.path().is_file()
            {
                codes.insert(code.to_owned());
            }
        }
        Ok(codes.into_iter().collect())
    }

    /// The `--pair` values a folder with these codes accepts (`src-tgt`, every ordered pair).
    pub fn pair_choices(codes: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for s in codes {
            for t in codes.iter().filter(|t| *t != s) {
                out.push(format!("{s}-{t}"));
            }
        }
        out
    }

    /// Loads `dir` in the direction `pair`, spelled `src-tgt` (`en-de`: English source, German
    /// target). `None` is an error even for a folder with two codes: the message lists the codes
    /// and both `--pair` values, because the direction decides the target groups and the BLEU.
    pub fn load(
        dir: &Path,
        pair: Option<&str>,
        options: &ParallelOptions,
    ) -> Result<Self, DataError> {
        let codes = Self::detect(dir)?;
        let (source, target) = resolve_pair(dir, &codes, pair)?;
        let texts = read_files(dir, &source, &target, options.max_line_bytes)?;
        Self::from_texts(dir.display().to_string(), &source, &target, texts, options)
    }

    /// Builds the corpus from validated texts, `(source, target)` for train, valid and test.
    ///
    /// A line empty on one side only is refused by default ([`OneSidedEmpty::Refuse`]); a line empty
    /// on both sides is skipped and counted. A split left without pairs is an error.
    pub fn from_texts(
        name: String,
        source_code: &str,
        target_code: &str,
        texts: [(SplitText, SplitText); 3],
        options: &ParallelOptions,
    ) -> Result<Self, DataError> {
        let [train, valid, test] = &texts;
        let train = pair_lines(Split::Train, train, options.one_sided_empty)?;
        let valid = pair_lines(Split::Valid, valid, options.one_sided_empty)?;
        let test = pair_lines(Split::Test, test, options.one_sided_empty)?;
        let (vocab, train_ids) = ParallelVocab::build(&train, options.max_types)?;
        let valid_ids = vocab.encode(&valid)?;
        let test_ids = vocab.encode(&test)?;
        let groups = MtGroups::new(&vocab, options.groups);
        let mut stats = [ParallelSplitStats::default(); 3];
        let splits =
            [(train, train_ids), (valid, valid_ids), (test, test_ids)].map(|(paired, encoded)| {
                let mut s = paired.stats;
                s.source = encoded.source.stats;
                s.target = encoded.target.stats;
                stats[paired.split as usize] = s;
                let references = if paired.split == Split::Train {
                    Vec::new()
                } else {
                    paired
                        .target
                        .iter()
                        .map(|line| words(line).collect::<Vec<_>>().join(" "))
                        .collect()
                };
                ParallelSplit {
                    split: paired.split,
                    source_path: paired.source_path.to_path_buf(),
                    target_path: paired.target_path.to_path_buf(),
                    source: encoded.source.ids,
                    source_offsets: encoded.source.offsets,
                    target: encoded.target.ids,
                    target_offsets: encoded.target.offsets,
                    lines: paired.lines,
                    references,
                }
            });
        Ok(Self {
            name,
            source_code: source_code.to_owned(),
            target_code: target_code.to_owned(),
            vocab,
            groups,
            group_bounds: options.groups,
            splits,
            stats,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source language's code (`en` of `en-de`).
    pub fn source_code(&self) -> &str {
        &self.source_code
    }

    /// The target language's code (`de` of `en-de`).
    pub fn target_code(&self) -> &str {
        &self.target_code
    }

    /// `src-tgt`, as `--pair` spells it.
    pub fn pair(&self) -> String {
        format!("{}-{}", self.source_code, self.target_code)
    }

    pub fn vocab(&self) -> &ParallelVocab {
        &self.vocab
    }

    pub fn groups(&self) -> &MtGroups {
        &self.groups
    }

    pub fn group_bounds(&self) -> GroupBounds {
        self.group_bounds
    }

    pub fn split(&self, split: Split) -> &ParallelSplit {
        &self.splits[split as usize]
    }

    pub fn stats(&self, split: Split) -> &ParallelSplitStats {
        &self.stats[split as usize]
    }
}

/// `[a-z_-]{1,16}`, and not a word-level file ending.
fn is_language_code(code: &str) -> bool {
    (1..=MAX_CODE_LEN).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-')
        && !NOT_LANGUAGE_CODES.contains(&code)
}

/// The direction `pair` names among `codes`: split at a `-` into two different codes found in the
/// folder (codes may hold `-` themselves, so every `-` is tried; exactly one split must fit).
fn resolve_pair(
    dir: &Path,
    codes: &[String],
    pair: Option<&str>,
) -> Result<(String, String), DataError> {
    let listed = || codes.join(", ");
    if codes.len() < 2 {
        return Err(DataError::NotParallel {
            dir: dir.to_path_buf(),
            found: if codes.is_empty() {
                "none".to_owned()
            } else {
                listed()
            },
        });
    }
    let Some(pair) = pair else {
        let choices = if codes.len() == 2 {
            format!(
                "--pair {0}-{1} or --pair {1}-{0}",
                codes[0].as_str(),
                codes[1].as_str()
            )
        } else {
            format!(
                "--pair SRC-TGT, two of them (e.g. --pair {}-{})",
                codes[0], codes[1]
            )
        };
        return Err(DataError::PairNotGiven {
            dir: dir.to_path_buf(),
            codes: listed(),
            choices,
        });
    };
    let found = |c: &str| codes.iter().any(|k| k == c);
    let fits: Vec<(&str, &str)> = pair
        .match_indices('-')
        .map(|(i, _)| (&pair[..i], &pair[i + 1..]))
        .filter(|&(s, t)| s != t && found(s) && found(t))
        .collect();
    match fits.as_slice() {
        [(s, t)] => Ok(((*s).to_owned(), (*t).to_owned())),
        [] => Err(DataError::UnknownPair {
            dir: dir.to_path_buf(),
            pair: pair.to_owned(),
            reason: "expected SRC-TGT, two different language codes of the folder",
            codes: listed(),
        }),
        _ => Err(DataError::UnknownPair {
            dir: dir.to_path_buf(),
            pair: pair.to_owned(),
            reason: "ambiguous: it splits into two of the codes in more than one way",
            codes: listed(),
        }),
    }
}

/// Checks that all six files exist (naming the first one missing), then reads and validates them,
/// six at once; the first error in the order train, valid, test (source before target) wins.
fn read_files(
    dir: &Path,
    source: &str,
    target: &str,
    max_line_bytes: usize,
) -> Result<[(SplitText, SplitText); 3], DataError> {
    let paths = Split::ALL.map(|s| {
        (
            dir.join(format!("{s}.{source}")),
            dir.join(format!("{s}.{target}")),
        )
    });
    for (split, (s, t)) in Split::ALL.into_iter().zip(&paths) {
        let missing = |missing: &Path, other: &Path, note| DataError::MissingParallelFile {
            split,
            missing: missing.to_path_buf(),
            other: other.to_path_buf(),
            note,
        };
        match (s.is_file(), t.is_file()) {
            (true, true) => {}
            (false, true) => return Err(missing(s, t, "is there")),
            (false, false) => return Err(missing(s, t, "is missing too")),
            (true, false) => return Err(missing(t, s, "is there")),
        }
    }
    let read: Vec<Result<SplitText, DataError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = paths
            .iter()
            .flat_map(|(s, t)| [s, t])
            .map(|p| scope.spawn(move || SplitText::read(p, max_line_bytes)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut read = read.into_iter();
    let mut next = || read.next().expect("six files were read");
    Ok([(next()?, next()?), (next()?, next()?), (next()?, next()?)])
}

/// Pairs line `i` of the source with line `i` of the target: equal line counts, lines empty on
/// both sides skipped, lines empty on one side refused or skipped (`policy`).
fn pair_lines<'a>(
    split: Split,
    (source, target): &'a (SplitText, SplitText),
    policy: OneSidedEmpty,
) -> Result<Paired<'a>, DataError> {
    let s: Vec<&str> = source.lines().collect();
    let t: Vec<&str> = target.lines().collect();
    if s.len() != t.len() {
        return Err(DataError::LineCountMismatch {
            split,
            source_path: source.path().to_path_buf(),
            source_lines: s.len(),
            target_path: target.path().to_path_buf(),
            target_lines: t.len(),
        });
    }
    let mut paired = Paired {
        split,
        source_path: source.path(),
        target_path: target.path(),
        lines: Vec::with_capacity(s.len()),
        source: Vec::with_capacity(s.len()),
        target: Vec::with_capacity(s.len()),
        stats: ParallelSplitStats {
            lines: s.len(),
            ..ParallelSplitStats::default()
        },
    };
    let mut one_sided: Vec<(usize, &Path)> = Vec::new();
    for (i, (&sl, &tl)) in s.iter().zip(&t).enumerate() {
        let line = i + 1;
        match (words(sl).next().is_none(), words(tl).next().is_none()) {
            (false, false) => {
                paired.lines.push(line);
                paired.source.push(sl);
                paired.target.push(tl);
            }
            (true, true) => paired.stats.skipped_empty += 1,
            (true, false) => one_sided.push((line, source.path())),
            (false, true) => one_sided.push((line, target.path())),
        }
    }
    paired.stats.skipped_one_sided = one_sided.len();
    if !one_sided.is_empty() && policy == OneSidedEmpty::Refuse {
        let name = |p: &Path| {
            p.file_name()
                .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
        };
        let mut first: Vec<String> = one_sided
            .iter()
            .take(LINES_LISTED)
            .map(|&(line, empty)| format!("line {line}, empty in {}", name(empty)))
            .collect();
        if one_sided.len() > LINES_LISTED {
            first.push("…".to_owned());
        }
        return Err(DataError::OneSidedEmpty {
            split,
            source_path: source.path().to_path_buf(),
            target_path: target.path().to_path_buf(),
            count: one_sided.len(),
            first: first.join("; "),
        });
    }
    paired.stats.pairs = paired.lines.len();
    if paired.lines.is_empty() {
        return Err(DataError::EmptySplit {
            path: source.path().to_path_buf(),
            split,
        });
    }
    Ok(paired)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn write(dir: &Path, files: &[(&str, &[u8])]) {
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("write fixture");
        }
    }

    /// A valid corpus in `en`/`de`, with `overrides` replacing or adding files.
    fn corpus_dir(overrides: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            &[
                ("train.en", b"a b\nc d\n"),
                ("train.de", b"x y\nz w\n"),
                ("valid.en", b"a\n"),
                ("valid.de", b"x\n"),
                ("test.en", b"c\n"),
                ("test.de", b"z\n"),
            ],
        );
        write(dir.path(), overrides);
        dir
    }

    fn load_err(dir: &Path, pair: Option<&str>) -> String {
        let err = ParallelCorpus::load(dir, pair, &ParallelOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "one line: {msg}");
        msg
    }

    #[test]
    fn detection_finds_the_codes_and_ignores_other_files() {
        let dir = corpus_dir(&[
            ("train.txt", b"lm\n"),
            ("train.EN", b"upper\n"),
            ("README.md", b"x"),
            ("train.pt-br_x", b"a\n"),
        ]);
        std::fs::create_dir(dir.path().join("train.fr")).expect("dir");
        let codes = ParallelCorpus::detect(dir.path()).expect("detects");
        assert_eq!(codes, ["de", "en", "pt-br_x"]);
        assert_eq!(
            ParallelCorpus::pair_choices(&codes[..2]),
            ["de-en", "en-de"]
        );
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(
            ParallelCorpus::detect(empty.path())
                .expect("empty")
                .is_empty()
        );
        let missing = empty.path().join("nope");
        let msg = ParallelCorpus::detect(&missing).unwrap_err().to_string();
        assert!(
            msg.contains("nope") && msg.contains("does not exist"),
            "{msg}"
        );
    }

    #[test]
    fn the_direction_must_be_given_and_exist() {
        let dir = corpus_dir(&[]);
        let msg = load_err(dir.path(), None);
        assert!(
            msg.contains("de, en") && msg.contains("--pair de-en or --pair en-de"),
            "{msg}"
        );
        for bad in ["en-fr", "en", "en-en", "de_en"] {
            let msg = load_err(dir.path(), Some(bad));
            assert!(
                msg.contains(&format!("--pair {bad}")) && msg.contains("de, en"),
                "{msg}"
            );
        }
        let one = tempfile::tempdir().expect("tempdir");
        write(one.path(), &[("train.en", b"a\n")]);
        let msg = load_err(one.path(), Some("en-de"));
        assert!(
            msg.contains("no parallel corpus") && msg.contains("codes found: en"),
            "{msg}"
        );
        // Both directions load, with the sides swapped.
        let opts = ParallelOptions::default();
        let ende = ParallelCorpus::load(dir.path(), Some("en-de"), &opts).expect("en-de");
        let deen = ParallelCorpus::load(dir.path(), Some("de-en"), &opts).expect("de-en");
        assert_eq!((ende.source_code(), ende.target_code()), ("en", "de"));
        assert_eq!(deen.pair(), "de-en");
        // German ranks first in en-de (after </s>, with count 2), English ranks first in de-en.
        assert_eq!(ende.vocab().tokens()[..2], ["</s>", "x"]);
        assert_eq!(deen.vocab().tokens()[..2], ["</s>", "a"]);
        assert_eq!(deen.vocab().token(5), Some("x"));
    }

    #[test]
    fn codes_with_dashes_resolve_when_unambiguous() {
        let dir = corpus_dir(&[
            ("train.pt-br", b"p q\nr s\n"),
            ("valid.pt-br", b"p\n"),
            ("test.pt-br", b"r\n"),
        ]);
        let c = ParallelCorpus::load(dir.path(), Some("pt-br-en"), &ParallelOptions::default())
            .expect("pt-br-en");
        assert_eq!((c.source_code(), c.target_code()), ("pt-br", "en"));
        let msg = load_err(dir.path(), None);
        assert!(msg.contains("--pair SRC-TGT"), "{msg}");
    }

    #[test]
    fn a_missing_side_names_the_file() {
        let dir = corpus_dir(&[]);
        std::fs::remove_file(dir.path().join("train.de")).expect("rm");
        // de still counts as a code (valid.de, test.de): the direction is asked for, then the
        // missing file named.
        let msg = load_err(dir.path(), None);
        assert!(msg.contains("--pair de-en or --pair en-de"), "{msg}");
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("train.de not found") && msg.contains("train.en is there"),
            "{msg}"
        );
        let dir = corpus_dir(&[]);
        std::fs::remove_file(dir.path().join("valid.de")).expect("rm");
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("valid.de not found")
                && msg.contains("valid split")
                && msg.contains("valid.en is there"),
            "{msg}"
        );
        std::fs::remove_file(dir.path().join("valid.en")).expect("rm");
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("valid.en not found") && msg.contains("valid.de is missing too"),
            "{msg}"
        );
    }

    #[test]
    fn unequal_line_counts_name_both_files_and_counts() {
        let dir = corpus_dir(&[("test.de", b"z\nextra\n"), ("test.en", b"c")]);
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("test.en has 1 lines but")
                && msg.contains("test.de has 2")
                && msg.contains("test split"),
            "{msg}"
        );
    }

    #[test]
    fn one_sided_empty_lines_are_refused_by_default_and_skipped_on_request() {
        let train_en: &[u8] = b"a\n\nb\nc\n \n\nd\ne\nf\ng\nh\ni\n";
        let train_de: &[u8] = b"x\ny\n\nz\n\n\n\nv\nu\nt\ns\nr\n";
        let dir = corpus_dir(&[("train.en", train_en), ("train.de", train_de)]);
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("train.en / ")
                && msg.contains("3 lines of the train split are empty on one side only")
                && msg.contains("line 2, empty in train.en; line 3, empty in train.de; line 7, empty in train.de"),
            "{msg}"
        );
        // Line 5 (a space) and 6 (nothing) are empty on both sides: skipped and counted.
        let opts = ParallelOptions {
            one_sided_empty: OneSidedEmpty::Skip,
            ..ParallelOptions::default()
        };
        let c = ParallelCorpus::load(dir.path(), Some("en-de"), &opts).expect("skips");
        let s = c.stats(Split::Train);
        assert_eq!(
            (s.lines, s.pairs, s.skipped_empty, s.skipped_one_sided),
            (12, 7, 2, 3)
        );
        let train = c.split(Split::Train);
        assert_eq!(
            (0..train.len()).map(|i| train.line(i)).collect::<Vec<_>>(),
            [1, 4, 8, 9, 10, 11, 12]
        );
        // More than five: the first five are listed, then an ellipsis.
        let dir = corpus_dir(&[
            ("train.en", b"a\n\n\n\n\n\n\nb\n"),
            ("train.de", b"x\ny\ny\ny\ny\ny\ny\nz\n"),
        ]);
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("6 lines") && msg.contains("line 6, empty in train.en; …"),
            "{msg}"
        );
    }

    #[test]
    fn a_split_without_pairs_is_an_error() {
        let dir = corpus_dir(&[("valid.en", b"\n \n"), ("valid.de", b"\n\n")]);
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(
            msg.contains("valid.en") && msg.contains("valid split is empty"),
            "{msg}"
        );
    }

    #[test]
    fn invalid_utf8_and_long_lines_name_the_file_and_line() {
        let dir = corpus_dir(&[("valid.de", b"x\n\xff\n"), ("valid.en", b"a\nb\n")]);
        let msg = load_err(dir.path(), Some("en-de"));
        assert!(msg.contains("valid.de: invalid UTF-8 at line 2"), "{msg}");
        let dir = corpus_dir(&[("train.de", b"x y\nz w w w w w w w\n")]);
        let opts = ParallelOptions {
            max_line_bytes: 8,
            ..ParallelOptions::default()
        };
        let msg = ParallelCorpus::load(dir.path(), Some("en-de"), &opts)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("train.de: line 2 is 15 bytes long"), "{msg}");
    }

    #[test]
    fn reserved_tokens_are_refused_with_their_line() {
        for (file, bytes, token) in [
            ("train.en", &b"a b\nc </s>\n"[..], "</s>"),
            ("test.de", &b"<pad>\n"[..], "<pad>"),
            ("valid.en", &b"<s> a\n"[..], "<s>"),
        ] {
            let dir = corpus_dir(&[(file, bytes)]);
            let msg = load_err(dir.path(), Some("en-de"));
            let line = if file == "train.en" { 2 } else { 1 };
            assert!(
                msg.contains(&format!("{file}: line {line} contains `{token}`")),
                "{msg}"
            );
        }
    }

    #[test]
    fn the_vocabulary_cap_is_an_error() {
        // x y z w (target) + </s> + a b c d (source-only) + <unk> <s> <pad> = 12 ids.
        let dir = corpus_dir(&[]);
        for (cap, ok) in [(11, false), (12, true)] {
            let opts = ParallelOptions {
                max_types: cap,
                ..ParallelOptions::default()
            };
            let r = ParallelCorpus::load(dir.path(), Some("en-de"), &opts);
            assert_eq!(r.is_ok(), ok, "cap {cap}");
            if let Err(e) = r {
                assert!(matches!(e, DataError::VocabTooLarge { limit: 11 }), "{e}");
            }
        }
    }

    #[test]
    fn held_out_unknown_words_are_counted_per_side() {
        let dir = corpus_dir(&[
            ("valid.en", b"a q q\nr c\n"),
            ("valid.de", b"x y\nnew z <unk>\n"),
        ]);
        let c = ParallelCorpus::load(dir.path(), Some("en-de"), &ParallelOptions::default())
            .expect("loads");
        let s = c.stats(Split::Valid);
        assert_eq!(
            (s.source.unk, s.source.oov_tokens, s.source.oov_types),
            (3, 3, 2)
        );
        // `<unk>` written in the text is `<unk>` (as in the word-level vocabulary), not a word
        // out of the vocabulary.
        assert_eq!(
            (s.target.unk, s.target.oov_tokens, s.target.oov_types),
            (2, 1, 1)
        );
        assert_eq!((s.source.words, s.source.tokens, s.source.types), (5, 7, 4));
        assert_eq!((s.target.words, s.target.tokens, s.target.types), (5, 7, 5));
        let v = c.split(Split::Valid);
        let unk = c.vocab().unk();
        let eos = c.vocab().eos();
        assert_eq!(v.source(0), [c.vocab().id("a").expect("a"), unk, unk, eos]);
        assert_eq!(v.target(1)[0], unk);
        assert_eq!(v.reference(1), Some("new z <unk>"));
        assert_eq!(c.split(Split::Train).reference(0), None);
    }

    /// `$CONELAB_DATASETS/multi30k` (default `../shared/datasets`), or `None` with `SKIPPED:`
    /// printed; under `CI=true` a missing corpus fails the test instead.
    fn multi30k_dir() -> Option<PathBuf> {
        let root = std::env::var_os("CONELAB_DATASETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
            });
        let dir = root.join("multi30k");
        if dir.join("train.de").is_file() {
            return Some(dir);
        }
        let reason = format!(
            "{} not found (set CONELAB_DATASETS to the folder holding multi30k/)",
            dir.display()
        );
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("CI=true: {reason}");
        }
        println!("SKIPPED: {reason}");
        None
    }

    /// The counts of `datasets/multi30k/README.md` (lines, words and types per side and split),
    /// and the vocabulary and groups recomputed from the files with a plain `HashSet`.
    #[test]
    fn multi30k_counts_match_its_readme() {
        let Some(dir) = multi30k_dir() else { return };
        assert_eq!(ParallelCorpus::detect(&dir).expect("detects"), ["de", "en"]);
        let c =
            ParallelCorpus::load(&dir, Some("en-de"), &ParallelOptions::default()).expect("loads");
        // split: lines, words en, words de, types en, types de
        let readme = [
            (Split::Train, 29_000, 377_534, 360_706, 10_210, 18_722),
            (Split::Valid, 1_014, 13_308, 12_828, 1_964, 2_303),
            (Split::Test, 1_000, 12_968, 12_103, 1_898, 2_125),
        ];
        for (split, lines, words_en, words_de, types_en, types_de) in readme {
            let s = c.stats(split);
            assert_eq!(
                (s.lines, s.pairs, s.skipped_empty),
                (lines, lines, 0),
                "{split}"
            );
            assert_eq!(
                (s.source.words, s.target.words),
                (words_en, words_de),
                "{split}"
            );
            assert_eq!(
                (s.source.types, s.target.types),
                (types_en, types_de),
                "{split}"
            );
            assert_eq!(
                (s.source.tokens, s.target.tokens),
                (words_en + lines, words_de + lines)
            );
            let encoded = c.split(split);
            assert_eq!(encoded.len(), lines);
            let src: usize = (0..lines).map(|i| encoded.source_len(i)).sum();
            assert_eq!(src, words_en + lines);
        }
        // Independent: the train types of each side from the text.
        let types = |name: &str| -> HashSet<String> {
            std::fs::read_to_string(dir.join(name))
                .expect("read")
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };
        let (en, de) = (types("train.en"), types("train.de"));
        let source_only = en.difference(&de).count();
        let both = en.intersection(&de).count();
        let v = c.vocab();
        assert_eq!(v.target_types(), de.len() + 1, "German types and </s>");
        assert_eq!(v.source_only_types(), source_only);
        // <unk> (absent from Multi30k), <s>, <pad>.
        assert_eq!(v.len(), de.len() + 1 + source_only + 3);
        let n = de.len() + 1;
        let g = c.groups();
        assert_eq!(
            MtGroup::ALL.map(|x| g.size(x)),
            [
                3 * n / 10,
                8 * n / 10 - 3 * n / 10,
                n - 8 * n / 10,
                source_only,
                3
            ]
        );
        let langs = |l| (0..v.len() as u32).filter(|&i| v.language(i) == l).count();
        assert_eq!(langs(Language::Both), both + 1, "shared words and </s>");
        assert_eq!(langs(Language::Target), de.len() - both);
        assert_eq!(langs(Language::Source), source_only);
        // The held-out words never seen in train, counted by hand.
        for (split, src_file, tgt_file) in [
            (Split::Valid, "valid.en", "valid.de"),
            (Split::Test, "test.en", "test.de"),
        ] {
            let oov = |file: &str, seen: &HashSet<String>| {
                let text = std::fs::read_to_string(dir.join(file)).expect("read");
                text.split_whitespace()
                    .filter(|w| !seen.contains(*w))
                    .count()
            };
            // A German word is known if it occurs on either side of train (one joint vocabulary).
            let all: HashSet<String> = en.union(&de).cloned().collect();
            let s = c.stats(split);
            assert_eq!(s.source.oov_tokens, oov(src_file, &all));
            assert_eq!(s.target.oov_tokens, oov(tgt_file, &all));
            assert_eq!(
                (s.source.unk, s.target.unk),
                (s.source.oov_tokens, s.target.oov_tokens)
            );
        }
    }
}
