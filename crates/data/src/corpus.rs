//! A word-level corpus: three splits encoded as `u32` token ids over one train-built vocabulary.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::synthetic::{SynthConfig, SyntheticCorpus};
use super::text::{DEFAULT_MAX_LINE_BYTES, SplitText};
use super::vocab::{Vocab, VocabBuilder};
use super::{DataError, FrequencyGroups, GroupBounds, Split};

/// File names looked for in a corpus directory, in order: our own, WikiText's, Mikolov's PTB.
pub const SPLIT_FILE_NAMES: [(Split, [&str; 3]); 3] = [
    (
        Split::Train,
        ["train.txt", "wiki.train.tokens", "ptb.train.txt"],
    ),
    (
        Split::Valid,
        ["valid.txt", "wiki.valid.tokens", "ptb.valid.txt"],
    ),
    (
        Split::Test,
        ["test.txt", "wiki.test.tokens", "ptb.test.txt"],
    ),
];

/// Where a corpus comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum CorpusSource {
    /// A directory with the three split files.
    Dir(PathBuf),
    /// The built-in synthetic corpus, generated in memory.
    Synthetic(SynthConfig),
}

impl CorpusSource {
    /// `synthetic` is the built-in corpus with default settings; anything else is a directory:
    /// the path as given when it exists, else — for a bare name like `ptb` — the first
    /// `NAME` folder under the roots of [`conelab_base::settings::DATASETS_ENV`], then of the config file's
    /// `data_roots`.
    pub fn parse(arg: &str) -> Self {
        if arg == "synthetic" {
            return CorpusSource::Synthetic(SynthConfig::default());
        }
        let given = PathBuf::from(arg);
        if given.exists() || arg.contains('/') {
            return CorpusSource::Dir(given);
        }
        conelab_base::settings::current()
            .data_roots
            .iter()
            .map(|root| root.value.join(arg))
            .find(|p| p.is_dir())
            .map_or(CorpusSource::Dir(given), CorpusSource::Dir)
    }

    pub fn describe(&self) -> String {
        match self {
            CorpusSource::Dir(p) => p.display().to_string(),
            CorpusSource::Synthetic(c) => {
                format!("synthetic (seed {}, {} word types)", c.seed, c.vocab)
            }
        }
    }
}

/// Options that change how a corpus is read.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    pub groups: GroupBounds,
    pub max_line_bytes: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            groups: GroupBounds::default(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// Counts for one split. `tokens` includes one `<eos>` per line; `unk` counts `<unk>` ids after
/// mapping (the corpus's own `<unk>` plus out-of-vocabulary words); `oov_*` count words absent
/// from the training vocabulary (always 0 for train).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SplitStats {
    pub lines: usize,
    pub tokens: usize,
    pub unk: usize,
    pub oov_types: usize,
    pub oov_tokens: usize,
}

/// A loaded corpus.
#[derive(Debug, Clone)]
pub struct Corpus {
    name: String,
    vocab: Vocab,
    groups: FrequencyGroups,
    splits: [Vec<u32>; 3],
    stats: [SplitStats; 3],
}

impl Corpus {
    pub fn load(source: &CorpusSource, options: &LoadOptions) -> Result<Self, DataError> {
        let name = match source {
            CorpusSource::Dir(dir) => dir.display().to_string(),
            CorpusSource::Synthetic(_) => source.describe(),
        };
        let [train, valid, test] = Self::read_texts(source, options)?;
        Self::from_texts(name, train, valid, test, options)
    }

    /// The three split texts of a source, read and validated (train, valid, test).
    pub fn read_texts(
        source: &CorpusSource,
        options: &LoadOptions,
    ) -> Result<[SplitText; 3], DataError> {
        match source {
            CorpusSource::Dir(dir) => Self::read_dir(dir, options),
            CorpusSource::Synthetic(config) => {
                SyntheticCorpus::generate(config)?.into_split_texts(options.max_line_bytes)
            }
        }
    }

    fn read_dir(dir: &Path, options: &LoadOptions) -> Result<[SplitText; 3], DataError> {
        if !dir.exists() {
            return Err(DataError::MissingDir(dir.to_path_buf()));
        }
        if !dir.is_dir() {
            return Err(DataError::NotADirectory(dir.to_path_buf()));
        }
        let paths = SPLIT_FILE_NAMES.map(|(split, names)| {
            names
                .iter()
                .map(|n| dir.join(n))
                .find(|p| p.is_file())
                .ok_or_else(|| DataError::MissingSplit {
                    dir: dir.to_path_buf(),
                    split,
                    candidates: names.join(", "),
                })
        });
        let [train, valid, test] = paths;
        // A parallel corpus where a language model's was expected: said as such, not as a
        // missing train.txt.
        if train.is_err()
            && let Ok(codes) = crate::ParallelCorpus::detect(dir)
            && codes.len() >= 2
        {
            return Err(DataError::ParallelNotLanguageModel {
                dir: dir.to_path_buf(),
                codes: codes.join(", "),
            });
        }
        let (train, valid, test) = (train?, valid?, test?);
        // Reading and validating the held-out files overlaps with the train file's.
        let (train, held_out) = std::thread::scope(|s| {
            let held_out = s.spawn(|| {
                Ok::<_, DataError>((
                    SplitText::read(&valid, options.max_line_bytes)?,
                    SplitText::read(&test, options.max_line_bytes)?,
                ))
            });
            let train = SplitText::read(&train, options.max_line_bytes);
            (train, held_out.join())
        });
        // The train file's error first: it is the one the user reads first (and all three
        // are often one export's).
        let train = train?;
        let (valid, test) = match held_out {
            Ok(result) => result?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Ok([train, valid, test])
    }

    /// Builds the corpus from validated split texts.
    pub fn from_texts(
        name: String,
        train: SplitText,
        valid: SplitText,
        test: SplitText,
        options: &LoadOptions,
    ) -> Result<Self, DataError> {
        for (split, text) in [
            (Split::Train, &train),
            (Split::Valid, &valid),
            (Split::Test, &test),
        ] {
            if text.word_count() == 0 {
                return Err(DataError::EmptySplit {
                    path: text.path().to_path_buf(),
                    split,
                });
            }
        }
        let (vocab, train_ids, train_stats) = VocabBuilder::default().build(&train)?;
        let ((valid_ids, valid_stats), (test_ids, test_stats)) = std::thread::scope(|s| {
            let v = s.spawn(|| vocab.encode(&valid));
            let t = vocab.encode(&test);
            match v.join() {
                Ok(v) => (v, t),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        });
        let groups = FrequencyGroups::new(vocab.len(), options.groups);
        Ok(Self {
            name,
            vocab,
            groups,
            splits: [train_ids, valid_ids, test_ids],
            stats: [train_stats, valid_stats, test_stats],
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub fn groups(&self) -> &FrequencyGroups {
        &self.groups
    }

    pub fn split(&self, split: Split) -> &[u32] {
        &self.splits[split as usize]
    }

    pub fn stats(&self, split: Split) -> &SplitStats {
        &self.stats[split as usize]
    }
}
