//! The built-in synthetic corpus: Zipf slope, determinism, coverage of classes, files.

use conelab_data::{
    Corpus, CorpusSource, LoadOptions, Split, SynthConfig, SyntheticCorpus, zipf_exponent,
};

#[test]
fn default_corpus_is_zipfian_with_the_target_exponent() {
    let corpus = Corpus::load(&CorpusSource::parse("synthetic"), &LoadOptions::default())
        .expect("generates");
    let s = zipf_exponent(corpus.vocab().counts());
    assert!((s - 1.0).abs() <= 0.15, "measured exponent {s}");
    let train = corpus.stats(Split::Train).tokens;
    assert!((1_000_000..1_000_100).contains(&train), "{train}");
    let valid = corpus.stats(Split::Valid).tokens;
    assert!((50_000..50_100).contains(&valid), "{valid}");
}

#[test]
fn other_exponents_are_met_too() {
    for zipf in [0.8, 1.2] {
        let cfg = SynthConfig {
            zipf,
            vocab: 3_000,
            tokens: 400_000,
            classes: 30,
            ..SynthConfig::default()
        };
        let synth = SyntheticCorpus::generate(&cfg).expect("generates");
        let [train, valid, test] = synth.into_split_texts(usize::MAX).expect("valid text");
        let corpus = Corpus::from_texts("t".into(), train, valid, test, &LoadOptions::default())
            .expect("loads");
        let s = zipf_exponent(corpus.vocab().counts());
        assert!((s - zipf).abs() <= 0.15, "target {zipf}, measured {s}");
    }
}

#[test]
fn one_seed_gives_byte_identical_files_and_another_seed_does_not() {
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let c = tempfile::tempdir().expect("tempdir");
    let run = |dir: &std::path::Path, seed: &str| {
        let out = crate::harness::conelab(&[
            "data",
            "synth",
            "--out",
            dir.to_str().expect("utf-8 path"),
            "--seed",
            seed,
            "--tokens",
            "200000",
            "--vocab",
            "2000",
            "--classes",
            "20",
        ]);
        crate::harness::succeeded(&out);
    };
    run(a.path(), "7");
    run(b.path(), "7");
    run(c.path(), "8");
    for name in ["train.txt", "valid.txt", "test.txt", "classes.tsv"] {
        let read =
            |d: &tempfile::TempDir| std::fs::read(d.path().join(name)).expect("file written");
        assert_eq!(
            read(&a),
            read(&b),
            "{name} differs between two runs of one seed"
        );
        if name != "classes.tsv" {
            assert_ne!(read(&a), read(&c), "{name} is the same for two seeds");
        }
    }
}

#[test]
fn every_class_appears_and_classes_tsv_covers_every_word() {
    let cfg = SynthConfig::default();
    let synth = SyntheticCorpus::generate(&cfg).expect("generates");
    let tsv = synth.classes_tsv();
    let mut lines = tsv.lines();
    assert_eq!(lines.next(), Some("token\tclass"));
    let class_of: std::collections::HashMap<&str, usize> = lines
        .map(|l| {
            let (w, c) = l.split_once('\t').expect("two columns");
            (w, c.parse().expect("class id"))
        })
        .collect();
    assert_eq!(class_of.len(), cfg.vocab);
    let mut seen = vec![0usize; cfg.classes];
    for word in synth.texts()[0].split_whitespace() {
        seen[class_of[word]] += 1;
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "a class never appears: {seen:?}"
    );
    // Words of one class share contexts: the successor-class distribution of a class is far from
    // that of the corpus as a whole (the chain has structure, not independent draws).
    let words: Vec<usize> = synth.texts()[0]
        .lines()
        .flat_map(|l| {
            l.split_whitespace()
                .map(|w| class_of[w])
                .collect::<Vec<_>>()
                .windows(2)
                .map(|p| p[0] * cfg.classes + p[1])
                .collect::<Vec<_>>()
        })
        .collect();
    let mut pair = vec![0f64; cfg.classes * cfg.classes];
    for &p in &words {
        pair[p] += 1.0;
    }
    let total: f64 = pair.iter().sum();
    let row: Vec<f64> = (0..cfg.classes)
        .map(|a| pair[a * cfg.classes..(a + 1) * cfg.classes].iter().sum())
        .collect();
    let col: Vec<f64> = (0..cfg.classes)
        .map(|b| (0..cfg.classes).map(|a| pair[a * cfg.classes + b]).sum())
        .collect();
    // Mutual information between a class and the next one, in nats; independent draws give ~0.
    let mi: f64 = (0..cfg.classes * cfg.classes)
        .filter(|&i| pair[i] > 0.0)
        .map(|i| {
            let p = pair[i] / total;
            p * (p / (row[i / cfg.classes] / total * col[i % cfg.classes] / total)).ln()
        })
        .sum();
    assert!(mi > 1.0, "class bigram mutual information {mi} nats");
}
