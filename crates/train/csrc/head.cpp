// The MLE head's terms and their gradient G = ∂(NLL + DEV)/∂z in one call on LibTorch
// (objective/device_softmax.rs has the formulas and the composed counterpart):
//   lsm = log_softmax(z)                  one fused kernel (reads z, writes lsm)
//   NLL = −mean_p lsm[p, y_p]
//   log Z_p = z[p, y_p] − lsm[p, y_p]     (only with DEV: α·mean (log Z)²)
//   G = exp(lsm) · r_p − onehot(y)/P,     r_p = (1 + 2α·log Z_p)/P, or 1/P without DEV
// G is written into lsm's buffer in place (exp, scale, scatter-add at the targets): four passes
// over the [P, N] logits instead of the composed form's six and a copy.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "extension.h"

extern "C" {

// `*nll` ([1]), `*dev` ([1], null when α = 0) and `*g` ([P, N], f32): new tensors the caller owns.
int conelab_softmax_head(at::Tensor* logits, at::Tensor* targets, double alpha, at::Tensor** nll,
                         at::Tensor** dev, at::Tensor** g, char* err, size_t err_len) {
  return conelab::guarded(err, err_len, [&] {
    if (nll == nullptr || dev == nullptr || g == nullptr) {
      throw std::invalid_argument("softmax head: nowhere to put the results");
    }
    const at::Tensor& z_in = conelab::checked_float(logits, "softmax head", "the logits", 2);
    if (targets == nullptr || !targets->defined() || targets->dim() != 1 ||
        targets->scalar_type() != at::kLong) {
      throw std::invalid_argument("softmax head: the targets are not one row of int64");
    }
    const int64_t p = z_in.size(0);
    if (p == 0 || targets->size(0) != p || targets->device() != z_in.device()) {
      throw std::invalid_argument("softmax head: " + std::to_string(targets->size(0)) +
                                  " targets on " + targets->device().str() + " for " +
                                  std::to_string(p) + " rows of logits on " + z_in.device().str());
    }
    if (!(alpha >= 0.0)) {
      throw std::invalid_argument("softmax head: DEV's weight is negative or not a number");
    }
    // The loss and G in f32 whatever the logits' precision (bf16 runs keep the softmax in f32).
    const at::Tensor z = z_in.scalar_type() == at::kFloat ? z_in : z_in.to(at::kFloat);
    const at::Tensor y = targets->reshape({p, 1});
    at::Tensor lsm = at::_log_softmax(z, 1, /*half_to_float=*/false);
    const at::Tensor lsm_y = lsm.gather(1, y);
    *nll = new at::Tensor(lsm_y.mean().neg().reshape({1}));
    *dev = nullptr;
    const double inv_p = 1.0 / static_cast<double>(p);
    lsm.exp_();
    if (alpha > 0.0) {
      const at::Tensor log_z = z.gather(1, y) - lsm_y;
      *dev = new at::Tensor((log_z.square().mean() * alpha).reshape({1}));
      lsm.mul_(log_z * (2.0 * alpha * inv_p) + inv_p);
    } else {
      lsm.mul_(inv_p);
    }
    lsm.scatter_add_(1, y, at::full({p, 1}, -inv_p, lsm.options()));
    *g = new at::Tensor(std::move(lsm));
  });
}

}  // extern "C"
