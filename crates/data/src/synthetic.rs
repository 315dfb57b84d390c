//! The built-in synthetic corpus: a seeded language with a Zipfian unigram distribution and real
//! distributional structure, so that training works on a fresh machine with no data and nearest
//! neighbours have a ground truth.
//!
//! Design. Word `i` (of `V`) has Zipf weight `p_i ∝ (i+1)^(−s)` and belongs to latent class `i mod C`,
//! so every class holds words from the whole frequency range (frequent, medium and rare alike).
//! Sentences come from a Markov chain over classes; each class emits its own words in proportion to
//! their weights, so words of one class are interchangeable in context. The chain moves along a
//! random sparse graph of classes (a ring plus random chords: each class has its own few typical
//! neighbours, which is what makes classes recoverable from context), and a Metropolis–Hastings
//! correction gives it exactly the stationary distribution `π_c = Σ_{i∈c} p_i`. Hence the global
//! unigram distribution is exactly Zipf(s) in expectation. Proposals are weighted by `π` among a
//! class's neighbours, which keeps rejections (repeated classes) rare.

use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::DataError;
use super::text::SplitText;

/// Settings of the synthetic corpus. `tokens` counts train tokens including `<eos>`; valid and test
/// get `heldout_fraction` of that each.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SynthConfig {
    pub seed: u64,
    pub vocab: usize,
    pub tokens: usize,
    pub classes: usize,
    pub zipf: f64,
    pub heldout_fraction: f64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            vocab: 5_000,
            tokens: 1_000_000,
            classes: 50,
            zipf: 1.0,
            heldout_fraction: 0.05,
        }
    }
}

/// Sentence lengths in words, uniform in this range.
const SENTENCE_WORDS: std::ops::RangeInclusive<usize> = 4..=28;
/// Random chords per class on top of the ring.
const CHORDS_PER_CLASS: usize = 2;
/// Upper limits that keep a typo from eating all memory.
const MAX_VOCAB: usize = 50_000_000;
const MAX_TOKENS: usize = 2_000_000_000;

impl SynthConfig {
    pub fn validate(&self) -> Result<(), DataError> {
        let bad = |option, value: String, reason: &str| {
            Err(DataError::InvalidParameter {
                option,
                value,
                reason: reason.to_owned(),
            })
        };
        if self.vocab == 0 || self.vocab > MAX_VOCAB {
            return bad(
                "--vocab",
                self.vocab.to_string(),
                &format!("the number of word types must be between 1 and {MAX_VOCAB}"),
            );
        }
        if self.classes == 0 || self.classes > self.vocab {
            return bad(
                "--classes",
                self.classes.to_string(),
                &format!(
                    "must be between 1 and the number of word types ({})",
                    self.vocab
                ),
            );
        }
        if self.tokens == 0 || self.tokens > MAX_TOKENS {
            return bad(
                "--tokens",
                self.tokens.to_string(),
                &format!("must be between 1 and {MAX_TOKENS}"),
            );
        }
        if !(self.zipf.is_finite() && self.zipf > 0.0 && self.zipf <= 4.0) {
            return bad(
                "--zipf",
                self.zipf.to_string(),
                "the Zipf exponent must be in (0, 4]",
            );
        }
        if !(self.heldout_fraction.is_finite()
            && self.heldout_fraction > 0.0
            && self.heldout_fraction <= 1.0)
        {
            return bad(
                "held-out fraction",
                self.heldout_fraction.to_string(),
                "must be in (0, 1]",
            );
        }
        Ok(())
    }
}

/// A generated corpus: the three splits as text plus the ground-truth class of every word.
#[derive(Debug, Clone)]
pub struct SyntheticCorpus {
    splits: [String; 3],
    words: Vec<String>,
    class_of: Vec<u32>,
}

impl SyntheticCorpus {
    pub fn generate(config: &SynthConfig) -> Result<Self, DataError> {
        config.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let (v, c) = (config.vocab, config.classes);
        let weight: Vec<f64> = (0..v)
            .map(|i| ((i + 1) as f64).powf(-config.zipf))
            .collect();
        let class_of: Vec<u32> = (0..v).map(|i| (i % c) as u32).collect();

        // Emission tables: per class, its members and their cumulative weights.
        let members: Vec<Vec<u32>> = (0..c)
            .map(|k| (k..v).step_by(c).map(|i| i as u32).collect())
            .collect();
        let cumulative: Vec<Vec<f64>> = members
            .iter()
            .map(|m| {
                let mut acc = 0.0;
                m.iter()
                    .map(|&i| {
                        acc += weight[i as usize];
                        acc
                    })
                    .collect()
            })
            .collect();
        let pi: Vec<f64> = cumulative.iter().map(|cdf| cdf[cdf.len() - 1]).collect();

        let neighbours = class_graph(c, &mut rng);
        // Proposal q(a, b) = π_b / Z_a over a's neighbours; MH acceptance min(1, Z_a / Z_b).
        let neighbour_cdf: Vec<Vec<f64>> = neighbours
            .iter()
            .map(|ns| {
                let mut acc = 0.0;
                ns.iter()
                    .map(|&b| {
                        acc += pi[b as usize];
                        acc
                    })
                    .collect()
            })
            .collect();
        let z: Vec<f64> = neighbour_cdf
            .iter()
            .map(|cdf| cdf.last().copied().unwrap_or(0.0))
            .collect();

        let total_pi: f64 = pi.iter().sum();
        let mut class = sample_cdf(&prefix_sums(&pi), total_pi * uniform(&mut rng));
        let next_class = |rng: &mut ChaCha8Rng, a: usize| -> usize {
            if neighbours[a].is_empty() {
                return a;
            }
            let k = sample_cdf(&neighbour_cdf[a], z[a] * uniform(rng));
            let b = neighbours[a][k] as usize;
            if uniform(rng) < (z[a] / z[b]).min(1.0) {
                b
            } else {
                a
            }
        };

        let words: Vec<String> = (0..v).map(word_name).collect();
        let heldout = ((config.tokens as f64 * config.heldout_fraction).ceil() as usize).max(1);
        let mut splits: [String; 3] = Default::default();
        for (text, target) in splits.iter_mut().zip([config.tokens, heldout, heldout]) {
            let mut tokens = 0;
            // Every split gets at least one sentence, so none is ever empty.
            while tokens < target || tokens == 0 {
                let mut len = SENTENCE_WORDS.start()
                    + (rng.next_u64() % SENTENCE_WORDS.clone().count() as u64) as usize;
                // The split has exactly `target` tokens (words and one end of sentence each):
                // the last sentence is cut to fit, and none leaves room for an end alone
                // (`--tokens 10` wrote 21). One token is the exception: a sentence needs two.
                let room = target.saturating_sub(tokens);
                if room > 0 && len + 1 >= room {
                    len = (room - 1).max(1);
                } else if room > len + 1 && room - (len + 1) == 1 {
                    len += 1;
                }
                for w in 0..len {
                    let k = sample_cdf(&cumulative[class], pi[class] * uniform(&mut rng));
                    let word = members[class][k] as usize;
                    if w > 0 {
                        text.push(' ');
                    }
                    text.push_str(&words[word]);
                    class = next_class(&mut rng, class);
                }
                text.push('\n');
                tokens += len + 1;
            }
        }
        Ok(Self {
            splits,
            words,
            class_of,
        })
    }

    /// The text of train, valid and test.
    pub fn texts(&self) -> &[String; 3] {
        &self.splits
    }

    /// Word types in generation order (word `i` has Zipf rank `i + 1`).
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Ground-truth class of each word, in the order of [`Self::words`].
    pub fn class_of(&self) -> &[u32] {
        &self.class_of
    }

    /// `classes.tsv`: a `token\tclass` header, then one line per word type.
    pub fn classes_tsv(&self) -> String {
        let mut out = String::from("token\tclass\n");
        for (w, c) in self.words.iter().zip(&self.class_of) {
            out.push_str(&format!("{w}\t{c}\n"));
        }
        out
    }

    /// Validated split texts, named as if they were the files `synthetic/{train,valid,test}.txt`.
    pub fn into_split_texts(self, max_line_bytes: usize) -> Result<[SplitText; 3], DataError> {
        let [train, valid, test] = self.splits;
        let text = |name: &str, s: String| {
            SplitText::from_bytes(
                PathBuf::from(format!("synthetic/{name}.txt")),
                s.into_bytes(),
                max_line_bytes,
            )
        };
        Ok([
            text("train", train)?,
            text("valid", valid)?,
            text("test", test)?,
        ])
    }

    /// Writes `train.txt`, `valid.txt`, `test.txt` and `classes.tsv` into `dir` (created if
    /// missing), each file atomically.
    pub fn write_to(&self, dir: &Path) -> Result<(), DataError> {
        std::fs::create_dir_all(dir).map_err(|source| DataError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let files = [
            ("train.txt", self.splits[0].as_bytes()),
            ("valid.txt", self.splits[1].as_bytes()),
            ("test.txt", self.splits[2].as_bytes()),
        ];
        let classes = self.classes_tsv();
        for (name, bytes) in files
            .into_iter()
            .chain([("classes.tsv", classes.as_bytes())])
        {
            let path = dir.join(name);
            conelab_base::atomic::write_file(&path, bytes)
                .map_err(|source| DataError::Write { path, source })?;
        }
        Ok(())
    }
}

/// Ring plus random chords, symmetric, no self-loops; neighbours sorted for determinism.
fn class_graph(c: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<u32>> {
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); c];
    let link = |a: usize, b: usize, adj: &mut Vec<Vec<u32>>| {
        if a != b {
            adj[a].push(b as u32);
            adj[b].push(a as u32);
        }
    };
    for a in 0..c {
        link(a, (a + 1) % c, &mut adj);
        for _ in 0..CHORDS_PER_CLASS {
            let b = (rng.next_u64() % c as u64) as usize;
            link(a, b, &mut adj);
        }
    }
    for ns in &mut adj {
        ns.sort_unstable();
        ns.dedup();
    }
    adj
}

/// Uniform in [0, 1) from the top 53 bits.
fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn prefix_sums(w: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    w.iter()
        .map(|x| {
            acc += x;
            acc
        })
        .collect()
}

/// Index of the first cumulative weight above `u` (clamped for `u` at the very top).
fn sample_cdf(cdf: &[f64], u: f64) -> usize {
    cdf.partition_point(|&x| x <= u).min(cdf.len() - 1)
}

/// A pronounceable, unique name for word `i`: bijective base-70 over consonant–vowel syllables,
/// offset so that every name has at least two syllables.
pub(crate) fn word_name(i: usize) -> String {
    const CONSONANTS: &[u8] = b"bdfgklmnprstvz";
    const VOWELS: &[u8] = b"aeiou";
    let base = CONSONANTS.len() * VOWELS.len();
    let mut x = i + base + 1;
    let mut syllables = Vec::new();
    while x > 0 {
        let d = (x - 1) % base;
        syllables.push([CONSONANTS[d / VOWELS.len()], VOWELS[d % VOWELS.len()]]);
        x = (x - 1) / base;
    }
    syllables
        .iter()
        .rev()
        .flat_map(|s| s.iter().map(|&b| b as char))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_names_are_unique() {
        let names: std::collections::HashSet<String> = (0..200_000).map(word_name).collect();
        assert_eq!(names.len(), 200_000);
        assert!(names.iter().all(|n| n.len() >= 4));
    }

    #[test]
    fn bad_settings_are_rejected() {
        let ok = SynthConfig::default();
        for bad in [
            SynthConfig {
                vocab: 0,
                ..ok.clone()
            },
            SynthConfig {
                classes: 0,
                ..ok.clone()
            },
            SynthConfig {
                classes: 6_000,
                ..ok.clone()
            },
            SynthConfig {
                tokens: 0,
                ..ok.clone()
            },
            SynthConfig {
                zipf: -1.0,
                ..ok.clone()
            },
            SynthConfig {
                zipf: f64::NAN,
                ..ok.clone()
            },
        ] {
            assert!(SyntheticCorpus::generate(&bad).is_err(), "{bad:?} accepted");
        }
    }

    /// Issue #58: `--tokens 10` wrote 21 tokens. Each split holds exactly what was asked
    /// (counted as the vocabulary counts: words plus one end of sentence per line).
    #[test]
    fn a_split_has_exactly_the_tokens_asked_for() {
        for tokens in [2, 3, 10, 29, 30, 31, 1_000, 6_000] {
            let config = SynthConfig {
                vocab: 150,
                tokens,
                ..SynthConfig::default()
            };
            let corpus = SyntheticCorpus::generate(&config).expect("generates");
            let train = &corpus.splits[0];
            let counted: usize = train.lines().map(|l| l.split(' ').count() + 1).sum();
            assert_eq!(counted, tokens, "{train:?}");
            assert!(train.lines().all(|l| !l.trim().is_empty()));
        }
    }

    #[test]
    fn class_graph_is_symmetric_and_connected() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let g = class_graph(50, &mut rng);
        for (a, ns) in g.iter().enumerate() {
            assert!(!ns.contains(&(a as u32)));
            for &b in ns {
                assert!(g[b as usize].contains(&(a as u32)));
            }
        }
        // Breadth-first search from class 0 reaches every class.
        let mut seen = [false; 50];
        let mut queue = vec![0usize];
        seen[0] = true;
        while let Some(a) = queue.pop() {
            for &b in &g[a] {
                if !seen[b as usize] {
                    seen[b as usize] = true;
                    queue.push(b as usize);
                }
            }
        }
        assert!(seen.iter().all(|&s| s));
    }
}
