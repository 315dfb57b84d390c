//! The loader against the published counts of PTB and WikiText-2 (methods.md §1). Skipped, with the
//! reason printed, when `../shared/datasets` is absent.

use conelab::data::{
    Corpus, CorpusSource, Group, LoadOptions, PartialWindow, Split, StreamBatcher,
};

fn load(name: &str) -> Option<Corpus> {
    let dir = crate::common::shared_dataset(name)?;
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
