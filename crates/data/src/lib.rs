//! Corpora, vocabulary, frequency groups and batching (methods.md §1).
//!
//! Everything a number in conelab depends on starts here: how a line becomes tokens, which id a token
//! gets, which frequency group it falls in, and how the token stream is cut into training windows.

mod batching;
pub mod bpe;
mod corpus;
mod groups;
pub mod order;
mod report;
mod synthetic;
mod text;
mod vocab;

use std::path::PathBuf;

pub use batching::{Batch, PartialWindow, StreamBatcher};
pub use corpus::{Corpus, CorpusSource, LoadOptions, SPLIT_FILE_NAMES, SplitStats};
pub use groups::{FrequencyGroups, Group, GroupBounds, GroupSummary};
pub use report::{CorpusReport, thousands, zipf_exponent};
pub use synthetic::{SynthConfig, SyntheticCorpus};
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
}
