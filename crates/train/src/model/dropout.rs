//! Dropout with its masks drawn on the host by a counter-based generator, for the CPU backend.
//!
//! burn's `Dropout` draws a Bernoulli tensor through its ChaCha generator one element at a time
//! and multiplies twice (by the mask, then by 1/(1 − p)): 6–7 % of a `tiny` training step on
//! burn-flex. Here element i of the c-th mask of a step keeps its input when the 32 bits of
//! SplitMix64(seed, c, i) are at least p·2³², and the mask already holds 1/(1 − p): one pass to
//! draw, one multiply. Masks depend only on the step's seed and their order within the step, so
//! a resumed run draws the same ones, as with the device's generator. LibTorch on the CPU draws
//! the same masks (its tensors are in host memory too, so burn-flex and LibTorch train alike);
//! on CUDA the masks are drawn on the device: host masks would be copied there at every layer.
//! On LibTorch's device paths a dropout is one node of burn's graph, torch's `native_dropout`
//! forward and `native_dropout_backward` (one kernel each way on CUDA, from the device's
//! generator, which the engine seeds at every step), where burn's `Dropout` is a Bernoulli draw
//! into a fresh tensor and two products each way.
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
        #[cfg(feature = "tch")]
        if let Some(dropped) = fused::dropout(&x, layer.prob) {
            return dropped;
        }
        return layer.forward(x);
    };
    let shape = x.shape();
    let mask = host_mask(shape.num_elements(), layer.prob, seed);
    x * Tensor::<D>::from_data(TensorData::new(mask, shape), &device)
}

/// Dropout as one node of burn's graph on LibTorch (module comment).
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
mod fused {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::{Autodiff, LibTorch, libtorch::TchTensor};
    use burn::prelude::*;

    /// `x` with each element zeroed with probability `p` and the rest scaled by 1/(1 − p);
    /// `None` where `x` is not a LibTorch autodiff tensor.
    pub(super) fn dropout<const D: usize>(x: &Tensor<D>, p: f64) -> Option<Tensor<D>> {
        let input = x.clone().try_into_primitive::<Autodiff<LibTorch>>().ok()?;
        let (out, mask) = input.primitive().tensor.native_dropout(p, true);
        let out = TchTensor::new(out);
        let out = match NativeDropout
            .prepare::<NoCheckpointing>([input.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((TchTensor::new(mask), 1.0 / (1.0 - p)), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        };
        Some(Tensor::from_primitive::<Autodiff<LibTorch>>(out))
    }

    /// The node: its state is the kept-elements mask and the scale 1/(1 − p).
    #[derive(Debug)]
    struct NativeDropout;

    impl Backward<LibTorch, 1> for NativeDropout {
        type State = (TchTensor, f64);

        fn backward(
            self,
            ops: Ops<(TchTensor, f64), 1>,
            grads: &mut Gradients,
            _: &mut Checkpointer,
        ) {
            let grad: TchTensor = grads.consume::<LibTorch>(&ops.node);
            let (mask, scale) = ops.state;
            if let [Some(node)] = ops.parents {
                let g = tch::Tensor::native_dropout_backward(&grad.tensor, &mask.tensor, scale);
                grads.register::<LibTorch>(node.id, TchTensor::new(g));
            }
        }
    }
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

    /// LibTorch's dropout node, on CUDA's path (no host masks): each element dropped with
    /// probability p (binomial bounds at n = 200,000), the rest scaled by 1/(1 − p), the same
    /// mask again from the same device seed (what exact resume needs), and the gradient of
    /// Σ r·dropout(x) exactly r/(1 − p) where kept and 0 where dropped.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn the_libtorch_dropout_node_drops_at_the_rate_and_differentiates_through_its_mask() {
        use crate::model::DeviceSpecExt;
        use burn::tensor::Distribution;
        let device = conelab_core::model::DeviceSpec::LibtorchCpu
            .training_device()
            .expect("libtorch");
        seed_host_masks(None);
        let n = 200_000;
        let layer = burn::nn::DropoutConfig::new(0.3).init();
        let x = Tensor::<1>::random([n], Distribution::Uniform(0.5, 1.5), &device).require_grad();
        let r = Tensor::<1>::random([n], Distribution::Default, &device);
        let draw = |seed: u64| {
            device.seed(seed);
            forward(&layer, x.clone())
        };
        let (out, ops) = crate::aten::count_ops(|| draw(7)).expect("counted");
        assert_eq!(ops.get("aten::native_dropout"), Some(&1), "{ops:?}");
        assert!(
            !ops.contains_key("aten::bernoulli_"),
            "burn's dropout ran: {ops:?}"
        );
        let again = draw(7).try_into_vec_as::<f32>().expect("read");
        let grads = (out.clone() * r.clone()).sum().backward();
        let out = out.try_into_vec_as::<f32>().expect("read");
        assert_eq!(out, again, "the same seed, the same mask");
        assert_ne!(out, draw(8).try_into_vec_as::<f32>().expect("read"));
        let xv = x.clone().try_into_vec_as::<f32>().expect("read");
        let rv = r.try_into_vec_as::<f32>().expect("read");
        let g = x
            .grad(&grads)
            .expect("a gradient")
            .try_into_vec_as::<f32>()
            .expect("read");
        let scale = 1.0 / 0.7f32;
        let mut dropped = 0usize;
        for i in 0..n {
            if out[i] == 0.0 {
                dropped += 1;
                assert_eq!(g[i], 0.0, "a dropped element has no gradient");
            } else {
                assert!(
                    (out[i] - xv[i] * scale).abs() <= 1e-6 * out[i].abs(),
                    "kept {i}"
                );
                assert!((g[i] - rv[i] * scale).abs() <= 1e-6 * scale, "gradient {i}");
            }
        }
        // Binomial: the rate's standard deviation is 0.001 at n = 200,000.
        let rate = dropped as f64 / n as f64;
        assert!((rate - 0.3).abs() < 0.005, "dropped {rate}");
    }
}
