//! A corpus's reference models per frequency group (methods.md §2 and §4): the unigram model and
//! the interpolated modified Kneser–Ney trigram of [`conelab_metrics::ngram`], trained on the
//! train split with the corpus's vocabulary and scored on valid and test. A language model is
//! judged against them group by group (its context gain is ln(PPL_KN3 / PPL)).
//!
//! The results are cached in the user's cache folder, keyed by what determines them (the three
//! splits' token ids, the vocabulary size and the groups' bounds), never beside the corpus,
//! which may be read-only. A cache that cannot be read or written costs only the time to
//! compute again.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use conelab_data::{Corpus, Group, Split};
use conelab_metrics::ngram::{self, KneserNey, NgramError};

/// Bumped when what is computed changes: older cache files are not read.
const FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("reference models of {corpus}: {source}")]
    Model {
        corpus: String,
        #[source]
        source: NgramError,
    },
}

/// Perplexity per group (frequent, medium, rare) and in total.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GroupPpl {
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64_triple")]
    pub groups: [f64; 3],
    #[serde(deserialize_with = "conelab_base::jsonfloat::f64")]
    pub total: f64,
}

/// Both reference models on one held-out split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitReference {
    /// `valid` or `test`.
    pub split: String,
    /// Targets scored (every token of the split but its first).
    pub positions: usize,
    pub unigram: GroupPpl,
    pub kn3: GroupPpl,
}

/// A corpus's reference models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReferenceModels {
    pub format: u32,
    pub corpus: String,
    /// What the results depend on, as the cache file is named.
    pub key: String,
    pub vocab: usize,
    pub train_tokens: usize,
    /// Modified KN's discounts D1, D2, D3+ for the unigram, bigram and trigram levels.
    pub discounts: [[f64; 3]; 3],
    /// How each level's were estimated (modified; one discount where counts were missing).
    pub discount_kinds: [conelab_metrics::ngram::DiscountKind; 3],
    pub splits: Vec<SplitReference>,
    /// Seconds the computation took (not the cache read).
    pub seconds: f64,
}

impl ReferenceModels {
    pub fn split(&self, split: &str) -> Option<&SplitReference> {
        self.splits.iter().find(|s| s.split == split)
    }

    /// As a run announces it ([`crate::events::Event::Reference`]).
    pub fn event(&self, step: u64) -> crate::events::ReferencePpl {
        let four = |p: &GroupPpl| vec![p.groups[0], p.groups[1], p.groups[2], p.total];
        crate::events::ReferencePpl {
            step,
            splits: self
                .splits
                .iter()
                .map(|s| crate::events::SplitReferencePpl {
                    split: s.split.clone(),
                    kn3: four(&s.kn3),
                    unigram: four(&s.unigram),
                })
                .collect(),
        }
    }
}

/// What the results of a corpus depend on: its splits' ids, vocabulary size and group ranges.
pub fn cache_key(corpus: &Corpus) -> String {
    let mut crc = 0u32;
    for split in [Split::Train, Split::Valid, Split::Test] {
        let ids = corpus.split(split);
        crc = conelab_base::integrity::crc32c_append(crc, &(ids.len() as u64).to_le_bytes());
        for chunk in ids.chunks(4096) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|id| id.to_le_bytes()).collect();
            crc = conelab_base::integrity::crc32c_append(crc, &bytes);
        }
    }
    let groups = corpus.groups();
    for g in Group::ALL {
        let r = groups.range(g);
        crc = conelab_base::integrity::crc32c_append(crc, &(r.start as u64).to_le_bytes());
        crc = conelab_base::integrity::crc32c_append(crc, &(r.end as u64).to_le_bytes());
    }
    format!(
        "v{FORMAT}-n{}-t{}-{}",
        corpus.vocab().len(),
        corpus.split(Split::Train).len(),
        conelab_base::integrity::hex(crc)
    )
}

/// Computes both models on valid and test.
pub fn compute(corpus: &Corpus) -> Result<ReferenceModels, BaselineError> {
    compute_keyed(corpus, cache_key(corpus))
}

/// [`compute`] with the corpus's [`cache_key`] at hand (it is a pass over every token).
fn compute_keyed(corpus: &Corpus, key: String) -> Result<ReferenceModels, BaselineError> {
    let start = Instant::now();
    let err = |source| BaselineError::Model {
        corpus: corpus.name().to_string(),
        source,
    };
    let vocab = corpus.vocab().len();
    let train = corpus.split(Split::Train);
    let model = KneserNey::train(train, vocab).map_err(err)?;
    let groups = corpus.groups();
    let mut splits = Vec::new();
    for split in [Split::Valid, Split::Test] {
        let ids = corpus.split(split);
        let targets = || {
            ids.iter().skip(1).map(|&w| match groups.group_of(w) {
                Group::Frequent => 0,
                Group::Medium => 1,
                Group::Rare => 2,
            })
        };
        // Infinite (a target the unigram model never saw in training) is written NaN, as JSON
        // and so the cache keep it: "–" either way.
        let finite = |x: f64| if x.is_finite() { x } else { f64::NAN };
        let per_group = |nll: Vec<f64>| {
            let (groups, total) = ngram::group_ppl(&nll, targets());
            GroupPpl {
                groups: groups.map(finite),
                total: finite(total),
            }
        };
        splits.push(SplitReference {
            split: split.name().to_string(),
            positions: ids.len().saturating_sub(1),
            unigram: per_group(ngram::unigram_nll(train, ids, vocab).map_err(err)?),
            kn3: per_group(model.nll(ids).map_err(err)?),
        });
    }
    Ok(ReferenceModels {
        format: FORMAT,
        corpus: corpus.name().to_string(),
        key,
        vocab,
        train_tokens: train.len(),
        discounts: model.discounts.map(|d| d.0),
        discount_kinds: model.discount_kinds,
        splits,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Where a corpus's results are cached.
pub fn cache_file(cache_dir: &Path, corpus: &Corpus) -> PathBuf {
    file_of(cache_dir, &cache_key(corpus))
}

fn file_of(cache_dir: &Path, key: &str) -> PathBuf {
    cache_dir.join("baselines").join(format!("{key}.json"))
}

/// Training texts a run computes its references for as it starts: above this it only reads
/// the cache (the counts of a WikiText-103-sized text take gigabytes and minutes; `conelab
/// data baseline` computes them once).
pub const COMPUTE_AT_START_TOKENS: usize = 20_000_000;

/// The corpus's reference models if the cache in `cache_dir` holds them (a file that cannot
/// be read or parsed, or of another key, holds nothing).
pub fn cached(corpus: &Corpus, cache_dir: &Path) -> Option<(ReferenceModels, PathBuf)> {
    cached_for(corpus, &cache_key(corpus), cache_dir)
}

fn cached_keyed(key: &str, cache_dir: &Path) -> Option<(ReferenceModels, PathBuf)> {
    let file = file_of(cache_dir, key);
    let bytes = std::fs::read(&file).ok()?;
    let r = serde_json::from_slice::<ReferenceModels>(&bytes).ok()?;
    (r.format == FORMAT && r.key == key).then_some((r, file))
}

/// A cached result for `corpus`, under its own name: the cache is keyed by content, and the same
/// text under another folder is the same corpus.
fn cached_for(corpus: &Corpus, key: &str, cache_dir: &Path) -> Option<(ReferenceModels, PathBuf)> {
    cached_keyed(key, cache_dir).map(|(mut r, file)| {
        r.corpus = corpus.name().to_string();
        (r, file)
    })
}

/// Whether the results came from the cache.
#[derive(Debug, Clone, PartialEq)]
pub enum Cached {
    /// Read from this file.
    Hit(PathBuf),
    /// Computed, and written to this file.
    Stored(PathBuf),
    /// Computed; the cache could not be written (why).
    NotStored(String),
}

/// The corpus's reference models: from the cache in `cache_dir` when it holds them, else
/// computed and cached.
pub fn reference(
    corpus: &Corpus,
    cache_dir: &Path,
) -> Result<(ReferenceModels, Cached), BaselineError> {
    let key = cache_key(corpus);
    if let Some((r, file)) = cached_for(corpus, &key, cache_dir) {
        return Ok((r, Cached::Hit(file)));
    }
    let r = compute_keyed(corpus, key)?;
    let file = file_of(cache_dir, &r.key);
    let stored = serde_json::to_vec_pretty(&r)
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            conelab_base::atomic::write_file_as("baseline", &file, &bytes)
        });
    let cached = match stored {
        Ok(()) => Cached::Stored(file),
        Err(e) => Cached::NotStored(format!("{}: {e}", file.display())),
    };
    Ok((r, cached))
}

#[cfg(test)]
mod tests {
    use super::*;
    use conelab_data::{CorpusSource, LoadOptions, SynthConfig};

    /// The cache: nothing before the first computation, the same numbers after, and a file of
    /// another key (a changed corpus) is not taken for this corpus's.
    #[test]
    fn the_cache_holds_what_was_computed_and_only_for_its_corpus() {
        let tmp = tempfile::tempdir().expect("tmp");
        let load = |seed| {
            let config = SynthConfig {
                tokens: 30_000,
                seed,
                ..SynthConfig::default()
            };
            Corpus::load(&CorpusSource::Synthetic(config), &LoadOptions::default()).expect("corpus")
        };
        let corpus = load(1);
        assert!(cached(&corpus, tmp.path()).is_none());
        let (computed, how) = reference(&corpus, tmp.path()).expect("computed");
        assert!(matches!(how, Cached::Stored(_)), "{how:?}");
        let (read, _) = cached(&corpus, tmp.path()).expect("cached");
        let close = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-12 * a.abs();
        for (r, c) in read.splits.iter().zip(&computed.splits) {
            for (x, y) in [(&r.unigram, &c.unigram), (&r.kn3, &c.kn3)] {
                assert!(
                    (0..3).all(|g| close(x.groups[g], y.groups[g])) && close(x.total, y.total),
                    "{x:?} vs {y:?}"
                );
            }
        }
        assert!(matches!(
            reference(&corpus, tmp.path()).expect("again").1,
            Cached::Hit(_)
        ));
        // The same text in another folder: the cached numbers, under the name asked for.
        let [train, valid, test] = Corpus::read_texts(
            &CorpusSource::Synthetic(SynthConfig {
                tokens: 30_000,
                seed: 1,
                ..SynthConfig::default()
            }),
            &LoadOptions::default(),
        )
        .expect("texts");
        let elsewhere = Corpus::from_texts(
            "elsewhere".into(),
            train,
            valid,
            test,
            &LoadOptions::default(),
        )
        .expect("corpus");
        let (hit, how) = reference(&elsewhere, tmp.path()).expect("hit");
        assert!(matches!(how, Cached::Hit(_)), "{how:?}");
        assert_eq!(hit.corpus, "elsewhere");
        // Another corpus has another key; a damaged file is computed again.
        let other = load(2);
        assert_ne!(cache_key(&other), cache_key(&corpus));
        assert!(cached(&other, tmp.path()).is_none());
        std::fs::write(cache_file(tmp.path(), &corpus), "{").expect("damage");
        assert!(cached(&corpus, tmp.path()).is_none());
        assert!(matches!(
            reference(&corpus, tmp.path()).expect("recomputed").1,
            Cached::Stored(_)
        ));
    }
}
