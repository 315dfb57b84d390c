//! The workbench's neighbour search: a fuzzy search over the vocabulary, the top-k neighbours of
//! the selected word in the newest snapshot of W, and pinned words watched as training goes on.
//!
//! The index (unit rows of W) is rebuilt only when a new snapshot arrives and a word is being
//! looked at; queries are exact (the same `NeighborIndex` as `conelab inspect`).

use std::sync::Arc;

use conelab_core::analysis::EmbeddingAnalysis;
use conelab_metrics::neighbors::{Neighbor, NeighborIndex};
use conelab_metrics::{Embeddings, Similarity, Threads};

/// Neighbours listed per word.
pub const K: usize = 10;
/// Matches offered while typing.
pub const MATCHES: usize = 6;
/// Words that can be pinned at once.
pub const MAX_PINNED: usize = 6;

use conelab_protocol::view::Vocabulary;

/// How well `token` matches `query` (lower is better): exact, prefix, substring, then a
/// subsequence (its letters in order), case-insensitively; `None` when it does not match. An
/// empty query matches every word alike, so an empty search offers the most frequent words
/// (issue #58: it listed nothing, and a new user had no word to start from).
pub fn match_score(query: &str, token: &str) -> Option<u32> {
    if query.is_empty() {
        return Some(0);
    }
    let q = query.to_lowercase();
    let t = token.to_lowercase();
    if t == q {
        return Some(0);
    }
    if t.starts_with(&q) {
        return Some(1);
    }
    if t.contains(&q) {
        return Some(2);
    }
    // Subsequence: penalise the letters skipped between matches.
    let mut gaps = 0u32;
    let mut chars = t.chars();
    for qc in q.chars() {
        let mut skipped = 0u32;
        loop {
            match chars.next() {
                Some(tc) if tc == qc => break,
                Some(_) => skipped += 1,
                None => return None,
            }
        }
        gaps += skipped;
    }
    Some(3 + gaps)
}

/// The best `limit` matches of `query`, best first; ties go to the more frequent word.
pub fn fuzzy_matches(query: &str, vocab: &Vocabulary, limit: usize) -> Vec<u32> {
    let count = |i: usize| vocab.counts.get(i).copied().unwrap_or(0);
    let mut scored: Vec<(u32, std::cmp::Reverse<u64>, u32)> = vocab
        .tokens
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            match_score(query, t).map(|s| (s, std::cmp::Reverse(count(i)), i as u32))
        })
        .collect();
    scored.sort_unstable();
    scored
        .into_iter()
        .take(limit)
        .map(|(_, _, id)| id)
        .collect()
}

#[derive(Debug, Clone, Default)]
pub struct NeighborsState {
    pub query: String,
    /// The search box has the keyboard.
    pub editing: bool,
    pub matches: Vec<u32>,
    pub cursor: usize,
    pub selected: Option<u32>,
    pub pinned: Vec<u32>,
    /// (word, its neighbours) for the selected word, then the pinned ones.
    pub results: Vec<(u32, Vec<Neighbor>)>,
    /// Step of the snapshot the results come from.
    pub step: Option<u64>,
    index: Option<(u64, Arc<NeighborIndex>)>,
}

impl NeighborsState {
    /// `/`: a new search (the previous query is cleared).
    pub fn start_search(&mut self) {
        self.editing = true;
        self.query.clear();
        self.matches.clear();
        self.cursor = 0;
    }

    pub fn input(&mut self, c: char, vocab: &Vocabulary) {
        self.query.push(c);
        self.rematch(vocab);
    }

    pub fn backspace(&mut self, vocab: &Vocabulary) {
        self.query.pop();
        self.rematch(vocab);
    }

    /// The matches of the query as it is (all words, the most frequent first, while empty).
    pub fn rematch(&mut self, vocab: &Vocabulary) {
        self.matches = fuzzy_matches(&self.query, vocab, MATCHES);
        self.cursor = 0;
    }

    pub fn move_cursor(&mut self, delta: i32) {
        let n = self.matches.len();
        if n > 0 {
            self.cursor = (self.cursor as i64 + delta as i64).rem_euclid(n as i64) as usize;
        }
    }

    /// Enter: select the highlighted match and close the box.
    pub fn accept(&mut self, analysis: Option<&EmbeddingAnalysis>) {
        if let Some(&id) = self.matches.get(self.cursor) {
            self.selected = Some(id);
        }
        self.editing = false;
        self.refresh(analysis);
    }

    pub fn cancel(&mut self) {
        self.editing = false;
    }

    /// Pins the selected word (or unpins it).
    pub fn toggle_pin(&mut self, analysis: Option<&EmbeddingAnalysis>) {
        let Some(id) = self.selected else {
            return;
        };
        if let Some(i) = self.pinned.iter().position(|&p| p == id) {
            self.pinned.remove(i);
        } else {
            if self.pinned.len() == MAX_PINNED {
                self.pinned.remove(0);
            }
            self.pinned.push(id);
        }
        self.refresh(analysis);
    }

    /// Words whose neighbours are shown: the selected one first, then the pinned ones.
    pub fn watched(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.selected.into_iter().collect();
        v.extend(self.pinned.iter().filter(|p| Some(**p) != self.selected));
        v
    }

    /// Neighbours as the run answered them (a viewer of a run asks instead of computing).
    pub fn set_results(
        &mut self,
        step: Option<u64>,
        results: Vec<conelab_protocol::message::WordNeighbors>,
    ) {
        let watched = self.watched();
        self.results = watched
            .iter()
            .filter_map(|w| {
                results
                    .iter()
                    .find(|r| r.word == *w)
                    .map(|r| (r.word, r.neighbors.clone()))
            })
            .collect();
        self.step = step;
    }

    /// Recomputes the neighbours from the newest snapshot (the index only when W changed).
    pub fn refresh(&mut self, analysis: Option<&EmbeddingAnalysis>) {
        let watched = self.watched();
        let Some(a) = analysis else {
            return;
        };
        if watched.is_empty() {
            self.results.clear();
            return;
        }
        let snap = &a.snapshot;
        let fresh = self.index.as_ref().is_some_and(|(s, _)| *s == snap.step);
        if !fresh {
            let Ok(w) = Embeddings::new(snap.n, snap.d, &snap.weights) else {
                return;
            };
            self.index = Some((
                snap.step,
                Arc::new(NeighborIndex::new(w, Threads::Sequential)),
            ));
        }
        let Some((step, index)) = &self.index else {
            return;
        };
        self.results = watched
            .into_iter()
            .filter(|&id| (id as usize) < index.len())
            .map(|id| (id, index.query(id, K, Similarity::Cosine)))
            .collect();
        self.step = Some(*step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(words: &[&str]) -> Vocabulary {
        Vocabulary {
            tokens: words.iter().map(|w| w.to_string()).collect(),
            counts: (0..words.len() as u64).rev().collect(),
        }
    }

    #[test]
    fn matches_rank_exact_then_prefix_then_substring_then_subsequence() {
        let v = vocab(&["the", "other", "them", "theory", "thermal", "tahe", "x"]);
        assert_eq!(fuzzy_matches("the", &v, 10), vec![0, 2, 3, 4, 1, 5]);
        assert_eq!(match_score("thm", "thermal"), Some(3 + 2));
        assert_eq!(match_score("THE", "the"), Some(0), "case-insensitive");
        assert_eq!(match_score("zz", "the"), None);
        // Empty: the most frequent words (here the first are the most frequent).
        assert_eq!(fuzzy_matches("", &v, 3), vec![0, 1, 2]);
        assert_eq!(fuzzy_matches("the", &v, 2), vec![0, 2]);
    }

    #[test]
    fn pins_are_capped_and_toggle() {
        let mut s = NeighborsState {
            selected: Some(3),
            ..NeighborsState::default()
        };
        s.toggle_pin(None);
        assert_eq!(s.pinned, vec![3]);
        s.toggle_pin(None);
        assert!(s.pinned.is_empty());
        for id in 0..(MAX_PINNED as u32 + 2) {
            s.selected = Some(id);
            s.toggle_pin(None);
        }
        assert_eq!(s.pinned.len(), MAX_PINNED);
        assert_eq!(s.pinned[0], 2, "the oldest pins go first");
        assert_eq!(
            s.watched()[0],
            MAX_PINNED as u32 + 1,
            "the selected word leads"
        );
    }
}
