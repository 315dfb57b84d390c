//! Names the user types: rows of an embedding matrix (`inspect --neighbors`, `export --table
//! neighbors`), a token of the vocabulary or `#ROW`, with close spellings when a word is not
//! there; and the nearest known names an error offers for a mistyped one (`export --metric`).

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

/// Up to `max` tokens within a small edit distance of `word` (Levenshtein, case ignored, at
/// most a third of the word's length and never over 3), nearest first: a typo's fix, and none
/// where nothing is close.
pub fn close_spellings(word: &str, tokens: &[String], max: usize) -> Vec<String> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    let lower = word.to_lowercase();
    let length = lower.chars().count();
    let mut scored: Vec<(usize, &String)> = tokens
        .iter()
        .filter(|t| t.chars().count().abs_diff(length) <= limit)
        .filter_map(|t| {
            let d = strsim::levenshtein(&lower, &t.to_lowercase());
            (d <= limit).then_some((d, t))
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(max)
        .map(|(_, t)| t.clone())
        .collect()
}

/// The `max` names of `known` most like `name` (Jaro–Winkler, which rewards a shared prefix:
/// metric names share their split and group), most alike first, ties in name order. Unlike
/// [`close_spellings`] there is no cutoff: a mistyped metric always gets the nearest few.
pub fn nearest_names<'a>(name: &str, known: &'a [String], max: usize) -> Vec<&'a str> {
    let mut near: Vec<(f64, &String)> = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .collect();
    near.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    near.into_iter()
        .take(max)
        .map(|(_, k)| k.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_spellings_are_within_the_limit_nearest_first() {
        let tokens: Vec<String> = ["sitting", "kitchen", "mitten", "Kitten", "bitter", "kit"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // "kitten" (6 letters) allows 2 edits: Kitten 0 (case ignored), mitten 1, bitter 2,
        // kitchen 2; sitting is 3 away (k→s, e→i, +g) and kit 3 (three deletions).
        assert_eq!(
            close_spellings("kitten", &tokens, 10),
            ["Kitten", "mitten", "bitter", "kitchen"]
        );
        assert_eq!(close_spellings("kitten", &tokens, 2), ["Kitten", "mitten"]);
        assert!(close_spellings("zzzzzz", &tokens, 10).is_empty());
    }

    #[test]
    fn nearest_names_always_names_the_nearest_few() {
        let known: Vec<String> = ["valid/ppl", "valid/uniq", "test/ppl", "embedding/i1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(nearest_names("valid/pll", &known, 1), ["valid/ppl"]);
        assert_eq!(nearest_names("zzz", &known, 9).len(), known.len());
        assert!(nearest_names("valid/ppl", &known, 0).is_empty());
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
