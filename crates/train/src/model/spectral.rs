//! The reparameterised tied embedding of spectrum control (Wang et al. 2020):
//! W = U·diag(σ)·Vᵀ with U `[N, d]`, σ `[d]`, V `[d, d]` trained instead of W.

use burn::module::{Param, ParamId};
use burn::prelude::*;

/// Fixed parameter ids, so that a resumed run's optimizer state finds U, σ and V again (the model's
/// own parameters are numbered 1, 2, 3, … from construction).
pub const SPECTRAL_PARAM_IDS: [u64; 3] = [1 << 40, (1 << 40) + 1, (1 << 40) + 2];

#[derive(Module, Debug)]
pub struct SpectralEmbedding {
    pub u: Param<Tensor<2>>,
    pub sigma: Param<Tensor<1>>,
    pub v: Param<Tensor<2>>,
}

#[derive(Debug, thiserror::Error)]
#[error("spectrum control: the SVD of W failed: {0}")]
pub struct SvdError(String);

impl SpectralEmbedding {
    /// The exact factorisation of `w` (row-major `[n, d]`): a thin SVD in f64, so that switching
    /// spectrum control on does not change the model's outputs (beyond f32 rounding).
    pub fn from_matrix(w: &[f32], n: usize, d: usize, device: &Device) -> Result<Self, SvdError> {
        let w64 = faer::Mat::<f64>::from_fn(n, d, |i, j| w[i * d + j] as f64);
        let svd = w64.thin_svd().map_err(|e| SvdError(format!("{e:?}")))?;
        let (u, s, v) = (svd.U(), svd.S().column_vector(), svd.V());
        let k = s.nrows();
        let mut u_data = Vec::with_capacity(n * k);
        for i in 0..n {
            u_data.extend((0..k).map(|j| u[(i, j)] as f32));
        }
        let sigma: Vec<f32> = s.iter().map(|&x| x as f32).collect();
        let mut v_data = Vec::with_capacity(d * k);
        for i in 0..d {
            v_data.extend((0..k).map(|j| v[(i, j)] as f32));
        }
        let param = |id: u64, t| Param::initialized(ParamId::from(id), t);
        Ok(Self {
            u: param(
                SPECTRAL_PARAM_IDS[0],
                Tensor::<2>::from_data(TensorData::new(u_data, [n, k]), device).require_grad(),
            ),
            sigma: Param::initialized(
                ParamId::from(SPECTRAL_PARAM_IDS[1]),
                Tensor::<1>::from_data(TensorData::new(sigma, [k]), device).require_grad(),
            ),
            v: param(
                SPECTRAL_PARAM_IDS[2],
                Tensor::<2>::from_data(TensorData::new(v_data, [d, k]), device).require_grad(),
            ),
        })
    }

    /// Zero-valued placeholders of the right shapes, to load a checkpoint into.
    pub fn placeholder(n: usize, d: usize, device: &Device) -> Self {
        // A thin SVD has min(n, d) singular values.
        let k = n.min(d);
        let param2 = |id: u64, shape: [usize; 2]| {
            Param::initialized(
                ParamId::from(id),
                Tensor::<2>::zeros(shape, device).require_grad(),
            )
        };
        Self {
            u: param2(SPECTRAL_PARAM_IDS[0], [n, k]),
            sigma: Param::initialized(
                ParamId::from(SPECTRAL_PARAM_IDS[1]),
                Tensor::<1>::zeros([k], device).require_grad(),
            ),
            v: param2(SPECTRAL_PARAM_IDS[2], [d, k]),
        }
    }

    /// W = U·diag(σ)·Vᵀ, `[N, d]`.
    pub fn weight(&self) -> Tensor<2> {
        (self.u.val() * self.sigma.val().unsqueeze::<2>()).matmul(self.v.val().transpose())
    }
}
