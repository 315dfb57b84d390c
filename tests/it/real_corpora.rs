//! The loader against the published counts of PTB and WikiText-2 (methods.md §1). Skipped, with the
//! reason printed, when `../shared/datasets` is absent.

use conelab_data::{Corpus, CorpusSource, Group, LoadOptions, PartialWindow, Split, StreamBatcher};

fn load(name: &str) -> Option<Corpus> {
    let dir = crate::harness::shared_dataset(name)?;
    Some(Corpus::load(&CorpusSource::Dir(dir), &LoadOptions::default()).expect("loads"))
}

fn check(corpus: &Corpus, tokens: [usize; 3], vocab: usize, groups: [usize; 3]) {
    let counted = Split::ALL.map(|s| corpus.split(s).len());
    assert_eq!(counted, tokens);
    assert_eq!(Split::ALL.map(|s| corpus.stats(s).tokens), tokens);
    assert_eq!(corpus.vocab().len(), vocab);
    assert_eq!(Group::ALL.map(|g| corpus.groups().size(g)), groups);
    // Held-out words all occur in train for both corpora.
    assert_eq!(corpus.stats(Split::Valid).oov_types, 0);
    assert_eq!(corpus.stats(Split::Test).oov_types, 0);
    // Ids are frequency ranks: counts never increase with the id.
    let counts = corpus.vocab().counts();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]));
    // Counts recomputed independently from the encoded train split.
    let mut recount = vec![0u64; vocab];
    for &id in corpus.split(Split::Train) {
        recount[id as usize] += 1;
    }
    assert_eq!(recount, counts);
    // The most frequent group never has a count below the medium group's, and so on.
    let summary = corpus.groups().summary(counts);
    assert!(summary[0].1.min_count >= summary[1].1.max_count);
    assert!(summary[1].1.min_count >= summary[2].1.max_count);
}

#[test]
fn ptb_counts_match_the_published_figures() {
    let Some(c) = load("ptb") else { return };
    check(&c, [929_589, 73_760, 82_430], 10_000, [3_000, 5_000, 2_000]);
    assert_eq!(c.stats(Split::Train).lines, 42_068);
    assert_eq!(c.stats(Split::Train).unk, 45_020);
    assert_eq!(c.stats(Split::Valid).unk, 3_485);
    assert_eq!(c.stats(Split::Test).unk, 4_794);
    // "the" is PTB's most frequent word; <eos> has one occurrence per line.
    assert_eq!(c.vocab().token(0), Some("the"));
    let eos = c.vocab().eos();
    assert_eq!(c.vocab().counts()[eos as usize], 42_068);
}

#[test]
fn wikitext2_counts_match_the_published_figures() {
    let Some(c) = load("wikitext-2") else { return };
    check(
        &c,
        [2_088_628, 217_646, 245_569],
        33_278,
        [9_983, 16_639, 6_656],
    );
    assert_eq!(c.stats(Split::Train).lines, 36_718);
    assert_eq!(c.stats(Split::Train).unk, 54_625);
    assert_eq!(c.stats(Split::Valid).unk, 11_718);
    assert_eq!(c.stats(Split::Test).unk, 15_218);
}

#[test]
fn ptb_batches_reassemble_the_split() {
    let Some(c) = load("ptb") else { return };
    let valid = c.split(Split::Valid);
    let sb = StreamBatcher::new(valid, 20, 35, PartialWindow::Keep).expect("shape");
    let mut positions = 0;
    for b in sb.iter().chain(sb.leftover()) {
        positions += b.targets.len();
    }
    assert_eq!(
        positions,
        valid.len() - 1,
        "every prediction position exactly once"
    );
}

/// Issue #38: the reference models of methods.md §2 on PTB. Plain interpolated Kneser–Ney
/// (one discount, 0.75) against the per-group figures methods.md quotes for it (PTB valid
/// 97 / 18.3k / 141k, computed elsewhere); modified KN beside it, better in total.
#[test]
fn ptb_reference_models_match_the_quoted_kneser_ney_figures() {
    use conelab_metrics::ngram::{KneserNey, group_ppl, unigram_nll};
    let Some(c) = load("ptb") else { return };
    let (train, valid) = (c.split(Split::Train), c.split(Split::Valid));
    let targets = || {
        valid.iter().skip(1).map(|&w| {
            Group::ALL
                .iter()
                .position(|&g| g == c.groups().group_of(w))
                .unwrap()
        })
    };
    let modified = KneserNey::train(train, c.vocab().len()).expect("KN-3");
    let (m_groups, m_total) = group_ppl(&modified.nll(valid).expect("scores"), targets());
    let plain = modified.clone().with_single_discount(0.75);
    let (p_groups, p_total) = group_ppl(&plain.nll(valid).expect("scores"), targets());
    // Measured: 96.9 / 18,333 / 143,939 (the Rare figure 2 % above: methods.md rounds, and
    // the start of a split and the uniform floor are details two implementations may differ in).
    for (got, want) in p_groups.iter().zip([97.0, 18_300.0, 141_000.0]) {
        assert!(
            (got / want - 1.0).abs() < 0.025,
            "plain KN {p_groups:?} vs methods.md's 97 / 18.3k / 141k"
        );
    }
    assert!(m_total < p_total, "modified {m_total} vs plain {p_total}");
    // Modified KN gives the rare words more of the lower orders' mass: Medium and Rare PPL are
    // well below plain KN's (15.4k and 96.5k measured), not "within a few per cent".
    assert!(m_groups[1] < p_groups[1] && m_groups[2] < p_groups[2]);
    // The published range of trigram KN on PTB valid: 140–170.
    assert!((140.0..170.0).contains(&m_total), "{m_total}");
    // Each group's reference is far better than the unigram model's.
    let (u_groups, _) = group_ppl(
        &unigram_nll(train, valid, c.vocab().len()).expect("unigram"),
        targets(),
    );
    for g in 0..3 {
        assert!(m_groups[g] < u_groups[g], "{m_groups:?} vs {u_groups:?}");
    }
}
