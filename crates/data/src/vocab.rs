//! The vocabulary: built from the train split only, ids in frequency-rank order (methods.md §1).

use rustc_hash::{FxHashMap, FxHashSet};

use super::text::{SplitText, words};
use super::{DataError, SplitStats};

/// End-of-line token, appended once per line (blank lines included).
pub const EOS: &str = "<eos>";
/// Token for words never seen in training.
pub const UNK: &str = "<unk>";

/// Token ↔ id map with training counts. Id `i` is the token of frequency rank `i`: count descending,
/// ties broken by first occurrence in the training text.
#[derive(Debug, Clone)]
pub struct Vocab {
    tokens: Vec<String>,
    counts: Vec<u64>,
    index: FxHashMap<String, u32>,
    eos: u32,
    unk: u32,
}

impl Vocab {
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

    /// Training counts in id order (non-increasing).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn id(&self, token: &str) -> Option<u32> {
        self.index.get(token).copied()
    }

    pub fn eos(&self) -> u32 {
        self.eos
    }

    pub fn unk(&self) -> u32 {
        self.unk
    }

    /// Encodes a held-out split: unseen words become `<unk>`. Returns the ids and the split's
    /// statistics (`<unk>` occurrences after mapping, out-of-vocabulary types and tokens).
    pub fn encode(&self, text: &SplitText) -> (Vec<u32>, SplitStats) {
        let mut ids = Vec::with_capacity(text.as_str().len() / 5);
        let mut oov_types: FxHashSet<&str> = FxHashSet::default();
        let mut stats = SplitStats::default();
        for line in text.lines() {
            stats.lines += 1;
            for word in words(line) {
                let id = match self.index.get(word) {
                    Some(&id) => id,
                    None => {
                        stats.oov_tokens += 1;
                        oov_types.insert(word);
                        self.unk
                    }
                };
                ids.push(id);
            }
            ids.push(self.eos);
        }
        stats.tokens = ids.len();
        stats.unk = ids.iter().filter(|&&id| id == self.unk).count();
        stats.oov_types = oov_types.len();
        (ids, stats)
    }
}

/// Builds a [`Vocab`] from the train split.
#[derive(Debug, Clone)]
pub struct VocabBuilder {
    max_types: usize,
}

impl Default for VocabBuilder {
    fn default() -> Self {
        Self {
            max_types: u32::MAX as usize,
        }
    }
}

impl VocabBuilder {
    /// Caps the number of distinct tokens. The default, `u32::MAX`, is what a `u32` id can address;
    /// a lower cap exists so the overflow path can be exercised without a 4-billion-type corpus.
    pub fn with_max_types(max_types: usize) -> Self {
        Self { max_types }
    }

    /// Counts the train split and returns the vocabulary with the encoded train split. `<eos>` is a
    /// token like any other. If the train split has no `<unk>`, one is added with count 0 (so it is the
    /// last rank): held-out words need an id, and the vocabulary must not depend on held-out text.
    pub fn build(&self, train: &SplitText) -> Result<(Vocab, Vec<u32>, SplitStats), DataError> {
        // First pass: provisional ids in order of first occurrence, so ties are already ordered.
        let mut provisional: FxHashMap<&str, u32> = FxHashMap::default();
        let mut first_seen: Vec<&str> = Vec::new();
        let mut counts: Vec<u64> = Vec::new();
        let mut ids: Vec<u32> = Vec::with_capacity(train.as_str().len() / 5);
        let mut lines = 0;
        let tokens = train.lines().flat_map(|line| {
            lines += 1;
            words(line).chain(std::iter::once(EOS))
        });
        for word in tokens {
            let next = first_seen.len() as u32;
            let id = *provisional.entry(word).or_insert(next);
            if id == next {
                if first_seen.len() >= self.max_types {
                    return Err(DataError::VocabTooLarge {
                        limit: self.max_types,
                    });
                }
                first_seen.push(word);
                counts.push(0);
            }
            counts[id as usize] += 1;
            ids.push(id);
        }
        // Both special tokens always have an id, even for a text with no lines at all.
        for special in [EOS, UNK] {
            if !first_seen.contains(&special) {
                first_seen.push(special);
                counts.push(0);
            }
        }
        if first_seen.len() > self.max_types {
            return Err(DataError::VocabTooLarge {
                limit: self.max_types,
            });
        }

        // Rank order: count descending, first occurrence ascending.
        let mut order: Vec<u32> = (0..first_seen.len() as u32).collect();
        order.sort_unstable_by_key(|&p| (std::cmp::Reverse(counts[p as usize]), p));
        let mut rank_of = vec![0u32; order.len()];
        for (rank, &p) in order.iter().enumerate() {
            rank_of[p as usize] = rank as u32;
        }
        for id in &mut ids {
            *id = rank_of[*id as usize];
        }

        let tokens: Vec<String> = order
            .iter()
            .map(|&p| first_seen[p as usize].to_owned())
            .collect();
        let counts: Vec<u64> = order.iter().map(|&p| counts[p as usize]).collect();
        let index: FxHashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let (eos, unk) = (index[EOS], index[UNK]); // both inserted above
        let stats = SplitStats {
            lines,
            tokens: ids.len(),
            unk: counts[unk as usize] as usize,
            oov_types: 0,
            oov_tokens: 0,
        };
        let vocab = Vocab {
            tokens,
            counts,
            index,
            eos,
            unk,
        };
        Ok((vocab, ids, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> SplitText {
        SplitText::from_bytes("t".into(), s.as_bytes().to_vec(), 1 << 20).expect("valid")
    }

    #[test]
    fn ids_follow_count_then_first_occurrence() {
        // counts: b 3, <eos> 3, a 2, c 2, d 1 ; a appears before c, b before <eos>.
        let (vocab, ids, stats) = VocabBuilder::default()
            .build(&text("a b c\nb c b\na d\n"))
            .expect("builds");
        assert_eq!(vocab.tokens(), ["b", "<eos>", "a", "c", "d", "<unk>"]);
        assert_eq!(vocab.counts(), [3, 3, 2, 2, 1, 0]);
        assert_eq!(ids, [2, 0, 3, 1, 0, 3, 0, 1, 2, 4, 1]);
        assert_eq!((stats.lines, stats.tokens, stats.unk), (3, 11, 0));
        assert_eq!(vocab.id("d"), Some(4));
        assert_eq!(vocab.token(5), Some("<unk>"));
    }

    #[test]
    fn corpus_unk_is_a_normal_token_and_held_out_words_map_to_it() {
        let (vocab, _, stats) = VocabBuilder::default()
            .build(&text("x <unk> x\n\n"))
            .expect("builds");
        assert_eq!(vocab.tokens(), ["x", "<eos>", "<unk>"]);
        assert_eq!(stats.unk, 1);
        let (ids, held) = vocab.encode(&text("x y <unk> y z\n"));
        assert_eq!(ids, [0, 2, 2, 2, 2, 1]);
        assert_eq!(
            (held.tokens, held.unk, held.oov_tokens, held.oov_types),
            (6, 4, 3, 2)
        );
    }

    #[test]
    fn an_empty_text_still_has_both_special_tokens() {
        let (vocab, ids, _) = VocabBuilder::default().build(&text("")).expect("builds");
        assert!(ids.is_empty());
        assert_eq!(vocab.tokens(), ["<eos>", "<unk>"]);
    }

    #[test]
    fn too_many_types_is_an_error_not_a_wrap() {
        let err = VocabBuilder::with_max_types(3)
            .build(&text("a b c d\n"))
            .unwrap_err();
        assert!(
            matches!(err, DataError::VocabTooLarge { limit: 3 }),
            "{err}"
        );
        // Exactly at the cap (a, b, <eos>, <unk>) is fine.
        assert!(
            VocabBuilder::with_max_types(4)
                .build(&text("a b\n"))
                .is_ok()
        );
    }
}
