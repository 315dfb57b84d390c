//! What the run shows of its weights: the soundness check before a checkpoint, a snapshot of W for the analysis, spectrum control's factors.

use super::{Trainer, WEIGHT_BOUND};

use burn::module::{Module, ModuleVisitor, Param};
use burn::prelude::*;

use crate::engine::EngineError;
use crate::objective::spectrum::{orthogonality_frobenius, prior_targets};
use conelab_core::events::{Snapshot, SpectralStats};

impl Trainer {
    /// Whether the weights may be checkpointed: every parameter finite and none beyond
    /// [`WEIGHT_BOUND`] in absolute value. A blow-up whose own step loss is still finite (an lr
    /// of 1e30 takes one step to weights of 1e30 before the next loss is NaN) must not become
    /// the newest checkpoint, which every resume would then start from. On the device, one
    /// reduction per parameter and one read. `Ok`: the largest |w|; `Err`: what is wrong.
    pub fn weights_check(&self) -> Result<f64, String> {
        struct Extremes {
            parts: Vec<Tensor<1>>,
        }
        impl ModuleVisitor for Extremes {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let w = param.val().inner();
                // The sum is NaN where any weight is (a maximum may skip NaN on some backends).
                self.parts.push(w.clone().abs().max().reshape([1]));
                self.parts.push(w.sum().reshape([1]));
            }
        }
        let mut extremes = Extremes { parts: Vec::new() };
        self.model.visit(&mut extremes);
        if extremes.parts.is_empty() {
            return Ok(0.0);
        }
        let values = Tensor::cat(extremes.parts, 0)
            .try_into_vec_as::<f64>()
            .map_err(|e| format!("the weights could not be read: {e:?}"))?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err("the weights are not finite".into());
        }
        let max_abs = values.iter().step_by(2).fold(0f64, |m, v| m.max(*v));
        if max_abs > WEIGHT_BOUND {
            return Err(format!(
                "a weight reaches {max_abs:.3e}, beyond the bound {WEIGHT_BOUND:.0e}"
            ));
        }
        Ok(max_abs)
    }

    /// A copy of W on the host.
    pub fn snapshot(&self) -> Result<Snapshot, EngineError> {
        let w = self.model.embedding().inner();
        let [n, d] = w.dims();
        let weights = w
            .try_into_vec_as::<f32>()
            .map_err(EngineError::backend("reading W"))?;
        Ok(Snapshot {
            step: self.state.step,
            n,
            d,
            weights,
            spectral: self.spectral_stats()?,
        })
    }

    /// Spectrum control's factors for a snapshot: σ against its targets, and how orthonormal U
    /// and V still are (`None` without control).
    pub(super) fn spectral_stats(&self) -> Result<Option<SpectralStats>, EngineError> {
        let (Some(s), Some(c1)) = (self.model.spectral(), self.state.spectrum_c1) else {
            return Ok(None);
        };
        let read = |t: Tensor<1>, what: &'static str| {
            t.try_into_vec_as::<f64>()
                .map_err(EngineError::backend(what))
        };
        let mut sigma = read(s.sigma.val().detach(), "reading σ")?;
        sigma.sort_by(|a, b| b.total_cmp(a));
        let config = &self.state.objectives.spectrum;
        let targets = prior_targets(config, c1, sigma.len())
            .into_iter()
            .map(f64::from)
            .collect();
        let orth = |m: Tensor<2>, what| {
            read(orthogonality_frobenius(m.detach()).sqrt(), what).map(|v| v[0])
        };
        Ok(Some(SpectralStats {
            update: config.sigma.name().to_owned(),
            u_orth: orth(s.u.val(), "reading UᵀU")?,
            v_orth: orth(s.v.val(), "reading VᵀV")?,
            sigma,
            targets,
            sigma_vs_w: f64::NAN,
        }))
    }
}
