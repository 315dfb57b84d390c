//! Mixed precision (`--precision bf16`), as PyTorch's autocast does it: a region on the current
//! thread inside which the model's matrix products take bfloat16 operands and hand back fp32.
//!
//!   c = f32( bf16(a) · bf16(b) )
//!
//! The products (every linear layer, the tied output layer and the head's two gradient products
//! G·W and Gᵀ·h) go through [`matmul`] and [`linear`]; the fused attention and LSTM nodes read
//! [`lower`] and cast inside torch's graph (`csrc/island.cpp`). As autocast, a product whose
//! result feeds only another product or GELU keeps it in bf16 ([`linear_low`]: q, k, v and
//! attention's output; the MLP's hidden layer and its GELU). Everything else stays fp32:
//! softmax and the loss, layer norm, dropout, the residual stream, the gradients (burn's cast
//! node hands each product's gradient back in fp32, so they accumulate in fp32), the optimizer
//! and its state, the weights and so the checkpoints and every metric of W. Why a thread-local
//! region and not a flag on every module: the training step and evaluation open it around the
//! model's forward and backward, and the model's code, shared with fp32 and with burn-flex,
//! stays one path; burn's autodiff runs the backward on the calling thread.

use std::cell::Cell;

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::FloatDType;

use conelab_core::train_config::Precision;

thread_local! {
    static LOWER: Cell<bool> = const { Cell::new(false) };
}

/// The region: while it lives, [`lower`] is `precision == Bf16` on this thread; the previous
/// state comes back when it drops (regions nest).
#[must_use = "the precision holds only while the guard lives"]
pub struct Autocast {
    before: bool,
}

impl Autocast {
    pub fn enter(precision: Precision) -> Self {
        let before = LOWER.with(|l| l.replace(precision == Precision::Bf16));
        Self { before }
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        LOWER.with(|l| l.set(self.before));
    }
}

/// Whether the products of this thread run in bfloat16 now.
pub fn lower() -> bool {
    LOWER.with(Cell::get)
}

/// `a · b`: in bfloat16 with an fp32 result inside a bf16 region, else as it is.
pub fn matmul<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> Tensor<D> {
    if lower() {
        a.cast(FloatDType::BF16)
            .matmul(b.cast(FloatDType::BF16))
            .cast(FloatDType::F32)
    } else {
        a.matmul(b)
    }
}

/// burn's `Linear` over rows `x` `[P, d_in]` (weight `[d_in, d_out]`), its product through
/// [`matmul`] and the bias added in fp32.
pub fn linear(layer: &Linear, x: Tensor<2>) -> Tensor<2> {
    if !lower() {
        return layer.forward(x);
    }
    let y = matmul(x, layer.weight.val());
    match &layer.bias {
        Some(b) => y + b.val().unsqueeze::<2>(),
        None => y,
    }
}

/// [`linear`] with its result left in bfloat16 inside a bf16 region (the bias cast and added in
/// bf16, as autocast's `addmm`): for a product whose result only feeds another product or an
/// operation that runs in bf16 (q, k and v into attention; the MLP's hidden layer into GELU and
/// the next product), so that neither a cast to fp32 and back nor an fp32 copy of the activation
/// is made. Its consumer's product takes it as it is (a cast to the same dtype is no operation);
/// its gradient comes back in bf16 and leaves as fp32 through `x`'s and the weight's casts.
pub fn linear_low(layer: &Linear, x: Tensor<2>) -> Tensor<2> {
    if !lower() {
        return layer.forward(x);
    }
    let y = x
        .cast(FloatDType::BF16)
        .matmul(layer.weight.val().cast(FloatDType::BF16));
    match &layer.bias {
        Some(b) => y + b.val().cast(FloatDType::BF16).unsqueeze::<2>(),
        None => y,
    }
}

/// [`linear`] over `[B, T, d_in]`.
pub fn linear3(layer: &Linear, x: Tensor<3>) -> Tensor<3> {
    if !lower() {
        return layer.forward(x);
    }
    let [b, t, d] = x.dims();
    let y = linear(layer, x.reshape([b * t, d]));
    let d_out = y.dims()[1];
    y.reshape([b, t, d_out])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x` rounded to the nearest bfloat16 (ties to even), written out on the bits: the
    /// independent computation of what a bf16 operand holds.
    pub(crate) fn round_bf16(x: f32) -> f32 {
        let bits = x.to_bits();
        let lsb = (bits >> 16) & 1;
        f32::from_bits((bits + 0x7FFF + lsb) & 0xFFFF_0000)
    }

    #[test]
    fn the_rounding_keeps_eight_bits_of_mantissa() {
        assert_eq!(round_bf16(1.0), 1.0);
        // 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: ties to even (1).
        assert_eq!(round_bf16(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round_bf16(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round_bf16(-3.0), -3.0);
    }

    /// On LibTorch the product's operands are bf16 (the result is the f64 product of the
    /// rounded operands, within bf16's own rounding of the result, and visibly not the fp32
    /// product), and the gradient comes back in fp32 through the same rounding.
    #[cfg(feature = "tch")]
    #[test]
    fn a_bf16_product_rounds_its_operands_and_its_gradient_is_fp32() {
        use crate::model::DeviceSpecExt;
        use conelab_core::model::DeviceSpec;
        let device = DeviceSpec::LibtorchCpu
            .training_device()
            .expect("LibTorch CPU");
        let (m, k, n) = (3, 5, 4);
        // Values with more than bf16's eight bits of mantissa.
        let a: Vec<f32> = (0..m * k).map(|i| 1.0 + (i as f32) * 0.0137).collect();
        let b: Vec<f32> = (0..k * n).map(|i| 0.5 - (i as f32) * 0.0071).collect();
        let leaf = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), shape), &device).require_grad()
        };
        let (ta, tb) = (leaf(&a, [m, k]), leaf(&b, [k, n]));
        let c = {
            let _bf16 = Autocast::enter(Precision::Bf16);
            matmul(ta.clone(), tb.clone())
        };
        assert_eq!(c.dtype(), burn::tensor::DType::F32, "an fp32 result");
        let grads = c.clone().sum().backward();
        let got = c.try_into_vec_as::<f32>().expect("read");
        let mut off_fp32 = 0f64;
        for i in 0..m {
            for j in 0..n {
                let rounded: f64 = (0..k)
                    .map(|l| round_bf16(a[i * k + l]) as f64 * round_bf16(b[l * n + j]) as f64)
                    .sum();
                let exact: f64 = (0..k)
                    .map(|l| a[i * k + l] as f64 * b[l * n + j] as f64)
                    .sum();
                let scale: f64 = (0..k)
                    .map(|l| (a[i * k + l] as f64 * b[l * n + j] as f64).abs())
                    .sum();
                let g = got[i * n + j] as f64;
                assert!(
                    (g - rounded).abs() <= scale / 128.0,
                    "c[{i},{j}] = {g}, bf16 operands give {rounded}"
                );
                off_fp32 = off_fp32.max((g - exact).abs() / scale);
            }
        }
        assert!(off_fp32 > 1e-4, "the product ran in fp32 ({off_fp32})");
        // d(Σ c)/da[i, l] = Σ_j b[l, j], through bf16 operands: Σ_j bf16(b[l, j]).
        let da = ta.grad(&grads).expect("a's gradient");
        assert_eq!(da.dtype(), burn::tensor::DType::F32);
        let da = da.try_into_vec_as::<f32>().expect("read");
        for l in 0..k {
            let want: f64 = (0..n).map(|j| round_bf16(b[l * n + j]) as f64).sum();
            let scale: f64 = (0..n).map(|j| (b[l * n + j] as f64).abs()).sum();
            assert!((da[l] as f64 - want).abs() <= scale / 128.0, "da[0,{l}]");
        }
    }

    /// `linear_low` leaves its result in bf16 (bias added in bf16), `linear` takes such a result
    /// as it is and gives fp32, and the parameters' gradients through both come back in fp32:
    /// y = linear(linear_low(x)) = (x·W₁ + b₁)·W₂ + b₂, its gradient for b₁ is Σ_rows W₂ summed
    /// over the output columns.
    #[cfg(feature = "tch")]
    #[test]
    fn a_low_product_feeds_the_next_in_bf16_and_the_gradients_are_fp32() {
        use crate::model::DeviceSpecExt;
        use burn::nn::LinearConfig;
        use conelab_core::model::DeviceSpec;
        let device = DeviceSpec::LibtorchCpu
            .training_device()
            .expect("LibTorch CPU");
        let (first, second) = (
            LinearConfig::new(4, 3).init(&device),
            LinearConfig::new(3, 2).init(&device),
        );
        let x = Tensor::<2>::from_data(
            TensorData::new((0..20).map(|i| i as f32 * 0.1).collect::<Vec<_>>(), [5, 4]),
            &device,
        );
        let (hidden, y) = {
            let _bf16 = Autocast::enter(Precision::Bf16);
            let hidden = linear_low(&first, x);
            (hidden.clone(), linear(&second, hidden))
        };
        assert_eq!(hidden.dtype(), burn::tensor::DType::BF16);
        assert_eq!(y.dtype(), burn::tensor::DType::F32);
        let grads = y.sum().backward();
        let bias = first.bias.as_ref().expect("a bias");
        let db = bias.grad(&grads).expect("b₁'s gradient");
        assert_eq!(db.dtype(), burn::tensor::DType::F32);
        let w2 = second.weight.val().try_into_vec_as::<f32>().expect("W₂");
        let db = db.try_into_vec_as::<f32>().expect("read");
        for (j, got) in db.iter().enumerate() {
            // Five rows, each contributing Σ_k W₂[j, k]. bf16 rounds to a relative u = 2⁻⁸:
            // each row's two operands and their sum (≤ 2·(|W₂[j,0]| + |W₂[j,1]|)·u a row), and
            // the sum of the five rows in bf16 (four roundings of at most 5·(|·| + |·|)·u):
            // 30·(|W₂[j,0]| + |W₂[j,1]|)·u in all, whatever their sum (the weights are drawn at
            // random: it may nearly cancel).
            let (a, b) = (w2[j * 2], w2[j * 2 + 1]);
            let want = 5.0 * (a + b);
            let bound = 30.0 * (a.abs() + b.abs()) * 2f32.powi(-8) + 1e-6;
            assert!(
                (got - want).abs() <= bound,
                "db₁[{j}] = {got}, want {want} ± {bound}"
            );
        }
        let dw = first.weight.grad(&grads).expect("W₁'s gradient");
        assert_eq!(dw.dtype(), burn::tensor::DType::F32);
    }

    #[test]
    fn regions_nest_and_end_with_their_guard() {
        assert!(!lower());
        {
            let _outer = Autocast::enter(Precision::Bf16);
            assert!(lower());
            {
                let _inner = Autocast::enter(Precision::Fp32);
                assert!(!lower());
            }
            assert!(lower());
        }
        assert!(!lower());
    }
}
