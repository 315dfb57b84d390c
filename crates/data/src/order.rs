//! The order of the training text (`--data-seed`): its lines — the `<eos>`-ended sentences of
//! PTB, the paragraphs of WikiText — shuffled by a seed before the text is cut into the batch's
//! contiguous streams, so that seeds can vary the data order as well as the initialisation
//! (methods.md §4, point 5). Without a data seed the text keeps its own order.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// Uniform in 0 ..= n − 1 (Lemire's multiply-shift; the bias is below n/2⁶⁴).
pub fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    ((u128::from(rng.next_u64()) * n as u128) >> 64) as usize
}

/// `ids` with its lines (runs ending in `eos`) in an order given by `seed`: a Fisher–Yates
/// permutation driven by ChaCha8 (the synthetic corpus's generator, reproducible everywhere), every line whole, the same for the same seed. A last line without an `eos`
/// stays last (moved, it would run into the line after it).
pub fn shuffle_lines(ids: &[u32], eos: u32, seed: u64) -> Vec<u32> {
    let mut lines: Vec<&[u32]> = ids.split_inclusive(|&t| t == eos).collect();
    let tail = lines.pop_if(|l| l.last() != Some(&eos));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in (1..lines.len()).rev() {
        lines.swap(i, below(&mut rng, i + 1));
    }
    lines.extend(tail);
    lines.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_permuted_whole_and_reproducibly() {
        const E: u32 = 0;
        // Ten lines "k k+100 <eos>", and a last line without an <eos>.
        let mut ids: Vec<u32> = (1..=10).flat_map(|k| [k, k + 100, E]).collect();
        ids.extend([77, 78]);
        let a = shuffle_lines(&ids, E, 7);
        assert_eq!(
            a,
            shuffle_lines(&ids, E, 7),
            "the same seed, the same order"
        );
        assert_ne!(a, ids, "an order of its own");
        assert_ne!(a, shuffle_lines(&ids, E, 8), "another seed, another order");
        // The same lines, each whole: split both and compare as multisets.
        let lines = |v: &[u32]| {
            let mut l: Vec<Vec<u32>> = v
                .split_inclusive(|&t| t == E)
                .map(<[u32]>::to_vec)
                .collect();
            l.sort();
            l
        };
        assert_eq!(lines(&a), lines(&ids));
        assert_eq!(a.len(), ids.len());
        // The unfinished last line stays last, whole.
        assert_eq!(&a[a.len() - 2..], &[77, 78]);
        // Every position is reached: over many seeds the first line is each of the 10.
        let firsts: std::collections::BTreeSet<u32> =
            (0..400).map(|s| shuffle_lines(&ids, E, s)[0]).collect();
        assert_eq!(firsts.len(), 10, "{firsts:?}");
    }
}
