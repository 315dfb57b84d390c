//! Corpora, vocabulary, frequency groups and batching (methods.md §1).
//!
//! Everything a number in conelab depends on starts here: how a line becomes tokens, which id a token
//! gets, which frequency group it falls in, and how the token stream is cut into training windows.

mod batching;
pub mod bpe;
mod corpus;
mod groups;
pub mod order;
mod parallel;
mod report;
mod synthetic;
pub mod synthetic_mt;
mod text;
mod vocab;

use std::path::PathBuf;

pub use batching::{Batch, PartialWindow, StreamBatcher};
pub use corpus::{Corpus, CorpusSource, LoadOptions, SPLIT_FILE_NAMES, SplitStats};
pub use groups::{FrequencyGroups, Group, GroupBounds, GroupSummary};
pub use parallel::{
    BOS, END_OF_SENTENCE, GroupReport, Language, LengthSummary, LongPairs, MtGroup, MtGroups,
    OneSidedEmpty, PAD, PairBatch, ParallelCorpus, ParallelOptions, ParallelReport, ParallelSplit,
    ParallelSplitStats, ParallelVocab, SideReport, SideStats, SplitReport, TokenBatchOptions,
    TokenBatcher,
};
pub use report::{CorpusReport, thousands, zipf_exponent};
pub use synthetic::{SynthConfig, SyntheticCorpus};
pub use synthetic_mt::{SynthMtConfig, SyntheticMt};
pub use text::{DEFAULT_MAX_LINE_BYTES, SplitText};
pub use vocab::{EOS, UNK, Vocab, VocabBuilder};

/// The three splits of a word-level corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    Train,
    Valid,
    Test,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Train, Split::Valid, Split::Test];

    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Valid => "valid",
            Split::Test => "test",
        }
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything that can go wrong while reading or generating a corpus. Each message is one line that
/// names the file or option and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("corpus directory {} does not exist (give a directory with train.txt/valid.txt/test.txt, a name found under $CONELAB_DATASETS or a configured data root (`conelab config show`), or the word `synthetic`)", .0.display())]
    MissingDir(PathBuf),
    #[error("{} is not a directory (a corpus is a directory with train.txt/valid.txt/test.txt, or the word `synthetic`)", .0.display())]
    NotADirectory(PathBuf),
    #[error("no {split} split in {}: expected one of {candidates}", dir.display())]
    MissingSplit {
        dir: PathBuf,
        split: Split,
        candidates: String,
    },
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: binary file (NUL byte at line {line}, byte offset {offset}); a corpus is UTF-8 text", path.display())]
    Binary {
        path: PathBuf,
        line: usize,
        offset: usize,
    },
    #[error("{}: invalid UTF-8 at line {line} (byte offset {offset}); a corpus is UTF-8 text", path.display())]
    InvalidUtf8 {
        path: PathBuf,
        line: usize,
        offset: usize,
    },
    #[error("{}: line {line} is {len} bytes long, over the limit of {max} bytes for one line (a word-level corpus has one sentence or paragraph per line)", path.display())]
    LineTooLong {
        path: PathBuf,
        line: usize,
        len: usize,
        max: usize,
    },
    #[error("{}: the {split} split is empty (it contains no words)", path.display())]
    EmptySplit { path: PathBuf, split: Split },
    #[error(
        "the train split has more than {limit} distinct tokens: token ids are u32, so the vocabulary cannot hold them"
    )]
    VocabTooLarge { limit: usize },
    #[error("invalid group boundaries {given}: {reason}")]
    InvalidGroups { given: String, reason: String },
    #[error("invalid {option} {value}: {reason}")]
    InvalidParameter {
        option: &'static str,
        value: String,
        reason: String,
    },
    #[error("parallel corpus directory {} {reason} (a parallel corpus is a directory with train.XX and train.YY, valid.XX and valid.YY, test.XX and test.YY for two language codes, like Multi30k's train.en and train.de)", dir.display())]
    ParallelDir { dir: PathBuf, reason: &'static str },
    #[error("{} holds no parallel corpus: expected train.XX and train.YY for two language codes (codes found: {found})", dir.display())]
    NotParallel { dir: PathBuf, found: String },
    #[error("{} holds a parallel corpus in {codes}: say which side is the source with {choices}", dir.display())]
    PairNotGiven {
        dir: PathBuf,
        codes: String,
        choices: String,
    },
    #[error("--pair {pair}: {reason} (codes found in {}: {codes})", dir.display())]
    UnknownPair {
        dir: PathBuf,
        pair: String,
        reason: &'static str,
        codes: String,
    },
    #[error("{} not found: the {split} split of a parallel corpus needs both sides ({} {note})", missing.display(), other.display())]
    MissingParallelFile {
        split: Split,
        missing: PathBuf,
        other: PathBuf,
        note: &'static str,
    },
    #[error("{} has {source_lines} lines but {} has {target_lines}: the two sides of the {split} split must have one line per sentence pair", source_path.display(), target_path.display())]
    LineCountMismatch {
        split: Split,
        source_path: PathBuf,
        source_lines: usize,
        target_path: PathBuf,
        target_lines: usize,
    },
    #[error("{} / {}: {count} lines of the {split} split are empty on one side only (first: {first}); a sentence pair needs words on both sides", source_path.display(), target_path.display())]
    OneSidedEmpty {
        split: Split,
        source_path: PathBuf,
        target_path: PathBuf,
        count: usize,
        first: String,
    },
    #[error("{}: line {line} contains `{token}`, a token the translation vocabulary reserves for itself (<pad>, <s>, </s>)", path.display())]
    ReservedToken {
        path: PathBuf,
        line: usize,
        token: String,
    },
    #[error("{} line {line} ({split} split): the pair needs {need} tokens per sentence (source {source_len} with </s>, target {target_len} + 1), over the batch limit of {max_tokens} tokens", path.display())]
    PairTooLong {
        split: Split,
        path: PathBuf,
        line: usize,
        source_len: usize,
        target_len: usize,
        need: usize,
        max_tokens: usize,
    },
    #[error("{} is a parallel corpus ({codes}), not a language model's train/valid/test text: `conelab data stats` and `data bpe --joint` read it; training a translation model on it is not in this version yet", dir.display())]
    ParallelNotLanguageModel { dir: PathBuf, codes: String },
}
