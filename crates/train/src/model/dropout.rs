//! Dropout with its masks drawn on the host by a counter-based generator, for the CPU backend.
//!
//! burn's `Dropout` draws a Bernoulli tensor through its ChaCha generator one element at a time
//! and multiplies twice (by the mask, then by 1/(1 − p)): 6–7 % of a `tiny` training step on
//! burn-flex. Here element i of the c-th mask of a step keeps its input when the 32 bits of
//! SplitMix64(seed, c, i) are at least p·2³², and the mask already holds 1/(1 − p): one pass to
//! draw, one multiply. Masks depend only on the step's seed and their order within the step, so
//! a resumed run draws the same ones, as with the device's generator. LibTorch on the CPU draws
//! the same masks (its tensors are in host memory too, so burn-flex and LibTorch train alike);
//! on CUDA the masks are drawn on the device (burn's `Dropout`): host masks would be copied
//! there at every layer.
//!
//! The step's seed belongs to the thread that runs the step (a trainer steps on one thread, and
//! the model's forward runs on it): two trainers stepping on two threads, as tests do, never
//! draw from each other's sequence.

use std::cell::Cell;

use burn::nn::Dropout;
use burn::prelude::*;

thread_local! {
    /// The step's seed and how many masks were drawn since; `None`: burn's dropout.
    static HOST_MASKS: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// Draws this step's masks on the host from `seed` (`Some`), or leaves dropout to burn (`None`).
pub fn seed_host_masks(seed: Option<u64>) {
    HOST_MASKS.set(seed.map(|s| (s, 0)));
}

fn next_mask_seed() -> Option<u64> {
    let (seed, count) = HOST_MASKS.get()?;
    let count = count + 1;
    HOST_MASKS.set(Some((seed, count)));
    Some(splitmix64(seed ^ count.wrapping_mul(0xD1B5_4A32_D192_ED03)))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The mask of `n` elements for drop probability `prob` from `seed`: 0 or 1/(1 − prob).
pub fn host_mask(n: usize, prob: f64, seed: u64) -> Vec<f32> {
    // Drop when the 32 random bits fall below prob·2³² (prob < 1, so the threshold fits in u64).
    let threshold = (prob * 4_294_967_296.0).round() as u64;
    let keep = (1.0 / (1.0 - prob)) as f32;
    let value = |bits: u64| if bits >= threshold { keep } else { 0.0 };
    let mut mask = vec![0f32; n];
    for (pair, out) in mask.chunks_mut(2).enumerate() {
        let r = splitmix64(seed.wrapping_add(pair as u64));
        out[0] = value(r & 0xFFFF_FFFF);
        if let Some(second) = out.get_mut(1) {
            *second = value(r >> 32);
        }
    }
    mask
}

/// `layer`'s dropout of `x`: burn's, or with a host mask when the step's masks are drawn here.
pub fn forward<const D: usize>(layer: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !drops(layer, &device) {
        return layer.forward(x);
    }
    let Some(seed) = next_mask_seed() else {
        return layer.forward(x);
    };
    let shape = x.shape();
    let mask = host_mask(shape.num_elements(), layer.prob, seed);
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// Whether `layer` drops anything on `device` (training, under autodiff, p > 0).
fn drops(layer: &Dropout, device: &Device) -> bool {
    layer.prob > 0.0 && device.is_autodiff() && layer.training.is_enabled()
}

/// The dropout probability a fused kernel should draw its own mask with for `layer` on
/// `device`: `Some(p)` where the device draws the step's masks (burn's dropout, CUDA's path),
/// `Some(0.0)` where nothing drops (evaluation, p = 0), `None` where this step's masks are drawn
/// on the host (the caller must apply [`forward`]'s mask itself, to draw the same sequence).
pub fn device_drop_probability(layer: &Dropout, device: &Device) -> Option<f64> {
    if !drops(layer, device) {
        return Some(0.0);
    }
    HOST_MASKS.get().is_none().then_some(layer.prob)
}

/// Whether [`forward`] draws its masks on the host for `layer` (or drops nothing at all): then
/// [`next_host_mask`] gives the mask it would have drawn next.
pub fn host_masks_cover(layer: &Dropout, device: &Device) -> bool {
    HOST_MASKS.get().is_some() || !drops(layer, device)
}

/// The next mask [`forward`] would multiply an `n`-element tensor by, drawn in the same sequence
/// (`None`: nothing dropped), for computations that apply dropout on the host themselves.
pub fn next_host_mask(layer: &Dropout, n: usize, device: &Device) -> Option<Vec<f32>> {
    if !drops(layer, device) {
        return None;
    }
    next_mask_seed().map(|seed| host_mask(n, layer.prob, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_drop_at_the_rate_asked_and_scale_the_rest() {
        for prob in [0.1, 0.5, 0.65] {
            let n = 200_001;
            let mask = host_mask(n, prob, 42);
            let keep = (1.0 / (1.0 - prob)) as f32;
            assert!(mask.iter().all(|&v| v == 0.0 || v == keep));
            let dropped = mask.iter().filter(|&&v| v == 0.0).count() as f64 / n as f64;
            // Binomial: the standard deviation of the rate is below 0.0012 at n = 200,001.
            assert!(
                (dropped - prob).abs() < 0.006,
                "p = {prob}: dropped {dropped}"
            );
            // The expectation is kept: mean of the mask ≈ 1.
            let mean = mask.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
            assert!((mean - 1.0).abs() < 0.02, "p = {prob}: mean {mean}");
        }
    }

    #[test]
    fn masks_depend_on_the_seed_only_and_neighbours_are_uncorrelated() {
        assert_eq!(host_mask(1001, 0.3, 7), host_mask(1001, 0.3, 7));
        assert_ne!(host_mask(1001, 0.3, 7), host_mask(1001, 0.3, 8));
        // Adjacent elements (the two halves of one 64-bit draw, and neighbouring draws): the
        // fraction of both dropped is p² for independent draws.
        let prob = 0.5;
        let mask = host_mask(100_000, prob, 3);
        let both = mask
            .windows(2)
            .filter(|w| w[0] == 0.0 && w[1] == 0.0)
            .count() as f64
            / (mask.len() - 1) as f64;
        assert!((both - prob * prob).abs() < 0.01, "{both}");
    }

    #[test]
    fn the_step_seed_restarts_the_sequence_and_none_leaves_it_to_burn() {
        seed_host_masks(Some(11));
        let first = (next_mask_seed(), next_mask_seed());
        seed_host_masks(Some(11));
        assert_eq!((next_mask_seed(), next_mask_seed()), first);
        assert_ne!(first.0, first.1);
        seed_host_masks(None);
        assert_eq!(next_mask_seed(), None);
    }

    /// A step on another thread (another trainer, as in the tests that run two side by side)
    /// neither moves this thread's sequence nor sees it.
    #[test]
    fn each_thread_draws_its_own_sequence() {
        seed_host_masks(Some(5));
        let expected = {
            let first = next_mask_seed();
            seed_host_masks(Some(5));
            assert_eq!(next_mask_seed(), first);
            next_mask_seed()
        };
        seed_host_masks(Some(5));
        let _ = next_mask_seed();
        let other = std::thread::spawn(|| {
            let unseeded = next_mask_seed();
            seed_host_masks(Some(6));
            (
                unseeded,
                (0..3).map(|_| next_mask_seed()).collect::<Vec<_>>(),
            )
        })
        .join()
        .expect("thread");
        assert_eq!(other.0, None, "the other thread starts unseeded");
        assert_eq!(next_mask_seed(), expected, "this thread's sequence went on");
    }
}
