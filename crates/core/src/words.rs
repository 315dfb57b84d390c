//! Rows of an embedding matrix named by the user (`inspect --neighbors`, `export --table
//! neighbors`): a token of the vocabulary, or `#ROW`, with close spellings when a word is not
//! there.

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WordError {
    #[error("unknown word {word:?}{}", suggestions(.close))]
    UnknownWord { word: String, close: Vec<String> },
    #[error("row {row} is out of range (the matrix has {n} rows)")]
    RowOutOfRange { row: usize, n: usize },
}

fn suggestions(close: &[String]) -> String {
    if close.is_empty() {
        " (no close spelling in the vocabulary)".into()
    } else {
        format!("; close spellings: {}", close.join(", "))
    }
}

/// Rows named by the user: a token of the vocabulary, or `#ROW` (and a bare number when the
/// matrix has no vocabulary).
pub fn resolve_word(word: &str, tokens: Option<&[String]>, n: usize) -> Result<u32, WordError> {
    if let Some(tokens) = tokens
        && let Some(i) = tokens.iter().position(|t| t == word)
    {
        return Ok(i as u32);
    }
    let numeric = word.strip_prefix('#').or(tokens.is_none().then_some(word));
    if let Some(row) = numeric.and_then(|s| s.parse::<usize>().ok()) {
        return if row < n {
            Ok(row as u32)
        } else {
            Err(WordError::RowOutOfRange { row, n })
        };
    }
    Err(WordError::UnknownWord {
        word: word.to_owned(),
        close: tokens
            .map(|t| close_spellings(word, t, 5))
            .unwrap_or_default(),
    })
}

/// Up to `max` tokens within a small edit distance of `word` (nearest first).
pub fn close_spellings(word: &str, tokens: &[String], max: usize) -> Vec<String> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    let lower = word.to_lowercase();
    let mut scored: Vec<(usize, &String)> = tokens
        .iter()
        .filter_map(|t| {
            let d = edit_distance(&lower, &t.to_lowercase(), limit)?;
            Some((d, t))
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(max)
        .map(|(_, t)| t.clone())
        .collect()
}

/// Levenshtein distance, or `None` when it exceeds `limit`.
fn edit_distance(a: &str, b: &str, limit: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        if cur.iter().min().is_some_and(|&m| m > limit) {
            return None;
        }
        prev = cur;
    }
    let d = prev[b.len()];
    (d <= limit).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_is_levenshtein_with_a_limit() {
        assert_eq!(edit_distance("kitten", "sitting", 3), Some(3));
        assert_eq!(edit_distance("kitten", "sitting", 2), None);
        assert_eq!(edit_distance("", "ab", 2), Some(2));
        assert_eq!(edit_distance("same", "same", 1), Some(0));
    }

    #[test]
    fn unknown_words_suggest_close_spellings() {
        let tokens: Vec<String> = ["house", "horse", "mouse", "apple"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let err = resolve_word("hous", Some(&tokens), 4).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("\"hous\"") && msg.contains("house"), "{msg}");
        assert!(!msg.contains("apple"), "{msg}");
        assert_eq!(resolve_word("#2", Some(&tokens), 4).unwrap(), 2);
        assert!(matches!(
            resolve_word("#9", Some(&tokens), 4),
            Err(WordError::RowOutOfRange { .. })
        ));
        // Without a vocabulary, bare numbers are rows.
        assert_eq!(resolve_word("3", None, 4).unwrap(), 3);
    }
}
