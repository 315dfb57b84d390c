//! `synthetic-mt`: a built-in parallel corpus, generated in memory, whose translation is known
//! exactly — so a translation run can be checked end to end on a fresh machine with no data (a
//! working encoder–decoder reaches BLEU ≥ 95 on it quickly), and cross-lingual neighbours have a
//! ground truth (source row `w` and target row `qw` mean the same).
//!
//! Source language: `vocab` word types, word `i` with Zipf weight `(i+1)^(−s)`; every word of a
//! sentence drawn independently, sentence lengths uniform in `min_len..=max_len` words.
//!
//! Target language, a deterministic function of the source sentence:
//! - a one-to-one dictionary: source word `w` becomes [`TARGET_PREFIX`] + `w` (`bafa` → `qbafa`).
//!   Source words are consonant–vowel syllables without a `q`, so no target word is also a source
//!   word: every type is *source* or *target*, and only `</s>` is *both*;
//! - a local reordering: each adjacent pair of words is swapped, a last odd word stays
//!   (`w1 w2 w3 w4 w5` → `t(w2) t(w1) t(w4) t(w3) t(w5)`), so the decoder must use attention, not
//!   just copy position by position.
//!
//! Files ([`SyntheticMt::write_to`]): codes [`SOURCE_CODE`] `xx` and [`TARGET_CODE`] `yy`, as
//! `train.xx`/`train.yy`, `valid.xx`/`valid.yy`, `test.xx`/`test.yy`; load them with pair `xx-yy`.
//! Each split has its own random stream (keyed by the seed and the split), so the valid and test
//! sentences do not change when only the train size does.

use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use crate::order::below;
use crate::parallel::{ParallelCorpus, ParallelOptions};
use crate::text::SplitText;
use crate::{DataError, Split};

/// The source language's code in file names.
pub const SOURCE_CODE: &str = "xx";
/// The target language's code in file names.
pub const TARGET_CODE: &str = "yy";
/// What the dictionary puts before a source word to make its translation.
pub const TARGET_PREFIX: &str = "q";

/// Upper limits that keep a typo from eating all memory.
const MAX_VOCAB: usize = 10_000_000;
const MAX_LEN: usize = 1_000;
const MAX_TOKENS: usize = 1_000_000_000;

/// Settings of `synthetic-mt`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SynthMtConfig {
    pub seed: u64,
    /// Source word types (the target has as many).
    pub vocab: usize,
    /// Sentence pairs in train, valid and test.
    pub train: usize,
    pub valid: usize,
    pub test: usize,
    /// Sentence length range in words, both ends included.
    pub min_len: usize,
    pub max_len: usize,
    /// Zipf exponent `s` of the source words.
    pub zipf: f64,
}

impl Default for SynthMtConfig {
    /// 20,000 training pairs of 3–15 words over 1,000 types: about 180,000 source words, so even
    /// the rarest type (Zipf weight 1/1000 of the first) occurs about 20 times in train and
    /// held-out sentences almost never need `<unk>`.
    fn default() -> Self {
        Self {
            seed: 1,
            vocab: 1_000,
            train: 20_000,
            valid: 500,
            test: 500,
            min_len: 3,
            max_len: 15,
            zipf: 1.0,
        }
    }
}

impl SynthMtConfig {
    pub fn validate(&self) -> Result<(), DataError> {
        let bad = |option, value: String, reason: String| {
            Err(DataError::InvalidParameter {
                option,
                value,
                reason,
            })
        };
        if self.vocab == 0 || self.vocab > MAX_VOCAB {
            return bad(
                "synthetic-mt vocab",
                self.vocab.to_string(),
                format!("the number of word types must be between 1 and {MAX_VOCAB}"),
            );
        }
        if self.min_len == 0 || self.min_len > self.max_len || self.max_len > MAX_LEN {
            return bad(
                "synthetic-mt length range",
                format!("{}..={}", self.min_len, self.max_len),
                format!("need 1 ≤ min ≤ max ≤ {MAX_LEN} words"),
            );
        }
        for (name, n) in [
            ("synthetic-mt train", self.train),
            ("synthetic-mt valid", self.valid),
            ("synthetic-mt test", self.test),
        ] {
            if n == 0 {
                return bad(name, n.to_string(), "at least one sentence pair".into());
            }
        }
        let most =
            (self.train as u128 + self.valid as u128 + self.test as u128) * self.max_len as u128;
        if most > MAX_TOKENS as u128 {
            return bad(
                "synthetic-mt train",
                self.train.to_string(),
                format!("up to {most} words per side, over the limit of {MAX_TOKENS}"),
            );
        }
        if !(self.zipf.is_finite() && self.zipf > 0.0 && self.zipf <= 4.0) {
            return bad(
                "synthetic-mt zipf",
                self.zipf.to_string(),
                "the Zipf exponent must be in (0, 4]".into(),
            );
        }
        Ok(())
    }
}

/// A generated parallel corpus: the text of both sides of the three splits.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticMt {
    config: SynthMtConfig,
    /// `(source, target)` text of train, valid, test; one sentence a line.
    texts: [(String, String); 3],
}

impl SyntheticMt {
    pub fn generate(config: &SynthMtConfig) -> Result<Self, DataError> {
        config.validate()?;
        let mut acc = 0.0;
        let cdf: Vec<f64> = (0..config.vocab)
            .map(|i| {
                acc += ((i + 1) as f64).powf(-config.zipf);
                acc
            })
            .collect();
        let total = acc;
        let words: Vec<String> = (0..config.vocab).map(source_word).collect();
        let span = config.max_len - config.min_len + 1;
        let texts = Split::ALL.map(|split| {
            let sentences = match split {
                Split::Train => config.train,
                Split::Valid => config.valid,
                Split::Test => config.test,
            };
            let mut rng = split_stream(config.seed, split);
            let (mut source, mut target) = (String::new(), String::new());
            let mut line: Vec<&str> = Vec::with_capacity(config.max_len);
            for _ in 0..sentences {
                let len = config.min_len + below(&mut rng, span);
                line.clear();
                for _ in 0..len {
                    let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                    let k = cdf.partition_point(|&x| x <= u * total).min(cdf.len() - 1);
                    line.push(&words[k]);
                }
                let sentence = line.join(" ");
                target.push_str(&translate(&sentence));
                target.push('\n');
                source.push_str(&sentence);
                source.push('\n');
            }
            (source, target)
        });
        Ok(Self {
            config: config.clone(),
            texts,
        })
    }

    pub fn config(&self) -> &SynthMtConfig {
        &self.config
    }

    /// `(source, target)` text of a split, one sentence a line.
    pub fn texts(&self, split: Split) -> (&str, &str) {
        let (s, t) = &self.texts[split as usize];
        (s, t)
    }

    /// `synthetic-mt (seed S, V word types)`.
    pub fn describe(&self) -> String {
        format!(
            "synthetic-mt (seed {}, {} word types)",
            self.config.seed, self.config.vocab
        )
    }

    /// The corpus in direction `xx-yy`, built in memory (file names in messages:
    /// `synthetic-mt/train.xx` and so on).
    pub fn into_corpus(self, options: &ParallelOptions) -> Result<ParallelCorpus, DataError> {
        let name = self.describe();
        let [train, valid, test] = self.texts;
        let text = |split: Split, code: &str, s: String| {
            SplitText::from_bytes(
                PathBuf::from(format!("synthetic-mt/{split}.{code}")),
                s.into_bytes(),
                options.max_line_bytes,
            )
        };
        let side = |split, (s, t): (String, String)| {
            Ok::<_, DataError>((text(split, SOURCE_CODE, s)?, text(split, TARGET_CODE, t)?))
        };
        let texts = [
            side(Split::Train, train)?,
            side(Split::Valid, valid)?,
            side(Split::Test, test)?,
        ];
        ParallelCorpus::from_texts(name, SOURCE_CODE, TARGET_CODE, texts, options)
    }

    /// Writes `train.xx`, `train.yy`, `valid.xx`, `valid.yy`, `test.xx`, `test.yy` into `dir`
    /// (created if missing), each file atomically.
    pub fn write_to(&self, dir: &Path) -> Result<(), DataError> {
        std::fs::create_dir_all(dir).map_err(|source| DataError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        for split in Split::ALL {
            let (s, t) = self.texts(split);
            for (code, text) in [(SOURCE_CODE, s), (TARGET_CODE, t)] {
                let path = dir.join(format!("{split}.{code}"));
                conelab_base::atomic::write_file(&path, text.as_bytes())
                    .map_err(|source| DataError::Write { path, source })?;
            }
        }
        Ok(())
    }
}

/// The translation of a source sentence: each word through the dictionary, each adjacent pair of
/// words swapped (a last odd word stays).
pub fn translate(source: &str) -> String {
    let words: Vec<&str> = source.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    for pair in words.chunks(2) {
        for w in pair.iter().rev() {
            out.push(format!("{TARGET_PREFIX}{w}"));
        }
    }
    out.join(" ")
}

/// Source word `i` (the `i`-th most probable): bijective base-70 over consonant–vowel syllables,
/// offset so that every word has at least two syllables; no `q` anywhere.
pub fn source_word(i: usize) -> String {
    // The synthetic LM corpus's names: they hold no `q`, so no source word is a target word.
    crate::synthetic::word_name(i)
}

/// The translation of source word `i`.
pub fn target_word(i: usize) -> String {
    format!("{TARGET_PREFIX}{}", source_word(i))
}

/// ChaCha8 keyed by the seed and the split.
fn split_stream(seed: u64, split: Split) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = split as u8;
    key[16..28].copy_from_slice(b"synthetic-mt");
    ChaCha8Rng::from_seed(key)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::parallel::{Language, MtGroup};

    fn small() -> SynthMtConfig {
        SynthMtConfig {
            vocab: 200,
            train: 2_000,
            valid: 100,
            test: 120,
            min_len: 2,
            max_len: 9,
            ..SynthMtConfig::default()
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_corpus() {
        let a = SyntheticMt::generate(&small()).expect("generates");
        assert_eq!(a, SyntheticMt::generate(&small()).expect("generates"));
        let other =
            SyntheticMt::generate(&SynthMtConfig { seed: 2, ..small() }).expect("generates");
        assert_ne!(a.texts(Split::Train), other.texts(Split::Train));
        // Valid and test do not depend on the train size.
        let more = SyntheticMt::generate(&SynthMtConfig {
            train: 3_000,
            ..small()
        })
        .expect("generates");
        assert_eq!(a.texts(Split::Valid), more.texts(Split::Valid));
        assert_eq!(a.texts(Split::Test), more.texts(Split::Test));
    }

    /// The target re-derived from the source without [`translate`]: position `k` of the target
    /// holds the source word at `k xor 1` (its neighbour in the pair), or at `k` when that is
    /// past the end, with the prefix.
    #[test]
    fn the_target_is_the_dictionary_and_the_swaps_of_the_source() {
        let c = SyntheticMt::generate(&small()).expect("generates");
        let config = small();
        for split in Split::ALL {
            let (s, t) = c.texts(split);
            let (s, t): (Vec<&str>, Vec<&str>) = (s.lines().collect(), t.lines().collect());
            let want = match split {
                Split::Train => config.train,
                Split::Valid => config.valid,
                Split::Test => config.test,
            };
            assert_eq!((s.len(), t.len()), (want, want), "{split}");
            for (src, tgt) in s.iter().zip(&t) {
                let src: Vec<&str> = src.split(' ').collect();
                let tgt: Vec<&str> = tgt.split(' ').collect();
                assert!((config.min_len..=config.max_len).contains(&src.len()));
                let n = src.len();
                let expected: Vec<String> = (0..n)
                    .map(|k| {
                        let from = if (k ^ 1) < n { k ^ 1 } else { k };
                        ["q", src[from]].concat()
                    })
                    .collect();
                assert_eq!(tgt, expected);
            }
        }
        assert_eq!(translate("a b c"), "qb qa qc");
    }

    #[test]
    fn words_follow_zipf_and_the_sides_share_no_type() {
        let c = SyntheticMt::generate(&small()).expect("generates");
        let (s, t) = c.texts(Split::Train);
        let src: HashSet<&str> = s.split_whitespace().collect();
        let tgt: HashSet<&str> = t.split_whitespace().collect();
        assert!(src.is_disjoint(&tgt));
        assert!(src.iter().all(|w| !w.contains('q')));
        let names: HashSet<String> = (0..100_000).map(source_word).collect();
        assert_eq!(names.len(), 100_000);
        // Zipf(1) over 200 types: word 0 about twice as frequent as word 1, ten times word 9.
        let count = |w: &str| s.split_whitespace().filter(|x| *x == w).count() as f64;
        let (c0, c1, c9) = (
            count(&source_word(0)),
            count(&source_word(1)),
            count(&source_word(9)),
        );
        assert!((c0 / c1 - 2.0).abs() < 0.3, "{c0} {c1}");
        assert!((c0 / c9 - 10.0).abs() < 2.5, "{c0} {c9}");
        assert_eq!(target_word(3), format!("q{}", source_word(3)));
    }

    #[test]
    fn the_corpus_in_memory_equals_the_corpus_written_and_loaded() {
        let generated = SyntheticMt::generate(&small()).expect("generates");
        let dir = tempfile::tempdir().expect("tempdir");
        generated.write_to(dir.path()).expect("writes");
        let options = ParallelOptions::default();
        assert_eq!(
            ParallelCorpus::detect(dir.path()).expect("detects"),
            ["xx", "yy"]
        );
        let loaded = ParallelCorpus::load(dir.path(), Some("xx-yy"), &options).expect("loads");
        let built = generated.into_corpus(&options).expect("builds");
        assert_eq!(built.vocab().tokens(), loaded.vocab().tokens());
        for split in Split::ALL {
            let (a, b) = (built.split(split), loaded.split(split));
            assert_eq!(a.len(), b.len());
            for i in 0..a.len() {
                assert_eq!((a.source(i), a.target(i)), (b.source(i), b.target(i)));
            }
            assert_eq!(built.stats(split), loaded.stats(split));
        }
        // Every source word has its own target word: as many target types as source types,
        // and only </s> on both sides.
        let v = built.vocab();
        assert_eq!(v.target_types(), v.source_only_types() + 1);
        let both = (0..v.len() as u32)
            .filter(|&i| v.language(i) == Language::Both)
            .count();
        assert_eq!(both, 1);
        assert_eq!(
            built.groups().size(MtGroup::SourceOnly),
            v.source_only_types()
        );
        assert!(built.name().starts_with("synthetic-mt (seed 1"));
    }

    #[test]
    fn bad_settings_are_rejected() {
        let ok = small();
        for bad in [
            SynthMtConfig {
                vocab: 0,
                ..ok.clone()
            },
            SynthMtConfig {
                min_len: 0,
                ..ok.clone()
            },
            SynthMtConfig {
                min_len: 5,
                max_len: 4,
                ..ok.clone()
            },
            SynthMtConfig {
                max_len: 5_000,
                ..ok.clone()
            },
            SynthMtConfig {
                valid: 0,
                ..ok.clone()
            },
            SynthMtConfig {
                train: usize::MAX / 2,
                ..ok.clone()
            },
            SynthMtConfig {
                zipf: f64::NAN,
                ..ok.clone()
            },
        ] {
            let err = SyntheticMt::generate(&bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid synthetic-mt"), "{err}");
        }
    }
}
