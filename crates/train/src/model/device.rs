//! `--device`: which backend and device a run uses. Backends are compiled in by cargo feature;
//! asking for one that is not gives an error naming the feature, never a panic.

use burn::tensor::Device;
use conelab_core::model::{DeviceError, DeviceSpec};

/// Whether `device` is burn-flex, with or without autodiff: its tensors live in host memory, where
/// conelab's host kernels read and write them without a copy to or from an accelerator.
pub fn is_flex(device: &Device) -> bool {
    #[cfg(feature = "flex")]
    {
        let flex = Device::flex();
        *device == flex || *device == flex.autodiff()
    }
    #[cfg(not(feature = "flex"))]
    {
        let _ = device;
        false
    }
}

/// Whether `device` is LibTorch on the CPU, with or without autodiff: its tensors are in host
/// memory too, and its own kernels (MKL, on LibTorch's thread pool) are at hand for host work.
#[cfg(feature = "tch")]
pub fn is_libtorch_cpu(device: &Device) -> bool {
    #[allow(deprecated)]
    let cpu = Device::libtorch();
    *device == cpu || *device == cpu.autodiff()
}

/// The burn devices of a [`DeviceSpec`] (the spec itself is data, in `conelab_core::model`).
pub trait DeviceSpecExt {
    /// The training device (with autodiff).
    fn training_device(self) -> Result<Device, DeviceError>;
    /// The plain device (inference, no autodiff).
    fn device(self) -> Result<Device, DeviceError>;
}

impl DeviceSpecExt for DeviceSpec {
    fn training_device(self) -> Result<Device, DeviceError> {
        Ok(self.device()?.autodiff())
    }

    fn device(self) -> Result<Device, DeviceError> {
        match self {
            #[cfg(feature = "flex")]
            DeviceSpec::Cpu => Ok(Device::flex()),
            #[cfg(not(feature = "flex"))]
            DeviceSpec::Cpu => Err(DeviceError::NoFlex),
            #[cfg(feature = "tch")]
            #[allow(deprecated)]
            // burn-tch is deprecated upstream; it is our LibTorch path.
            DeviceSpec::LibtorchCpu => {
                libtorch_matches(self)?;
                Ok(Device::libtorch())
            }
            #[cfg(feature = "tch")]
            #[allow(deprecated)]
            DeviceSpec::Cuda(n) => {
                libtorch_matches(self)?;
                let count = tch::Cuda::device_count();
                if !tch::Cuda::is_available() || n as i64 >= count {
                    return Err(DeviceError::Unavailable {
                        spec: self,
                        reason: format!(
                            "LibTorch sees {count} CUDA device(s) (is this a CUDA build of libtorch, on a machine with a GPU?)"
                        ),
                    });
                }
                Ok(Device::libtorch_cuda(n))
            }
            #[cfg(not(feature = "tch"))]
            DeviceSpec::LibtorchCpu | DeviceSpec::Cuda(_) => Err(DeviceError::NoTch(self)),
        }
    }
}

/// Whether `spec` can run `--precision bf16`: LibTorch only (burn-flex computes in fp32), and a
/// device whose bf16 matrix product works (one tiny product, tried: a GPU without bf16 says so
/// here in one line instead of failing inside the first step). `Err`: why not. A spec this
/// build cannot open at all passes, for `training_device` to name the missing feature.
pub fn check_bf16(spec: DeviceSpec) -> Result<(), String> {
    match spec {
        DeviceSpec::Cpu => Err(
            "burn-flex computes in fp32 only; bf16 needs LibTorch (--device libtorch-cpu or cuda)"
                .into(),
        ),
        #[cfg(feature = "tch")]
        DeviceSpec::LibtorchCpu | DeviceSpec::Cuda(_) => {
            let device = match spec {
                DeviceSpec::Cuda(n) if tch::Cuda::is_available() => tch::Device::Cuda(n),
                // Unavailable CUDA: `training_device` says why, in its own words.
                DeviceSpec::Cuda(_) => return Ok(()),
                _ => tch::Device::Cpu,
            };
            let a = tch::Tensor::f_ones([2, 2], (tch::Kind::BFloat16, device))
                .map_err(|e| format!("this device has no bfloat16 tensors ({e})"))?;
            a.f_matmul(&a)
                .map(drop)
                .map_err(|e| format!("this device cannot multiply bfloat16 matrices ({e})"))
        }
        #[cfg(not(feature = "tch"))]
        DeviceSpec::LibtorchCpu | DeviceSpec::Cuda(_) => Ok(()),
    }
}

/// One f32 tensor of burn-flex (not an autodiff wrapper: `inner()` first) as a contiguous buffer
/// from its start, or `None`: host passes read and write burn-flex's storage in place.
#[cfg(feature = "flex")]
pub fn flex_buffer<const D: usize>(
    t: &burn::prelude::Tensor<D>,
    n: usize,
) -> Option<burn_flex::FlexTensor> {
    if t.dtype() != burn::tensor::DType::F32 {
        return None;
    }
    let flex = t.clone().try_into_primitive::<burn_flex::Flex>().ok()?;
    let layout = flex.layout();
    (layout.is_contiguous()
        && layout.start_offset() == 0
        && layout.num_elements() == n
        && flex.storage::<f32>().len() == n)
        .then_some(flex)
}

#[cfg(all(test, not(feature = "tch")))]
mod tests {
    use super::*;

    #[test]
    fn libtorch_without_the_feature_is_an_error_naming_it() {
        let err = DeviceSpec::Cuda(0).device().unwrap_err().to_string();
        assert!(err.contains("`tch` feature"), "{err}");
    }
}

/// The libtorch loaded is the one conelab was compiled against (`aten::check_libtorch`).
#[cfg(feature = "tch")]
fn libtorch_matches(spec: DeviceSpec) -> Result<(), DeviceError> {
    crate::aten::check_libtorch().map_err(|e| DeviceError::Unavailable {
        spec,
        reason: e.to_string(),
    })
}
