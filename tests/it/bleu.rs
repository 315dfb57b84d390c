//! Corpus BLEU and chrF (`conelab_metrics::bleu`, `conelab_metrics::chrf`) against sacreBLEU 2.4.3
//! itself, on the German side of Multi30k's test split as references and system outputs made
//! from it by deterministic edits; and on raw text (capitals, attached punctuation, HTML
//! entities, numbers) for the 13a tokeniser. Every case is scored with tokenize none and 13a,
//! case kept and lower-cased; chrF with and without eps smoothing. The scores must agree within
//! 0.01, the n-gram statistics and lengths exactly, and the signature strings character for
//! character. The data set's text is read at run time and written only to a temporary folder.

use std::path::{Path, PathBuf};

use conelab_metrics::bleu::{BleuOptions, BleuTokenize, corpus_bleu};
use conelab_metrics::chrf::{ChrfOptions, corpus_chrf};
use serde_json::{Value, json};

use crate::harness::{python_run, python_with, s, skip_or_fail};

const SACREBLEU: &str = "sacrebleu==2.4.3";

/// Largest allowed |ours − sacreBLEU| of a score (0–100 scale).
const TOLERANCE: f64 = 0.01;

/// Scores every case of the JSON file `argv[1]` with sacreBLEU; prints one JSON list of rows.
const SACREBLEU_SCRIPT: &str = r#"
import json, sys
from sacrebleu.metrics import BLEU, CHRF

with open(sys.argv[1], encoding="utf-8") as f:
    cases = json.load(f)
rows = []
for case in cases:
    hyps, refs = case["hypotheses"], case["references"]
    for tokenize in ("none", "13a"):
        for lowercase in (False, True):
            metric = BLEU(tokenize=tokenize, lowercase=lowercase)
            score = metric.corpus_score(hyps, refs)
            rows.append(dict(case=case["name"], metric="bleu", tokenize=tokenize,
                             lowercase=lowercase, eps_smoothing=False, score=score.score,
                             counts=list(score.counts), totals=list(score.totals),
                             sys_len=score.sys_len, ref_len=score.ref_len,
                             signature=str(metric.get_signature())))
    for lowercase in (False, True):
        for eps_smoothing in (False, True):
            metric = CHRF(lowercase=lowercase, eps_smoothing=eps_smoothing)
            score = metric.corpus_score(hyps, refs)
            rows.append(dict(case=case["name"], metric="chrf", tokenize="",
                             lowercase=lowercase, eps_smoothing=eps_smoothing,
                             score=score.score, counts=[], totals=[], sys_len=0, ref_len=0,
                             signature=str(metric.get_signature())))
print(json.dumps(rows))
"#;

/// One system output and its reference sets, as sacreBLEU's `corpus_score` takes them.
struct Case {
    name: String,
    hypotheses: Vec<String>,
    references: Vec<Vec<String>>,
}

/// One score sacreBLEU printed.
struct SacrebleuRow {
    case: String,
    metric: String,
    tokenize: String,
    lowercase: bool,
    eps_smoothing: bool,
    score: f64,
    counts: Vec<usize>,
    totals: Vec<usize>,
    sys_len: usize,
    ref_len: usize,
    signature: String,
}

impl SacrebleuRow {
    fn from_json(row: &Value) -> Self {
        let text = |key: &str| row[key].as_str().expect(key).to_owned();
        let flag = |key: &str| row[key].as_bool().expect(key);
        let count = |value: &Value| value.as_u64().expect("a count") as usize;
        let counts = |key: &str| row[key].as_array().expect(key).iter().map(count).collect();
        Self {
            case: text("case"),
            metric: text("metric"),
            tokenize: text("tokenize"),
            lowercase: flag("lowercase"),
            eps_smoothing: flag("eps_smoothing"),
            score: row["score"].as_f64().expect("score"),
            counts: counts("counts"),
            totals: counts("totals"),
            sys_len: count(&row["sys_len"]),
            ref_len: count(&row["ref_len"]),
            signature: text("signature"),
        }
    }
}

/// The German side of Multi30k's test split, one sentence a line. (`harness::shared_dataset`
/// wants a `train.txt`, which Multi30k — `train.de`, `train.en` — does not have; the same root
/// and the same CI rule here.)
fn multi30k_test_german() -> Option<Vec<String>> {
    let root = std::env::var_os("CONELAB_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets"));
    let path = root.join("multi30k/test.de");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(text.lines().map(str::to_owned).collect()),
        Err(error) => {
            skip_or_fail(&format!(
                "{} not readable ({error}): set CONELAB_DATASETS to the folder holding multi30k/",
                path.display()
            ));
            None
        }
    }
}

/// A system output: `edit` applied to each reference line's words (line number, words).
fn system(references: &[String], edit: impl Fn(usize, Vec<&str>) -> Vec<String>) -> Vec<String> {
    references
        .iter()
        .enumerate()
        .map(|(line, reference)| edit(line, reference.split_whitespace().collect()).join(" "))
        .collect()
}

fn owned(words: Vec<&str>) -> Vec<String> {
    words.into_iter().map(str::to_owned).collect()
}

fn drop_every_fifth(_line: usize, words: Vec<&str>) -> Vec<String> {
    words
        .into_iter()
        .enumerate()
        .filter(|(index, _)| index % 5 != 4)
        .map(|(_, word)| word.to_owned())
        .collect()
}

fn swap_adjacent(_line: usize, mut words: Vec<&str>) -> Vec<String> {
    for pair in words.chunks_mut(2) {
        pair.reverse();
    }
    owned(words)
}

/// One word a line (its position depends on the line) becomes "katze".
fn replace_one_word(line: usize, mut words: Vec<&str>) -> Vec<String> {
    if !words.is_empty() {
        let position = line % words.len();
        words[position] = if words[position] == "katze" {
            "hund"
        } else {
            "katze"
        };
    }
    owned(words)
}

/// The first 60 % of the words (rounded up).
fn truncate(_line: usize, words: Vec<&str>) -> Vec<String> {
    let keep = (words.len() * 3).div_ceil(5);
    owned(words[..keep].to_vec())
}

/// Per line in turn: the reference itself, an empty line, its first two words, every fifth word
/// dropped.
fn mixed_with_empty_lines(line: usize, words: Vec<&str>) -> Vec<String> {
    match line % 4 {
        0 => owned(words),
        1 => Vec::new(),
        2 => owned(words.into_iter().take(2).collect()),
        _ => drop_every_fifth(line, words),
    }
}

/// Tokenised, lower-cased words made into raw text: punctuation attached, the first letter
/// capitalised, quotes and "und" as HTML entities (or, with `plain`, as the characters), and
/// numbers, dashes and tags on some lines.
fn raw_text(line: usize, words: &[String], plain: bool) -> String {
    let mut text = String::new();
    for word in words {
        let attached = matches!(word.as_str(), "," | "." | "!" | "?" | ":" | ";");
        if !text.is_empty() && !attached {
            text.push(if line.is_multiple_of(17) {
                '\u{a0}'
            } else {
                ' '
            });
        }
        if word == "und" && line % 2 == 1 {
            text.push_str(if plain { "&" } else { "&amp;" });
        } else {
            text.push_str(word);
        }
    }
    let mut chars = text.chars();
    let mut text = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    };
    if line.is_multiple_of(3) {
        let quote = if plain { "\"" } else { "&quot;" };
        text = format!("{quote}{text}{quote}");
    }
    if line.is_multiple_of(5) {
        text.push_str(" (3.14, 1,000; 10-20 - x-ray.)");
    }
    if line.is_multiple_of(11) {
        text.push_str(" &lt;b&gt;U.S.A.&lt;/b&gt; $5.");
    }
    if line.is_multiple_of(13) && plain {
        text.push_str(" wort-\nbruch\t ");
    }
    text
}

/// Writes the cases where sacreBLEU reads them and returns its rows.
fn sacrebleu_rows(python: &Path, cases: &[Case]) -> Vec<SacrebleuRow> {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("cases.json");
    let cases: Vec<Value> = cases
        .iter()
        .map(|case| {
            json!({
                "name": case.name,
                "hypotheses": case.hypotheses,
                "references": case.references,
            })
        })
        .collect();
    std::fs::write(&input, Value::Array(cases).to_string()).expect("write cases");
    let output = python_run(python, SACREBLEU_SCRIPT, &[s(&input)]);
    let rows: Value = serde_json::from_str(&output).expect("sacreBLEU's JSON");
    rows.as_array()
        .expect("a list of rows")
        .iter()
        .map(SacrebleuRow::from_json)
        .collect()
}

/// Scores every case as sacreBLEU did and compares; returns the largest |difference|.
fn compare(cases: &[Case], rows: &[SacrebleuRow]) -> f64 {
    assert_eq!(
        rows.len(),
        cases.len() * 8,
        "4 BLEU and 4 chrF rows per case"
    );
    let mut largest_difference: f64 = 0.0;
    for row in rows {
        let case = cases
            .iter()
            .find(|case| case.name == row.case)
            .expect("a case of ours");
        let setting = format!(
            "{} {} tok={} lowercase={} eps={}",
            row.case, row.metric, row.tokenize, row.lowercase, row.eps_smoothing
        );
        let (ours, signature) = if row.metric == "bleu" {
            let tokenize = match row.tokenize.as_str() {
                "none" => BleuTokenize::None,
                _ => BleuTokenize::Mteval13a,
            };
            let options = BleuOptions {
                tokenize,
                lowercase: row.lowercase,
            };
            let score = corpus_bleu(&case.hypotheses, &case.references, &options)
                .unwrap_or_else(|e| panic!("{setting}: {e}"));
            assert_eq!(score.matching_ngrams.to_vec(), row.counts, "{setting}");
            assert_eq!(score.hypothesis_ngrams.to_vec(), row.totals, "{setting}");
            assert_eq!(score.hypothesis_length, row.sys_len, "{setting}");
            assert_eq!(score.reference_length, row.ref_len, "{setting}");
            (score.score, score.signature())
        } else {
            let options = ChrfOptions {
                lowercase: row.lowercase,
                eps_smoothing: row.eps_smoothing,
            };
            let score = corpus_chrf(&case.hypotheses, &case.references, &options)
                .unwrap_or_else(|e| panic!("{setting}: {e}"));
            (score.score, score.signature())
        };
        let difference = (ours - row.score).abs();
        println!(
            "{setting}: ours {ours:.6}, sacreBLEU {:.6}, |diff| {difference:.2e}",
            row.score
        );
        assert!(
            difference <= TOLERANCE,
            "{setting}: ours {ours} vs sacreBLEU {}",
            row.score
        );
        assert_eq!(signature, row.signature, "{setting}");
        largest_difference = largest_difference.max(difference);
    }
    largest_difference
}

#[test]
fn bleu_and_chrf_of_edited_multi30k_outputs_match_sacrebleu() {
    let Some(references) = multi30k_test_german() else {
        return;
    };
    let Some(python) = python_with(&[SACREBLEU]) else {
        return;
    };
    type Edit = fn(usize, Vec<&str>) -> Vec<String>;
    let edits: [(&str, Edit); 7] = [
        ("identical", |_, words| owned(words)),
        ("drop every fifth word", drop_every_fifth),
        ("swap adjacent words", swap_adjacent),
        ("replace one word", replace_one_word),
        ("truncate to 60 %", truncate),
        ("mixed with empty lines", mixed_with_empty_lines),
        ("empty", |_, _| Vec::new()),
    ];
    let mut cases: Vec<Case> = edits
        .iter()
        .map(|(name, edit)| Case {
            name: (*name).to_owned(),
            hypotheses: system(&references, edit),
            references: vec![references.clone()],
        })
        .collect();
    cases.push(Case {
        name: "two references".to_owned(),
        hypotheses: system(&references, drop_every_fifth),
        references: vec![references.clone(), system(&references, swap_adjacent)],
    });
    let rows = sacrebleu_rows(&python, &cases);
    let identical = rows
        .iter()
        .find(|row| row.case == "identical" && row.metric == "bleu")
        .expect("the identical case");
    assert!((identical.score - 100.0).abs() < 1e-9);
    let largest = compare(&cases, &rows);
    println!(
        "largest |ours − sacreBLEU| over {} scores: {largest:.3e}",
        rows.len()
    );
}

#[test]
fn bleu_and_chrf_of_raw_text_match_sacrebleu() {
    let Some(references) = multi30k_test_german() else {
        return;
    };
    let Some(python) = python_with(&[SACREBLEU]) else {
        return;
    };
    let words = |lines: &[String]| -> Vec<Vec<String>> {
        lines
            .iter()
            .map(|line| line.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    let reference_words = words(&references);
    let raw_references: Vec<String> = reference_words
        .iter()
        .enumerate()
        .map(|(line, words)| raw_text(line, words, false))
        .collect();
    let mut cases = Vec::new();
    for (name, edit) in [
        (
            "raw, identical",
            (|_, words| owned(words)) as fn(usize, Vec<&str>) -> Vec<String>,
        ),
        ("raw, drop every fifth word", drop_every_fifth),
        ("raw, swap adjacent words", swap_adjacent),
    ] {
        let hypotheses = words(&system(&references, edit))
            .iter()
            .enumerate()
            // Every seventh line spells its entities as the characters themselves.
            .map(|(line, words)| raw_text(line, words, line % 7 == 0))
            .collect();
        cases.push(Case {
            name: name.to_owned(),
            hypotheses,
            references: vec![raw_references.clone()],
        });
    }
    // Case that only lower-casing undoes: every other line all lower case, every sixth one
    // upper case ("&AMP;" is then no entity unless lower-cased first, "ß" becomes "SS").
    let hypotheses = reference_words
        .iter()
        .enumerate()
        .map(|(line, words)| {
            let text = raw_text(line, words, line % 7 == 0);
            match line % 6 {
                0 | 2 | 4 => text.to_lowercase(),
                1 => text.to_uppercase(),
                _ => text,
            }
        })
        .collect();
    cases.push(Case {
        name: "raw, case changed".to_owned(),
        hypotheses,
        references: vec![raw_references.clone()],
    });
    let rows = sacrebleu_rows(&python, &cases);
    let largest = compare(&cases, &rows);
    println!(
        "largest |ours − sacreBLEU| over {} scores: {largest:.3e}",
        rows.len()
    );
}
