//! The squashed scores of AND (Chen et al. 2016): s → 10·tanh(s/5), element-wise, bounded in
//! (−10, 10) with slope 2 at 0. Used by AND's terms and by the sampled log Z penalty with
//! squashing, so it sits apart from both.

use burn::prelude::*;

/// Bound of the squashed scores: s ∈ (−10, 10).
pub const SQUASH_BOUND: f64 = 10.0;
/// Width of the squashing: 10·tanh(s/5) has slope 2 at 0.
pub const SQUASH_WIDTH: f64 = 5.0;

/// s → 10·tanh(s/5), element-wise.
pub fn squash<const D: usize>(scores: Tensor<D>) -> Tensor<D> {
    scores
        .div_scalar(SQUASH_WIDTH)
        .tanh()
        .mul_scalar(SQUASH_BOUND)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    #[test]
    fn squash_is_ten_tanh_of_a_fifth() {
        let dev = DeviceSpec::Cpu.training_device().expect("cpu");
        let x = [-100.0f32, -5.0, 0.0, 1.0, 5.0, 100.0];
        let got = squash(Tensor::<1>::from_data(
            TensorData::new(x.to_vec(), [6]),
            &dev,
        ))
        .try_into_vec_as::<f64>()
        .expect("f64");
        for (g, &x) in got.iter().zip(&x) {
            let want = 10.0 * (x as f64 / 5.0).tanh();
            assert!((g - want).abs() < 1e-5, "squash({x}) = {g}, want {want}");
        }
        assert!(got[0] > -10.0 - 1e-6 && got[5] < 10.0 + 1e-6);
    }
}
