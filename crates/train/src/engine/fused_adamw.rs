//! AdamW with its update as one host pass over burn-flex's (or LibTorch CPU's) own buffers.
//!
//! burn's AdamW makes about a dozen tensor passes per parameter (the two moments, the two bias
//! corrections, the square root, the division, the decay, the update), each into a fresh buffer
//! and most of them on one thread: about 50 ms of an `lstm` step (13.3 M parameters) on two
//! cores, the same on one. Here the parameter, its gradient and both moments are read once, in
//! place, through burn's extension point for backend primitives (`Tensor::try_into_primitive`),
//! and the update is one loop, parallel over chunks, with burn's formula in burn's order:
//!
//!   t ← t + 1,   m ← β₁·m + (1 − β₁)·g,   v ← β₂·v + (1 − β₂)·g²
//!   θ ← θ·(1 − η·λ) − η · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
//!
//! (no decay factor when η·λ = 0). On an `lstm` step: 40–50 ms → 9–12 ms (the pass is compiled
//! for AVX2 where the CPU has it: left at SSE2 with its scalar divisions it took 37–48 ms). The
//! moments are updated in their own buffers (burn's state
//! hands them over by value, so they are not shared) and the new θ is written into the
//! gradient's buffer, which nothing else holds; θ itself is only read, so the model keeping its
//! old value costs no copy. Where a buffer is shared after all, it is copied first (burn-flex's
//! copy-on-write), never written under another holder.
//!
//! The state is burn's own `AdamWState`, so checkpoints written with either optimizer load into
//! the other. On LibTorch CPU the same pass runs over LibTorch's buffers, which live in host
//! memory (burn's AdamW there: about a dozen ATen kernels per parameter, 38–47 ms of an `lstm`
//! step). On CUDA (and LibTorch CPU on the device paths) the steps of one update are queued
//! and written by one multi-tensor `_fused_adamw_` (`AdamWBatch`, our ATen extension); for a
//! state neither handles (AMSGrad's running maximum), burn's AdamW does the step.

#[cfg(feature = "flex")]
use burn::optim::AdaptiveMomentumState;
use burn::optim::{AdamW, AdamWConfig, AdamWState, LearningRate, Optimizer};
use burn::prelude::*;
#[cfg(any(feature = "flex", feature = "tch"))]
use burn::tensor::DType;
#[cfg(feature = "flex")]
use burn_flex::{Flex, FlexTensor};
#[cfg(any(feature = "flex", feature = "tch"))]
use rayon::prelude::*;

/// Elements per rayon task: large enough to amortise the task, small enough to balance.
#[cfg(any(feature = "flex", feature = "tch"))]
pub(super) const CHUNK: usize = 1 << 15;

/// burn's AdamW hyper-parameters and the fused step.
#[derive(Clone)]
#[cfg_attr(not(any(feature = "flex", feature = "tch")), allow(dead_code))]
pub struct FusedAdamW {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
    /// Whether the update may take the host pass where the buffers allow it (the default), or
    /// always burn's tensor ops, as on a device whose memory the host does not see
    /// (`Trainer::use_device_paths`).
    host_pass: bool,
    /// The same optimizer in burn's tensor ops, for devices whose memory the host does not see.
    burn: AdamW,
}

impl FusedAdamW {
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: f32) -> Self {
        Self {
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
            host_pass: true,
            burn: AdamWConfig::new()
                .with_beta_1(beta_1)
                .with_beta_2(beta_2)
                .with_epsilon(epsilon)
                .with_weight_decay(weight_decay)
                .build(),
        }
    }

    /// The same optimizer, with or without the host pass.
    pub fn with_host_pass(self, on: bool) -> Self {
        Self {
            host_pass: on,
            ..self
        }
    }
}

#[cfg(feature = "flex")]
use crate::model::flex_buffer;

/// The step's scalars, burn's formula's constants.
#[cfg(any(feature = "flex", feature = "tch"))]
struct Constants {
    beta_1: f32,
    beta_2: f32,
    factor_1: f32,
    factor_2: f32,
    correction_1: f32,
    correction_2: f32,
    epsilon: f32,
    decay: f32,
    lr: f32,
}

/// One chunk of the update: `out` holds the gradient and receives the new θ. Written as plain
/// arithmetic over equal-length slices so that the compiler vectorises it; Rust never contracts
/// a product and a sum into an FMA, so the AVX2 build of it computes the same values.
#[cfg(any(feature = "flex", feature = "tch"))]
#[inline(always)]
fn update(out: &mut [f32], theta: &[f32], m: &mut [f32], v: &mut [f32], c: &Constants) {
    let n = out.len().min(theta.len()).min(m.len()).min(v.len());
    let (out, theta, m, v) = (&mut out[..n], &theta[..n], &mut m[..n], &mut v[..n]);
    for i in 0..n {
        let g = out[i];
        let mi = m[i] * c.beta_1 + g * c.factor_1;
        let vi = v[i] * c.beta_2 + g * g * c.factor_2;
        m[i] = mi;
        v[i] = vi;
        let step = (mi / c.correction_1) / ((vi / c.correction_2).sqrt() + c.epsilon);
        out[i] = theta[i] * c.decay - step * c.lr;
    }
}

/// [`update`] compiled for AVX2 (eight lanes instead of SSE2's four).
#[cfg(all(any(feature = "flex", feature = "tch"), target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
fn update_avx2(out: &mut [f32], theta: &[f32], m: &mut [f32], v: &mut [f32], c: &Constants) {
    update(out, theta, m, v, c)
}

#[cfg(feature = "flex")]
impl FusedAdamW {
    /// The fused step; `Err` gives the inputs back untouched where they are not all contiguous
    /// f32 buffers of burn-flex.
    // The Err hands the inputs back by value, once per parameter and step: boxing them would
    // allocate where nothing needs to.
    #[allow(clippy::type_complexity, clippy::result_large_err)]
    fn flex_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<AdamWState<D>>,
    ) -> Result<(Tensor<D>, AdamWState<D>), (Tensor<D>, Tensor<D>, Option<AdamWState<D>>)> {
        let Some(StepBuffers {
            theta,
            mut out,
            moments,
            time,
        }) = step_buffers(&tensor, &grad, &state, flex_buffer::<D>)
        else {
            return Err((tensor, grad, state));
        };
        let (mut m, mut v) = moments.unwrap_or_else(|| {
            let zeros = || FlexTensor::zeros(theta.layout().shape().clone(), DType::F32);
            (zeros(), zeros())
        });
        // The handles these buffers came from let go of them: each is now held once (the
        // parameter's may still be held by the model, and is only read).
        drop((grad, state));
        let time = time + 1;
        let constants = self.constants(lr, time);
        // `storage_mut` copies a buffer that is still shared (never here, in a step) instead of
        // writing under another holder.
        update_in_chunks(
            out.storage_mut::<f32>(),
            theta.storage::<f32>(),
            m.storage_mut::<f32>(),
            v.storage_mut::<f32>(),
            &constants,
        );
        drop(theta);
        drop(tensor);
        let rebuild = |t: FlexTensor| Tensor::<D>::from_primitive::<Flex>(t);
        #[cfg(test)]
        tests::FUSED_STEPS.with(|c| c.set(c.get() + 1));
        let momentum = AdaptiveMomentumState::new(time, rebuild(m), rebuild(v));
        Ok((rebuild(out), AdamWState::new(momentum)))
    }
}

/// The fused step on LibTorch's CPU buffers. burn marks its LibTorch backend deprecated (in
/// favour of CubeCL); it is conelab's LibTorch path all the same.
#[cfg(feature = "tch")]
#[allow(deprecated)]
mod libtorch {
    use burn::backend::{LibTorch, libtorch::TchTensor};
    use burn::optim::{AdamWState, AdaptiveMomentumState, LearningRate};
    use burn::prelude::*;
    use burn::tensor::DType;

    use super::{FusedAdamW, StepBuffers, step_buffers, update_in_chunks};
    use crate::aten::{self, AdamWStep, AtenError};
    use std::cell::RefCell;

    /// One f32 tensor of LibTorch in host memory (`--device libtorch-cpu`), contiguous, with `n`
    /// elements.
    fn tch_buffer<const D: usize>(t: &Tensor<D>, n: usize) -> Option<TchTensor> {
        if t.dtype() != DType::F32 || n == 0 {
            return None;
        }
        let lt = t.clone().try_into_primitive::<LibTorch>().ok()?;
        (lt.tensor.device() == tch::Device::Cpu
            && lt.tensor.kind() == tch::Kind::Float
            && lt.tensor.is_contiguous()
            && lt.tensor.numel() == n)
            .then_some(lt)
    }

    /// `t` to write in place: itself when nothing else holds its storage, else a copy of it (as
    /// burn-flex's copy-on-write), so that no other holder sees the write.
    fn tch_writable(t: TchTensor) -> TchTensor {
        if t.can_mut() {
            t
        } else {
            TchTensor::new(t.tensor.copy())
        }
    }

    /// One parameter's update, queued by `queue_step` until its batch is flushed.
    struct Queued {
        /// θ as the model held it: only read.
        old: tch::Tensor,
        /// The fresh buffer the new θ goes to, already in the model the step handed back.
        new: tch::Tensor,
        grad: tch::Tensor,
        m: tch::Tensor,
        v: tch::Tensor,
        h: AdamWStep,
    }

    thread_local! {
        /// The open batch's queue on this thread (`None`: no batch, steps are not deferred).
        static QUEUE: RefCell<Option<Vec<Queued>>> = const { RefCell::new(None) };
    }

    /// AdamW over all parameters at once on LibTorch (the paths CUDA takes): while a batch is
    /// open on this thread, [`FusedAdamW`]'s step queues each LibTorch parameter and hands back
    /// a fresh buffer for its new value and the state's moments, all to be written by
    /// [`AdamWBatch::flush`]: per group of equal hyper-parameters, step count and device, one
    /// `_foreach_copy_` (θ into the fresh buffers) and one `_fused_adamw_`, instead of about a
    /// dozen ATen operators per parameter. θ's own storage is only read, so a model held
    /// elsewhere (a checkpoint being written, the frozen rows' copy) keeps its values; a moment
    /// shared with another holder is copied first. Until the flush the handed-back values are
    /// not yet written: flush before anything reads the model. Not nested; one per step.
    #[must_use = "flush the batch: until then the stepped parameters hold no values"]
    pub struct AdamWBatch(std::marker::PhantomData<*const ()>);

    impl AdamWBatch {
        pub fn open() -> Self {
            QUEUE.with(|q| *q.borrow_mut() = Some(Vec::new()));
            Self(std::marker::PhantomData)
        }

        /// Writes every queued update; how many parameters it updated.
        pub fn flush(self) -> Result<usize, AtenError> {
            self.flush_guarded(aten::DeviceGuard::default())
        }

        /// [`AdamWBatch::flush`], reading what the device decided about the step
        /// (`aten::fused_adamw`): where `found_inf` holds 1, no parameter or moment is written
        /// (the new parameters are the old values); the gradients are read divided by
        /// `grad_scale` (the clip).
        pub fn flush_guarded(self, guard: aten::DeviceGuard<'_>) -> Result<usize, AtenError> {
            let queued = QUEUE.with(|q| q.borrow_mut().take()).unwrap_or_default();
            let mut groups: Vec<(AdamWStep, tch::Device, Vec<&Queued>)> = Vec::new();
            for item in &queued {
                let device = item.old.device();
                match groups
                    .iter_mut()
                    .find(|(h, d, _)| *h == item.h && *d == device)
                {
                    Some((_, _, items)) => items.push(item),
                    None => groups.push((item.h, device, vec![item])),
                }
            }
            for (h, _, items) in &groups {
                let column = |f: fn(&Queued) -> &tch::Tensor| -> Vec<&tch::Tensor> {
                    items.iter().map(|q| f(q)).collect()
                };
                aten::foreach_copy_(&column(|q| &q.new), &column(|q| &q.old))?;
                aten::fused_adamw(
                    &column(|q| &q.new),
                    &column(|q| &q.grad),
                    &column(|q| &q.m),
                    &column(|q| &q.v),
                    *h,
                    guard,
                )?;
            }
            Ok(queued.len())
        }
    }

    impl Drop for AdamWBatch {
        fn drop(&mut self) {
            QUEUE.with(|q| q.borrow_mut().take());
        }
    }

    /// `t` made contiguous where it is not (the fused kernels read dense buffers).
    fn dense(t: TchTensor) -> TchTensor {
        if t.tensor.is_contiguous() {
            t
        } else {
            TchTensor::new(t.tensor.contiguous())
        }
    }

    impl FusedAdamW {
        /// Queues the step of one LibTorch parameter in this thread's open [`AdamWBatch`];
        /// `Err` gives the inputs back untouched where no batch is open or the tensors are not
        /// f32 LibTorch tensors of one shape (or the state is AMSGrad's).
        #[allow(clippy::type_complexity, clippy::result_large_err)]
        pub(super) fn queue_step<const D: usize>(
            &self,
            lr: LearningRate,
            tensor: Tensor<D>,
            grad: Tensor<D>,
            state: Option<AdamWState<D>>,
        ) -> Result<(Tensor<D>, AdamWState<D>), (Tensor<D>, Tensor<D>, Option<AdamWState<D>>)>
        {
            let open = QUEUE.with(|q| q.borrow().is_some());
            let shape = tensor.shape();
            let fits = |t: &Tensor<D>| t.dtype() == DType::F32 && t.shape() == shape;
            let amsgrad = state
                .as_ref()
                .is_some_and(|s| s.momentum.max_moment_2.is_some());
            let moments_fit = state
                .as_ref()
                .is_none_or(|s| fits(&s.momentum.moment_1) && fits(&s.momentum.moment_2));
            if !open || amsgrad || !fits(&tensor) || !fits(&grad) || !moments_fit {
                return Err((tensor, grad, state));
            }
            let libtorch = |t: &Tensor<D>| t.clone().try_into_primitive::<LibTorch>().ok();
            let moments = match &state {
                None => None,
                Some(s) => match (
                    libtorch(&s.momentum.moment_1),
                    libtorch(&s.momentum.moment_2),
                ) {
                    (Some(m), Some(v)) => Some((m, v)),
                    _ => return Err((tensor, grad, state)),
                },
            };
            let (Some(theta), Some(g)) = (libtorch(&tensor), libtorch(&grad)) else {
                return Err((tensor, grad, state));
            };
            let time = state.as_ref().map_or(0, |s| s.momentum.time);
            // The handles these came from let go, so that a moment held nowhere else counts so.
            drop((tensor, grad, state));
            let (m, v) = match moments {
                Some((m, v)) => (dense(tch_writable(m)), dense(tch_writable(v))),
                None => {
                    let zeros = || TchTensor::new(theta.tensor.zeros_like());
                    (zeros(), zeros())
                }
            };
            let (theta, g) = (dense(theta), dense(g));
            let new = TchTensor::new(theta.tensor.empty_like());
            let h = AdamWStep {
                lr,
                beta1: self.beta_1 as f64,
                beta2: self.beta_2 as f64,
                weight_decay: self.weight_decay as f64,
                epsilon: self.epsilon as f64,
                step: time + 1,
            };
            QUEUE.with(|q| {
                if let Some(queue) = q.borrow_mut().as_mut() {
                    queue.push(Queued {
                        old: theta.tensor.shallow_clone(),
                        new: new.tensor.shallow_clone(),
                        grad: g.tensor.shallow_clone(),
                        m: m.tensor.shallow_clone(),
                        v: v.tensor.shallow_clone(),
                        h,
                    });
                }
            });
            let rebuild = |t: TchTensor| Tensor::<D>::from_primitive::<LibTorch>(t);
            let momentum = AdaptiveMomentumState::new(time + 1, rebuild(m), rebuild(v));
            Ok((rebuild(new), AdamWState::new(momentum)))
        }
    }

    impl FusedAdamW {
        /// `flex_step` for LibTorch on the CPU: the same pass over LibTorch's buffers, which live
        /// in host memory (burn's AdamW there: about a dozen ATen kernels per parameter, 38–47 ms
        /// of an `lstm` step). `Err` gives the inputs back untouched.
        #[allow(clippy::type_complexity, clippy::result_large_err)]
        pub(super) fn tch_step<const D: usize>(
            &self,
            lr: LearningRate,
            tensor: Tensor<D>,
            grad: Tensor<D>,
            state: Option<AdamWState<D>>,
        ) -> Result<(Tensor<D>, AdamWState<D>), (Tensor<D>, Tensor<D>, Option<AdamWState<D>>)>
        {
            let n = tensor.shape().num_elements();
            let Some(StepBuffers {
                theta,
                out,
                moments,
                time,
            }) = step_buffers(&tensor, &grad, &state, tch_buffer::<D>)
            else {
                return Err((tensor, grad, state));
            };
            let (m, v) = moments.unwrap_or_else(|| {
                let zeros = || {
                    TchTensor::new(tch::Tensor::zeros(
                        theta.tensor.size(),
                        (tch::Kind::Float, tch::Device::Cpu),
                    ))
                };
                (zeros(), zeros())
            });
            // The handles these buffers came from let go of them, so that a buffer held nowhere
            // else counts as such (the parameter's may still be held by the model: only read).
            drop((grad, state));
            let (mut out, mut m, mut v) = (tch_writable(out), tch_writable(m), tch_writable(v));
            let bytes = n * std::mem::size_of::<f32>();
            let pointers = |ts: [&TchTensor; 4]| ts.map(|t| t.tensor.data_ptr() as usize);
            let disjoint = |p: &[usize; 4]| {
                p.iter().enumerate().all(|(i, a)| {
                    p[i + 1..]
                        .iter()
                        .all(|b| a.saturating_add(bytes) <= *b || b.saturating_add(bytes) <= *a)
                })
            };
            if !disjoint(&pointers([&out, &m, &v, &theta])) {
                // Never seen: an alias burn-tch did not count. Fresh copies are their own memory.
                let copy = |t: &TchTensor| TchTensor::new(t.tensor.copy());
                (out, m, v) = (copy(&out), copy(&m), copy(&v));
            }
            let pointers = pointers([&out, &m, &v, &theta]);
            let constants = self.constants(lr, time + 1);
            // SAFETY: each pointer is the start of a live, contiguous CPU f32 tensor of n > 0
            // elements (checked by `tch_buffer`; `copy` is zeros_like + copy_, which keeps a
            // contiguous layout); out, m and v are held by nothing else: that rests on burn-tch's
            // own count of who shares a storage (`can_mut`, as its in-place kernels use it),
            // the disjointness check above being only a backstop against an alias it missed;
            // and the tensors outlive the slices.
            unsafe {
                let slice = |p: usize| std::slice::from_raw_parts_mut(p as *mut f32, n);
                update_in_chunks(
                    slice(pointers[0]),
                    std::slice::from_raw_parts(pointers[3] as *const f32, n),
                    slice(pointers[1]),
                    slice(pointers[2]),
                    &constants,
                );
            }
            drop(theta);
            drop(tensor);
            let rebuild = |t: TchTensor| Tensor::<D>::from_primitive::<LibTorch>(t);
            #[cfg(test)]
            super::tests::FUSED_STEPS.with(|c| c.set(c.get() + 1));
            let momentum = AdaptiveMomentumState::new(time + 1, rebuild(m), rebuild(v));
            Ok((rebuild(out), AdamWState::new(momentum)))
        }
    }
}

#[cfg(feature = "tch")]
pub use libtorch::AdamWBatch;

#[cfg(any(feature = "flex", feature = "tch"))]
impl FusedAdamW {
    /// Step `time`'s constants (`time` counted from 1, as burn's state after its increment).
    fn constants(&self, lr: LearningRate, time: usize) -> Constants {
        let power = i32::try_from(time).unwrap_or(i32::MAX);
        let decay_rate = lr * self.weight_decay as f64;
        Constants {
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            factor_1: 1.0 - self.beta_1,
            factor_2: 1.0 - self.beta_2,
            correction_1: 1f32 - self.beta_1.powi(power),
            correction_2: 1f32 - self.beta_2.powi(power),
            epsilon: self.epsilon,
            // θ·1 is θ exactly: no decay is the same as burn's skipped multiply.
            decay: if decay_rate == 0.0 {
                1.0
            } else {
                (1.0 - decay_rate) as f32
            },
            lr: lr as f32,
        }
    }
}

/// A fused step's buffers, each taken by a backend's reader: θ (only read), the gradient (which
/// receives the new θ), the two moments (`None`: a first step, zeros to be made) and the state's
/// step count.
#[cfg(any(feature = "flex", feature = "tch"))]
struct StepBuffers<T> {
    theta: T,
    out: T,
    moments: Option<(T, T)>,
    time: usize,
}

/// The buffers of one step through `buffer` (a backend's reader of an `n`-element tensor);
/// `None` where one is not readable, the shapes differ or the state is one the pass does not
/// handle (AMSGrad's running maximum).
#[cfg(any(feature = "flex", feature = "tch"))]
fn step_buffers<const D: usize, T>(
    tensor: &Tensor<D>,
    grad: &Tensor<D>,
    state: &Option<AdamWState<D>>,
    buffer: impl Fn(&Tensor<D>, usize) -> Option<T>,
) -> Option<StepBuffers<T>> {
    if grad.shape() != tensor.shape() {
        return None;
    }
    let n = tensor.shape().num_elements();
    let (moments, time) = match state {
        Some(s) if s.momentum.max_moment_2.is_none() => (
            Some((
                buffer(&s.momentum.moment_1, n)?,
                buffer(&s.momentum.moment_2, n)?,
            )),
            s.momentum.time,
        ),
        Some(_) => return None,
        None => (None, 0),
    };
    Some(StepBuffers {
        theta: buffer(tensor, n)?,
        out: buffer(grad, n)?,
        moments,
        time,
    })
}

/// [`update`] over whole buffers, parallel over chunks (AVX2 where the CPU has it).
#[cfg(any(feature = "flex", feature = "tch"))]
fn update_in_chunks(out: &mut [f32], theta: &[f32], m: &mut [f32], v: &mut [f32], c: &Constants) {
    #[cfg(target_arch = "x86_64")]
    let avx2 = conelab_metrics::fastmath::has_avx2_fma();
    out.par_chunks_mut(CHUNK)
        .zip(theta.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((out, theta), m), v)| {
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                unsafe { update_avx2(out, theta, m, v, c) };
                return;
            }
            update(out, theta, m, v, c)
        });
}

thread_local! {
    /// While set on this thread, a step of [`FusedAdamW`] takes one step back instead
    /// ([`rewind`]).
    static REWINDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Takes back one step of `optim` (a [`FusedAdamW`]'s) for the parameters `ids` of `module`
/// whose update the device skipped (`AdamWBatch::flush_unless`): the skipped update left the
/// parameters and moments as they were, but burn's state counted the step (its `time`, which
/// sets the bias corrections). Each state's count goes back by one, and a state that the skipped
/// step created (count 0 again, its moments the zeros they started as) is dropped, as if the
/// step had never been taken. Nothing is computed: the parameters' own values stand in for the
/// gradients burn's stepping wants.
pub fn rewind<M: Module>(
    optim: &mut burn::optim::ModuleOptimizer,
    module: M,
    ids: &[burn::module::ParamId],
) -> M {
    use burn::module::{ModuleVisitor, Param, ParamId};
    struct Own<'a> {
        ids: &'a [ParamId],
        grads: burn::optim::GradientsParams,
    }
    impl ModuleVisitor for Own<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.ids.contains(&param.id) {
                self.grads.register(param.id, param.val().detach());
            }
        }
    }
    let mut own = Own {
        ids,
        grads: burn::optim::GradientsParams::new(),
    };
    module.visit(&mut own);
    REWINDING.with(|r| r.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            REWINDING.with(|r| r.set(false));
        }
    }
    let _reset = Reset;
    optim.step(0.0, module, own.grads)
}

impl Optimizer for FusedAdamW {
    type State<const D: usize> = AdamWState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        if REWINDING.with(std::cell::Cell::get) {
            drop(grad);
            let state = state.and_then(|s| {
                let m = s.momentum;
                (m.time > 1).then(|| {
                    AdamWState::new(burn::optim::AdaptiveMomentumState {
                        time: m.time - 1,
                        ..m
                    })
                })
            });
            return (tensor, state);
        }
        #[cfg(feature = "flex")]
        let (tensor, grad, state) = match self.host_pass {
            true => match self.flex_step(lr, tensor, grad, state) {
                Ok((tensor, state)) => return (tensor, Some(state)),
                Err(inputs) => inputs,
            },
            false => (tensor, grad, state),
        };
        #[cfg(feature = "tch")]
        let (tensor, grad, state) = match self.host_pass {
            true => match self.tch_step(lr, tensor, grad, state) {
                Ok((tensor, state)) => return (tensor, Some(state)),
                Err(inputs) => inputs,
            },
            false => (tensor, grad, state),
        };
        // LibTorch off the host pass (CUDA; LibTorch CPU on the device paths): queued for one
        // multi-tensor update when the caller opened a batch.
        #[cfg(feature = "tch")]
        let (tensor, grad, state) = match self.queue_step(lr, tensor, grad, state) {
            Ok((tensor, state)) => return (tensor, Some(state)),
            Err(inputs) => inputs,
        };
        self.burn.step(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        AdamW::to_device(state, device)
    }
}

#[cfg(test)]
mod tests {
    use burn::module::Param;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{GradientsParams, ModuleOptimizer};

    use super::*;
    use crate::model::DeviceSpecExt;
    use conelab_core::model::DeviceSpec;

    thread_local! {
        /// Steps this thread took through the fused pass (not burn's AdamW).
        pub(super) static FUSED_STEPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn fused_steps() -> usize {
        FUSED_STEPS.with(std::cell::Cell::get)
    }

    /// The devices whose buffers the fused pass reads in place: burn-flex, and LibTorch on the
    /// CPU in a `--features tch` build (`cargo test --features tch --lib fused_adamw`).
    fn fused_devices() -> Vec<DeviceSpec> {
        #[allow(unused_mut)]
        let mut specs = vec![DeviceSpec::Cpu];
        #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
        specs.push(DeviceSpec::LibtorchCpu);
        specs
    }

    const BETAS: (f32, f32) = (0.9, 0.999);
    const EPSILON: f32 = 1e-8;

    /// AdamW written out in f64 from the formulas (module documentation), one scalar parameter.
    fn reference(theta0: f64, grads: &[f64], lr: f64, decay: f64) -> f64 {
        let (b1, b2) = (BETAS.0 as f64, BETAS.1 as f64);
        let (mut theta, mut m, mut v) = (theta0, 0.0, 0.0);
        for (t, &g) in grads.iter().enumerate() {
            let t = t as i32 + 1;
            m = b1 * m + (1.0 - b1) * g;
            v = b2 * v + (1.0 - b2) * g * g;
            let step =
                (m / (1.0 - b1.powi(t))) / ((v / (1.0 - b2.powi(t))).sqrt() + EPSILON as f64);
            theta = theta * (1.0 - lr * decay) - lr * step;
        }
        theta
    }

    fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.try_into_vec_as::<f32>().expect("read")
    }

    #[test]
    fn one_parameter_follows_the_formulas() {
        for spec in fused_devices() {
            // The host pass, and burn's tensor ops as on CUDA (`Trainer::use_device_paths`).
            for host_pass in [true, false] {
                one_parameter_follows_the_formulas_on(spec, host_pass);
            }
        }
    }

    fn one_parameter_follows_the_formulas_on(spec: DeviceSpec, host_pass: bool) {
        let device = spec.device().expect("device");
        let optim = FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, 0.1).with_host_pass(host_pass);
        let theta0 = [0.5f32, -1.25, 3.0];
        let grads = [
            [0.3f32, -2.0, 1e-3],
            [0.1, 0.5, -4.0],
            [-0.7, 0.0, 2.5],
            [1.5, -0.2, 0.0],
        ];
        let lr = 0.01;
        let mut theta = Tensor::<1>::from_floats(theta0, &device);
        let mut state = None;
        let before = fused_steps();
        for g in grads {
            let grad = Tensor::<1>::from_floats(g, &device);
            let (next, s) = optim.step(lr, theta, grad, state);
            (theta, state) = (next, s);
        }
        assert_eq!(state.as_ref().map(|s| s.momentum.time), Some(4));
        assert_eq!(
            fused_steps() - before,
            if host_pass { 4 } else { 0 },
            "{spec}: every step took the host pass, or none did (host_pass = {host_pass})"
        );
        let got = values(theta);
        for (i, &x0) in theta0.iter().enumerate() {
            let gs: Vec<f64> = grads.iter().map(|g| g[i] as f64).collect();
            let want = reference(x0 as f64, &gs, lr, 0.1);
            assert!(
                (got[i] as f64 - want).abs() < 1e-6,
                "{spec} (host pass {host_pass}) θ{i}: {} against {want}",
                got[i]
            );
        }
    }

    fn linear(device: &Device) -> Linear {
        let mut layer = LinearConfig::new(37, 29).init(device);
        let w: Vec<f32> = (0..37 * 29)
            .map(|i| ((i * 13) % 17) as f32 / 17.0 - 0.5)
            .collect();
        layer.weight = Param::from_tensor(Tensor::from_data(TensorData::new(w, [37, 29]), device));
        let b: Vec<f32> = (0..29).map(|i| ((i * 5) % 7) as f32 / 7.0 - 0.5).collect();
        layer.bias = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(b, [29]),
            device,
        )));
        layer
    }

    /// The gradients of a squared output of `layer` on step `k`'s input (varied per step).
    fn gradients(layer: &Linear, k: usize, device: &Device) -> GradientsParams {
        let x: Vec<f32> = (0..8 * 37)
            .map(|i| (((i + 7 * k) * 31) % 23) as f32 / 23.0 - 0.4)
            .collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [8, 37]), device);
        let loss = layer.forward(x).powi_scalar(2).sum();
        GradientsParams::from_grads(loss.backward(), layer)
    }

    fn weights(layer: &Linear) -> Vec<f32> {
        let mut all = values(layer.weight.val());
        all.extend(values(layer.bias.as_ref().expect("bias").val()));
        all
    }

    /// Whole module steps against burn's AdamW (a second implementation, tensor op by tensor op),
    /// with and without decay; and each optimizer's saved state continued by the other.
    #[test]
    fn module_steps_and_saved_state_match_burns_adamw() {
        for spec in fused_devices() {
            module_steps_and_saved_state_match_burns_adamw_on(spec);
        }
    }

    fn module_steps_and_saved_state_match_burns_adamw_on(spec: DeviceSpec) {
        let device = spec.training_device().expect("device");
        for decay in [0.0, 0.01] {
            let burns = || {
                AdamWConfig::new()
                    .with_beta_1(BETAS.0)
                    .with_beta_2(BETAS.1)
                    .with_epsilon(EPSILON)
                    .with_weight_decay(decay)
                    .init()
            };
            let ours = || ModuleOptimizer::from(FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, decay));
            let (mut a, mut b) = (linear(&device), linear(&device));
            let (mut opt_a, mut opt_b) = (ours(), burns());
            let moved = weights(&a);
            for k in 0..5 {
                let lr = 0.02 / (k + 1) as f64;
                let before = fused_steps();
                a = opt_a.step(lr, a.clone(), gradients(&a, k, &device));
                assert_eq!(
                    fused_steps() - before,
                    2,
                    "{spec}: weight and bias took the fused pass"
                );
                b = opt_b.step(lr, b.clone(), gradients(&b, k, &device));
                for (x, y) in weights(&a).iter().zip(weights(&b)) {
                    assert!(
                        (x - y).abs() <= 1e-6 * (1.0 + y.abs()),
                        "{spec} step {k}: {x} against {y}"
                    );
                }
            }
            assert!(
                weights(&a)
                    .iter()
                    .zip(&moved)
                    .filter(|(x, y)| x != y)
                    .count()
                    > 1_000,
                "the steps moved the weights"
            );
            // Saved by ours, continued by burn's, and the other way round: the same next step.
            let cross_a = burns().load_record(opt_a.to_record());
            let cross_b = ours().load_record(opt_b.to_record());
            for (mut from, mut cross, layer) in [(opt_a, cross_a, a), (opt_b, cross_b, b)] {
                let next = from.step(0.01, layer.clone(), gradients(&layer, 9, &device));
                let crossed = cross.step(0.01, layer.clone(), gradients(&layer, 9, &device));
                for (x, y) in weights(&next).iter().zip(weights(&crossed)) {
                    assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} against {y}");
                }
            }
        }
    }

    /// On LibTorch off the host pass (CUDA's path), steps queued in a batch and written by one
    /// `_fused_adamw_` follow the formulas and burn's AdamW, and each optimizer's saved state is
    /// continued by the other. Torch's AdamW is burn's formula (ε outside the root of the
    /// bias-corrected v̂ in both) with its f32 operations in another order, so the tolerance is
    /// a few ulps of θ: 1e-6 relative, as between the host pass and burn's.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn batched_libtorch_steps_follow_the_formulas_and_burns_adamw() {
        let spec = DeviceSpec::LibtorchCpu;
        let plain = spec.device().expect("device");
        let optim = FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, 0.1).with_host_pass(false);
        let theta0 = [0.5f32, -1.25, 3.0];
        let grads = [[0.3f32, -2.0, 1e-3], [0.1, 0.5, -4.0], [-0.7, 0.0, 2.5]];
        let mut theta = Tensor::<1>::from_floats(theta0, &plain);
        let mut state = None;
        for g in grads {
            let batch = AdamWBatch::open();
            let (next, s) = optim.step(0.01, theta, Tensor::<1>::from_floats(g, &plain), state);
            assert_eq!(batch.flush().expect("flushed"), 1, "the step was queued");
            (theta, state) = (next, s);
        }
        assert_eq!(state.as_ref().map(|s| s.momentum.time), Some(3));
        let got = values(theta);
        for (i, &x0) in theta0.iter().enumerate() {
            let gs: Vec<f64> = grads.iter().map(|g| g[i] as f64).collect();
            let want = reference(x0 as f64, &gs, 0.01, 0.1);
            assert!(
                (got[i] as f64 - want).abs() < 1e-6,
                "θ{i}: {} against {want}",
                got[i]
            );
        }

        let device = spec.training_device().expect("device");
        for decay in [0.0, 0.01] {
            let burns = || {
                AdamWConfig::new()
                    .with_beta_1(BETAS.0)
                    .with_beta_2(BETAS.1)
                    .with_epsilon(EPSILON)
                    .with_weight_decay(decay)
                    .init()
            };
            let ours = || {
                ModuleOptimizer::from(
                    FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, decay).with_host_pass(false),
                )
            };
            let batched = |opt: &mut ModuleOptimizer, layer: &Linear, k: usize, lr: f64| {
                let batch = AdamWBatch::open();
                let next = opt.step(lr, layer.clone(), gradients(layer, k, &device));
                assert_eq!(batch.flush().expect("flushed"), 2, "weight and bias queued");
                next
            };
            let (mut a, mut b) = (linear(&device), linear(&device));
            let (mut opt_a, mut opt_b) = (ours(), burns());
            let start = weights(&a);
            for k in 0..5 {
                let lr = 0.02 / (k + 1) as f64;
                a = batched(&mut opt_a, &a, k, lr);
                b = opt_b.step(lr, b.clone(), gradients(&b, k, &device));
                for (x, y) in weights(&a).iter().zip(weights(&b)) {
                    assert!(
                        (x - y).abs() <= 1e-6 * (1.0 + y.abs()),
                        "step {k}: {x} against {y}"
                    );
                }
            }
            let moved = weights(&a)
                .iter()
                .zip(&start)
                .filter(|(x, y)| x != y)
                .count();
            assert!(moved > 1_000, "the steps moved the weights ({moved})");
            let cross_a = burns().load_record(opt_a.to_record());
            let mut cross_b = ours().load_record(opt_b.to_record());
            let next = opt_a.step(0.01, a.clone(), gradients(&a, 9, &device));
            let crossed = batched(&mut cross_b, &b, 9, 0.01);
            let from_b = opt_b.step(0.01, b.clone(), gradients(&b, 9, &device));
            let mut cross_a = cross_a;
            let crossed_a = cross_a.step(0.01, a.clone(), gradients(&a, 9, &device));
            for (x, y) in weights(&next).iter().zip(weights(&crossed_a)) {
                assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} against {y}");
            }
            for (x, y) in weights(&crossed).iter().zip(weights(&from_b)) {
                assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} against {y}");
            }
        }
    }

    /// A model held elsewhere while the batch writes (a checkpoint being saved, the frozen rows'
    /// copy) keeps its values: θ's storage is only read; a dropped batch leaves nothing queued;
    /// no batch open, no queue (burn's AdamW steps).
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    fn the_batch_writes_no_buffer_held_elsewhere_and_leaves_nothing_behind() {
        let device = DeviceSpec::LibtorchCpu.training_device().expect("device");
        let mut opt = ModuleOptimizer::from(
            FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, 0.01).with_host_pass(false),
        );
        let layer = linear(&device);
        let held = layer.clone();
        let before = weights(&held);
        let batch = AdamWBatch::open();
        let next = opt.step(0.01, layer.clone(), gradients(&layer, 0, &device));
        batch.flush().expect("flushed");
        assert_eq!(weights(&held), before, "the held copy is untouched");
        assert_ne!(weights(&next), before, "the step moved the new parameters");
        // The saved optimizer state, held while the next step runs, is not written either.
        let bytes = |r: burn::optim::OptimizerRecord| r.into_bytes().expect("bytes").to_vec();
        let saved = bytes(opt.to_record());
        let held = opt.to_record();
        let batch = AdamWBatch::open();
        let next = opt.step(0.01, next.clone(), gradients(&next, 1, &device));
        batch.flush().expect("flushed");
        assert_eq!(bytes(held), saved, "the held moments are untouched");
        assert_ne!(bytes(opt.to_record()), saved, "the step wrote new moments");
        // Queued, then dropped unflushed: the next batch starts empty.
        let dropped = AdamWBatch::open();
        let _ = opt.step(0.01, next.clone(), gradients(&next, 2, &device));
        drop(dropped);
        assert_eq!(AdamWBatch::open().flush().expect("flushed"), 0);
        // No batch: burn's AdamW, nothing queued for a later batch.
        let _ = opt.step(0.01, next.clone(), gradients(&next, 3, &device));
        assert_eq!(AdamWBatch::open().flush().expect("flushed"), 0);
    }

    /// The AVX2 build of the update and the plain one give the same bits (no FMA contraction),
    /// so a run's values do not depend on the CPU it resumes on.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_update_gives_the_plain_updates_bits() {
        if !conelab_metrics::fastmath::has_avx2_fma() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI runs need AVX2"
            );
            return;
        }
        let n = 1_003;
        let wave = |k: usize, s: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * k) % 97) as f32 / 97.0 * s - s / 3.0)
                .collect()
        };
        let (theta, grad, m0, v0) = (wave(7, 2.0), wave(13, 0.5), wave(5, 0.1), wave(3, 0.01));
        let v0: Vec<f32> = v0.iter().map(|x| x.abs()).collect();
        let c = Constants {
            beta_1: 0.9,
            beta_2: 0.999,
            factor_1: 0.1,
            factor_2: 1.0 - 0.999,
            correction_1: 1.0 - 0.9f32.powi(3),
            correction_2: 1.0 - 0.999f32.powi(3),
            epsilon: 1e-8,
            decay: 0.999,
            lr: 0.003,
        };
        let run = |avx2: bool| {
            let (mut out, mut m, mut v) = (grad.clone(), m0.clone(), v0.clone());
            if avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                unsafe { update_avx2(&mut out, &theta, &mut m, &mut v, &c) }
            } else {
                update(&mut out, &theta, &mut m, &mut v, &c)
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            (bits(&out), bits(&m), bits(&v))
        };
        assert_eq!(run(true), run(false));
    }

    /// Buffers still held elsewhere (the model's old θ, a kept gradient, a kept state) are read,
    /// never written: their holders see the values they had.
    #[test]
    fn buffers_held_elsewhere_are_not_written() {
        for spec in fused_devices() {
            buffers_held_elsewhere_are_not_written_on(spec);
        }
    }

    fn buffers_held_elsewhere_are_not_written_on(spec: DeviceSpec) {
        let device = spec.device().expect("device");
        let optim = FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, 0.1);
        let theta = Tensor::<1>::from_floats([0.5f32, -1.25, 3.0, 2.0], &device);
        let grad = Tensor::<1>::from_floats([0.3f32, -2.0, 1e-3, 0.7], &device);
        let (kept_theta, kept_grad) = (theta.clone(), grad.clone());
        let (theta, state) = optim.step(0.01, theta, grad.clone(), None);
        let state = state.expect("a state");
        let kept_state = state.clone();
        let (next, _) = optim.step(0.01, theta.clone(), grad, Some(state));
        assert_eq!(values(kept_theta), vec![0.5, -1.25, 3.0, 2.0]);
        assert_eq!(values(kept_grad), vec![0.3, -2.0, 1e-3, 0.7]);
        assert_eq!(kept_state.momentum.time, 1);
        let m: Vec<f32> = values(kept_state.momentum.moment_1);
        for (m, g) in m.iter().zip([0.3f32, -2.0, 1e-3, 0.7]) {
            assert!((m - (1.0 - BETAS.0) * g).abs() < 1e-7, "kept m: {m}");
        }
        assert!(
            values(next).iter().zip(values(theta)).all(|(a, b)| *a != b),
            "the step moved θ"
        );
    }

    /// A gradient that is a second handle on θ's own storage, which burn-tch's count does not
    /// see (`TchTensor::new` of a shallow clone): the disjointness backstop copies it, so the
    /// kept θ keeps its values and the step is still the formula's.
    #[cfg(all(feature = "tch", not(feature = "tch-doc-only")))]
    #[test]
    #[allow(deprecated)]
    fn an_alias_burn_tch_does_not_count_is_not_written() {
        use burn::backend::{LibTorch, libtorch::TchTensor};
        let device = DeviceSpec::LibtorchCpu.device().expect("libtorch");
        let optim = FusedAdamW::new(BETAS.0, BETAS.1, EPSILON, 0.0);
        let theta0 = [0.5f32, -1.25, 3.0, 2.0];
        let theta = Tensor::<1>::from_floats(theta0, &device);
        let kept = theta.clone();
        let raw = theta
            .clone()
            .try_into_primitive::<LibTorch>()
            .expect("LibTorch");
        let alias = TchTensor::new(raw.tensor.shallow_clone());
        assert!(alias.can_mut(), "burn-tch counts the alias as unshared");
        drop(raw);
        let grad = Tensor::<1>::from_primitive::<LibTorch>(alias);
        let before = fused_steps();
        let (next, _) = optim.step(0.01, theta, grad, None);
        assert_eq!(fused_steps() - before, 1, "the fused pass took the step");
        assert_eq!(values(kept), theta0.to_vec(), "the kept θ was not written");
        for (got, x0) in values(next).iter().zip(theta0) {
            let want = reference(x0 as f64, &[x0 as f64], 0.01, 0.0);
            assert!((*got as f64 - want).abs() < 1e-6, "{got} against {want}");
        }
    }
}
