//! LibTorch's device paths: a step's work queued under one device guard, read back once, and the gradient norms on the device (stand-ins when `tch` is off).

use super::Trainer;

#[cfg(feature = "tch")]
use burn::prelude::*;

#[cfg(feature = "tch")]
use crate::engine::EngineError;

/// A flag on the device that a pipelined step's update reads (`aten::StepGuard::found_inf`).
#[cfg(feature = "tch")]
pub(super) type DeviceFlag = tch::Tensor;

#[cfg(not(feature = "tch"))]
pub(super) type DeviceFlag = std::convert::Infallible;

#[cfg(feature = "tch")]
pub(super) use crate::aten::DeviceGuard;

/// Without LibTorch there is no guard on a device.
#[cfg(not(feature = "tch"))]
#[derive(Clone, Copy)]
pub(super) enum DeviceGuard<'a> {
    #[allow(dead_code)]
    Never(std::convert::Infallible, std::marker::PhantomData<&'a ()>),
}

#[cfg(feature = "tch")]
pub(super) use crate::aten::HostCopy;

/// Without LibTorch no step is ever queued.
#[cfg(not(feature = "tch"))]
pub(super) enum HostCopy {}

#[cfg(not(feature = "tch"))]
impl HostCopy {
    pub(super) fn wait(self) -> Result<Vec<f64>, std::convert::Infallible> {
        match self {}
    }
}

/// The clip's norm and scaling over LibTorch's gradients as foreach operators (`crate::aten`):
/// a handful of ATen operators per step instead of two or three per parameter.
#[cfg(feature = "tch")]
#[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
pub(super) mod libtorch_grads {
    use burn::backend::{LibTorch, libtorch::TchTensor};
    use burn::module::{ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use burn::prelude::*;

    use crate::model::LanguageModel;

    /// Σ g² over every gradient, a one-element tensor on their device; `None` when there is none
    /// or one is not a LibTorch tensor, or libtorch refused (the caller's per-tensor ops then say
    /// what is wrong, if anything is).
    pub(in crate::engine::trainer) fn squared_norm(
        model: &LanguageModel,
        grads: &GradientsParams,
    ) -> Option<Tensor<1>> {
        struct Collect<'a> {
            grads: &'a GradientsParams,
            all: Option<Vec<TchTensor>>,
        }
        impl ModuleVisitor for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let (Some(all), Some(g)) = (self.all.as_mut(), self.grads.get::<D>(param.id)) {
                    match g.try_into_primitive::<LibTorch>() {
                        Ok(t) => all.push(t),
                        Err(_) => self.all = None,
                    }
                }
            }
        }
        let mut collect = Collect {
            grads,
            all: Some(Vec::new()),
        };
        model.visit(&mut collect);
        let all = collect.all.filter(|a| !a.is_empty())?;
        let refs: Vec<&tch::Tensor> = all.iter().map(|t| &t.tensor).collect();
        let norm = crate::aten::foreach_squared_norm(&refs).ok()?;
        Some(Tensor::from_primitive::<LibTorch>(TchTensor::new(norm)))
    }

    /// Every gradient times `factor`, in place by one `_foreach_mul_` (a gradient another holder
    /// shares is copied first); `Err` hands the gradients back untouched where one is not a
    /// LibTorch tensor or libtorch refused.
    pub(in crate::engine::trainer) fn scale(
        model: &LanguageModel,
        mut grads: GradientsParams,
        factor: f64,
    ) -> Result<GradientsParams, GradientsParams> {
        struct AllLibTorch<'a> {
            grads: &'a GradientsParams,
            yes: bool,
        }
        impl ModuleVisitor for AllLibTorch<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let Some(g) = self.grads.get::<D>(param.id) {
                    self.yes &= g.try_into_primitive::<LibTorch>().is_ok();
                }
            }
        }
        let mut check = AllLibTorch {
            grads: &grads,
            yes: true,
        };
        model.visit(&mut check);
        if !check.yes {
            return Err(grads);
        }
        // Each gradient taken out, made its holder's own, and put back; the shallow handles
        // kept here write into the same storage.
        struct Own<'a> {
            grads: &'a mut GradientsParams,
            handles: Vec<tch::Tensor>,
        }
        impl ModuleVisitor for Own<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let Some(g) = self.grads.remove::<D>(param.id) else {
                    return;
                };
                let Ok(t) = g.try_into_primitive::<LibTorch>() else {
                    return; // checked above: never
                };
                let t = if t.can_mut() && t.tensor.is_contiguous() {
                    t
                } else {
                    // A view of another gradient (the gate weights' slices of one product's
                    // gradient) or a strided one: one dense copy of our own (a single copy
                    // kernel), which the foreach scale then writes and AdamW reads as is.
                    let mut fresh =
                        tch::Tensor::empty(t.tensor.size(), (t.tensor.kind(), t.tensor.device()));
                    fresh.copy_(&t.tensor);
                    TchTensor::new(fresh)
                };
                self.handles.push(t.tensor.shallow_clone());
                self.grads
                    .register(param.id, Tensor::<D>::from_primitive::<LibTorch>(t));
            }
        }
        let mut own = Own {
            grads: &mut grads,
            handles: Vec::new(),
        };
        model.visit(&mut own);
        let handles = own.handles;
        if handles.is_empty() {
            return Ok(grads);
        }
        let refs: Vec<&tch::Tensor> = handles.iter().collect();
        match crate::aten::foreach_mul_(&refs, factor) {
            Ok(()) => Ok(grads),
            // Nothing was scaled (the extension checks before it writes): burn's ops then.
            Err(_) => Err(grads),
        }
    }
}

impl Trainer {
    /// The step's guard on the device (`aten::step_guard`); `None` where the values are not
    /// LibTorch tensors (the host then reads them).
    #[cfg(feature = "tch")]
    #[allow(deprecated)] // burn's LibTorch backend, conelab's LibTorch path all the same
    pub(super) fn device_guard(
        &self,
        loss: &Tensor<1>,
        penalty: &Tensor<1>,
        squared_norm: &Tensor<1>,
        pipelined: bool,
    ) -> Result<Option<crate::aten::StepGuard>, EngineError> {
        use burn::backend::LibTorch;
        let tch = |t: &Tensor<1>| {
            // The loss and penalties are autodiff tensors (detached); the norm is not.
            let t = if t.is_autodiff() {
                t.clone().inner()
            } else {
                t.clone()
            };
            t.try_into_primitive::<LibTorch>().ok().map(|t| t.tensor)
        };
        let (Some(loss), Some(penalty), Some(sq)) = (tch(loss), tch(penalty), tch(squared_norm))
        else {
            return Ok(None);
        };
        let sticky = match (&self.pending, pipelined) {
            (Some(p), true) => Some(&p.found_inf),
            _ => None,
        };
        crate::aten::step_guard(&loss, &penalty, &sq, sticky, self.config.clip_norm)
            .map(Some)
            .map_err(EngineError::backend("the step's guard"))
    }
}
