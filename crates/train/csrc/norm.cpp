// conelab's ATen extension: layer normalisation over the last dimension as torch's fused
// kernels, forward and backward (tch 0.22 binds neither `native_layer_norm_backward` nor the
// forward's statistics in a form burn's graph can keep). Compiled by crates/train/build.rs.
// Every entry point checks its inputs and reports what libtorch throws in `err`.
#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

#include "extension.h"

using conelab::checked_f32;
using conelab::guarded;

namespace {

const at::Tensor& checked(at::Tensor* t, const char* what) {
  return checked_f32(t, "layer norm", what);
}

// γ and β are vectors of x's last dimension, on x's device.
void check_affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (x.dim() < 1) {
    throw std::invalid_argument("layer norm: x has no dimension to normalise");
  }
  int64_t d = x.size(-1);
  if (w.dim() != 1 || w.size(0) != d || b.dim() != 1 || b.size(0) != d) {
    throw std::invalid_argument("layer norm: gamma and beta must be vectors of x's last dimension");
  }
  if (w.device() != x.device() || b.device() != x.device()) {
    throw std::invalid_argument("layer norm: x, gamma and beta on different devices");
  }
}

}  // namespace

extern "C" {

// y = (x − μ)·r·γ + β over x's last dimension (μ its mean, r = 1/√(biased variance + eps)):
// `aten::native_layer_norm`. New tensors in *out, *mean and *rstd (the caller owns them; mean
// and rstd have x's shape with a last dimension of 1, as the backward wants them).
int conelab_layer_norm(at::Tensor* x, at::Tensor* w, at::Tensor* b, double eps, at::Tensor** out,
                       at::Tensor** mean, at::Tensor** rstd, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const at::Tensor& xt = checked(x, "x");
    const at::Tensor& wt = checked(w, "gamma");
    const at::Tensor& bt = checked(b, "beta");
    check_affine(xt, wt, bt);
    if (out == nullptr || mean == nullptr || rstd == nullptr) {
      throw std::invalid_argument("layer norm: nowhere to put the results");
    }
    auto r = at::native_layer_norm(xt, {xt.size(-1)}, wt, bt, eps);
    *out = new at::Tensor(std::get<0>(r));
    *mean = new at::Tensor(std::get<1>(r));
    *rstd = new at::Tensor(std::get<2>(r));
  });
}

// The gradients of x, γ and β from the output's (`aten::native_layer_norm_backward`), each
// only where `want_*` is nonzero (else *g_* is left null).
int conelab_layer_norm_backward(at::Tensor* grad_out, at::Tensor* x, at::Tensor* mean,
                                at::Tensor* rstd, at::Tensor* w, at::Tensor* b, int want_x,
                                int want_w, int want_b, at::Tensor** g_x, at::Tensor** g_w,
                                at::Tensor** g_b, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const at::Tensor& go = checked(grad_out, "output gradient");
    const at::Tensor& xt = checked(x, "x");
    const at::Tensor& wt = checked(w, "gamma");
    const at::Tensor& bt = checked(b, "beta");
    check_affine(xt, wt, bt);
    if (go.sizes() != xt.sizes()) {
      throw std::invalid_argument("layer norm backward: the output gradient's shape is not x's");
    }
    const at::Tensor& m = checked(mean, "mean");
    const at::Tensor& r = checked(rstd, "rstd");
    if (g_x == nullptr || g_w == nullptr || g_b == nullptr) {
      throw std::invalid_argument("layer norm backward: nowhere to put the results");
    }
    auto g = at::native_layer_norm_backward(go, xt, {xt.size(-1)}, m, r, wt, bt,
                                            {want_x != 0, want_w != 0, want_b != 0});
    *g_x = std::get<0>(g).defined() ? new at::Tensor(std::get<0>(g)) : nullptr;
    *g_w = std::get<1>(g).defined() ? new at::Tensor(std::get<1>(g)) : nullptr;
    *g_b = std::get<2>(g).defined() ? new at::Tensor(std::get<2>(g)) : nullptr;
  });
}

}  // extern "C"
