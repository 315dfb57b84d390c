//! A gradient's squared L2 norm Σᵢ gᵢ² for the global-norm clip, as one host pass over
//! burn-flex's own buffer.
//!
//! burn's `g.square().sum()` per parameter writes the squares into a fresh buffer and reads them
//! back: on an `lstm` step (13.3 M parameters) the clip's norm took 5–6 ms. Here each gradient is
//! read once, in place (`Tensor::try_into_primitive`, as `fused_adamw` does), in chunks summed in
//! parallel with eight f64 accumulators each, and the chunks' sums added in order: the value does
//! not depend on the threads' timing, so exact resume stays exact. Off burn-flex, or for a
//! gradient that is not one contiguous f32 buffer, `None`: the caller takes burn's ops.

use burn::prelude::*;
#[cfg(feature = "flex")]
use rayon::prelude::*;

/// Σ x² over a slice, in f64, eight independent sums so that the loop vectorises.
#[cfg(feature = "flex")]
#[inline(always)]
fn sum_of_squares(values: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let mut blocks = values.chunks_exact(8);
    for block in &mut blocks {
        for (lane, &x) in lanes.iter_mut().zip(block) {
            let x = x as f64;
            *lane += x * x;
        }
    }
    let tail: f64 = blocks
        .remainder()
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum();
    lanes.iter().sum::<f64>() + tail
}

/// [`sum_of_squares`] compiled for AVX2 (four f64 lanes instead of SSE2's two).
#[cfg(all(feature = "flex", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
fn sum_of_squares_avx2(values: &[f32]) -> f64 {
    sum_of_squares(values)
}

/// Σ g² of one gradient read in place on burn-flex; `None` elsewhere.
#[cfg(feature = "flex")]
pub fn squared_sum<const D: usize>(grad: &Tensor<D>) -> Option<f64> {
    use super::fused_adamw::CHUNK;
    use crate::model::flex_buffer;
    let flex = flex_buffer(grad, grad.shape().num_elements())?;
    #[cfg(target_arch = "x86_64")]
    let avx2 = conelab_metrics::fastmath::has_avx2_fma();
    let chunk_sums: Vec<f64> = flex
        .storage::<f32>()
        .par_chunks(CHUNK)
        .map(|chunk| {
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                return unsafe { sum_of_squares_avx2(chunk) };
            }
            sum_of_squares(chunk)
        })
        .collect();
    Some(chunk_sums.iter().sum())
}

/// Σ g² of one gradient read in place on burn-flex; `None` elsewhere.
#[cfg(not(feature = "flex"))]
pub fn squared_sum<const D: usize>(_grad: &Tensor<D>) -> Option<f64> {
    None
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::super::fused_adamw::CHUNK;
    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    /// Values over several chunks with a tail, of mixed sign and scale.
    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i * 7919) % 1013) as f32 / 1013.0 - 0.5 + if i % 97 == 0 { 30.0 } else { 0.0 }
            })
            .collect()
    }

    #[test]
    fn the_host_sum_is_the_sum_of_squares_in_f64() {
        let device = DeviceSpec::Cpu.device().expect("flex");
        let n = 3 * CHUNK + 13;
        let v = values(n);
        let want: f64 = v.iter().map(|&x| (x as f64).powi(2)).sum();
        let t = Tensor::<1>::from_data(TensorData::new(v, [n]), &device);
        let got = squared_sum(&t).expect("a contiguous flex buffer");
        assert!((got - want).abs() <= 1e-12 * want, "{got} against {want}");
        // The same on the AVX2 and the plain loop, bit for bit (no contraction into FMA).
        #[cfg(target_arch = "x86_64")]
        if conelab_metrics::fastmath::has_avx2_fma() {
            let v = values(1_000_003);
            // SAFETY: checked above.
            assert_eq!(
                sum_of_squares(&v).to_bits(),
                unsafe { sum_of_squares_avx2(&v) }.to_bits()
            );
        }
    }

    #[test]
    fn a_view_that_is_not_the_whole_buffer_is_left_to_burn() {
        let device = DeviceSpec::Cpu.device().expect("flex");
        let t = Tensor::<2>::from_data(TensorData::new(values(12), [3, 4]), &device);
        assert!(squared_sum(&t.clone().transpose()).is_none());
        assert!(squared_sum(&t.slice([1..3, 0..4])).is_none());
    }
}
