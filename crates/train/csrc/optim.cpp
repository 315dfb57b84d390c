// conelab's ATen extension: the multi-tensor optimizer operators tch 0.22 does not bind
// (its generator leaves out every `_foreach*` and `_fused_adam*` op): one fused AdamW over all
// parameters, and the global-norm clip's norm and scaling as foreach operators. Compiled by
// crates/train/build.rs under the `tch` feature. Tensors come as torch-sys's handles
// (`at::Tensor*`, what tch's C_tensor points to). Every entry point checks its inputs, catches
// what libtorch throws and reports it in `err`, never lets it cross into Rust.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "extension.h"

using conelab::guarded;

namespace {

// The `n` tensors behind `handles`, checked: defined, f32, on one device (that of the first).
std::vector<at::Tensor> tensors(at::Tensor** handles, size_t n, const char* what) {
  if (n == 0 || handles == nullptr) {
    throw std::invalid_argument(std::string(what) + ": no tensors");
  }
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (handles[i] == nullptr || !handles[i]->defined()) {
      throw std::invalid_argument(std::string(what) + ": tensor " + std::to_string(i) + " is undefined");
    }
    const at::Tensor& t = *handles[i];
    if (t.scalar_type() != at::kFloat) {
      throw std::invalid_argument(std::string(what) + ": tensor " + std::to_string(i) + " is not f32");
    }
    if (i > 0 && t.device() != out[0].device()) {
      throw std::invalid_argument(std::string(what) + ": tensors on different devices");
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace

extern "C" {

// One AdamW step (torch's decoupled form, as burn's: θ ← θ·(1 − η·λ) − η·m̂/(√v̂ + ε)) over `n`
// parameters at once, in place: params, exp_avgs and exp_avg_sqs are written, grads are only
// read. Every parameter is at step `step` (counted from 1, after the increment). One
// `aten::_fused_adamw_` (CPU and CUDA kernels in libtorch ≥ 2.4). 0, or -1 with the reason.
//
// `found_inf` (may be null): a one-element f32 tensor on the parameters' device; where it holds
// 1 the kernel writes nothing at all (parameters and moments stay as they were), decided on the
// device, so a step whose loss the host has not read yet can still be left undone.
// `grad_scale` (may be null): a one-element f32 tensor there too; the kernel reads every
// gradient divided by it (the global-norm clip, with no pass of its own over the gradients).
int conelab_fused_adamw(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs,
                        at::Tensor** exp_avg_sqs, size_t n, double lr, double beta1, double beta2,
                        double weight_decay, double eps, double step, at::Tensor* found_inf,
                        at::Tensor* grad_scale, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto p = tensors(params, n, "fused AdamW (parameters)");
    auto g = tensors(grads, n, "fused AdamW (gradients)");
    auto m = tensors(exp_avgs, n, "fused AdamW (first moments)");
    auto v = tensors(exp_avg_sqs, n, "fused AdamW (second moments)");
    for (size_t i = 0; i < n; ++i) {
      if (!(p[i].sizes() == g[i].sizes() && p[i].sizes() == m[i].sizes() && p[i].sizes() == v[i].sizes())) {
        throw std::invalid_argument("fused AdamW: parameter " + std::to_string(i) +
                                    " and its gradient or moments differ in shape");
      }
      if (g[i].device() != p[0].device() || m[i].device() != p[0].device() || v[i].device() != p[0].device()) {
        throw std::invalid_argument("fused AdamW: parameters, gradients and moments on different devices");
      }
    }
    if (!(step >= 1.0)) {
      throw std::invalid_argument("fused AdamW: the step count starts at 1");
    }
    // One step count for all (the kernel reads it, the caller counts): a single scalar tensor.
    at::Tensor steps = at::full({}, step, at::TensorOptions().dtype(at::kFloat).device(p[0].device()));
    std::vector<at::Tensor> state_steps(n, steps);
    auto scalar = [&](at::Tensor* t, const char* what) -> std::optional<at::Tensor> {
      if (t == nullptr) {
        return std::nullopt;
      }
      const at::Tensor& f = conelab::checked_f32(t, "fused AdamW", what);
      if (f.numel() != 1 || f.device() != p[0].device()) {
        throw std::invalid_argument(std::string("fused AdamW: ") + what +
                                    " is not one element on the parameters' device");
      }
      return f;
    };
    std::optional<at::Tensor> skip = scalar(found_inf, "found_inf");
    std::optional<at::Tensor> divide = scalar(grad_scale, "grad_scale");
    at::_fused_adamw_(p, g, m, v, {}, state_steps, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/divide,
                      /*found_inf=*/skip);
  });
}

// Σ over all tensors of Σ x², as a new one-element tensor (shape [1]) on their device, written
// to `*out` (the caller owns it): `_foreach_norm`, then the norms' squares summed.
int conelab_foreach_squared_norm(at::Tensor** ts, size_t n, at::Tensor** out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (out == nullptr) {
      throw std::invalid_argument("foreach norm: nowhere to put the result");
    }
    auto t = tensors(ts, n, "foreach norm");
    auto norms = at::_foreach_norm(t, 2);
    at::Tensor squared = at::stack(norms).square().sum().reshape({1});
    *out = new at::Tensor(std::move(squared));
  });
}

// dst[i] ← src[i] for every i: one `_foreach_copy_` (one multi-tensor kernel on CUDA).
int conelab_foreach_copy_(at::Tensor** dst, at::Tensor** src, size_t n, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto d = tensors(dst, n, "foreach copy (destinations)");
    auto s = tensors(src, n, "foreach copy (sources)");
    for (size_t i = 0; i < n; ++i) {
      if (d[i].sizes() != s[i].sizes() || d[i].device() != s[i].device()) {
        throw std::invalid_argument("foreach copy: tensor " + std::to_string(i) +
                                    " differs in shape or device from its source");
      }
    }
    at::_foreach_copy_(d, s);
  });
}

// Every tensor multiplied by `factor`, in place: one `_foreach_mul_`.
int conelab_foreach_mul_(at::Tensor** ts, size_t n, double factor, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto t = tensors(ts, n, "foreach scale");
    at::_foreach_mul_(t, at::Scalar(factor));
  });
}

}  // extern "C"
