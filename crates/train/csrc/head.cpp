// The full-softmax head's terms and their gradient G = ∂(NLL + DEV + UL)/∂z in one call on
// LibTorch (objective/device_softmax.rs and objective/host_softmax.rs have the formulas; head.rs
// the composed counterpart):
//   lsm = log_softmax(z)                  one fused kernel (reads z, writes lsm)
//   NLL = −mean_p lsm[p, y_p]
//   log Z_p = z[p, y_p] − lsm[p, y_p]     (only with DEV: α·mean (log Z)²)
//   A_p = 1 + 2α·log Z_p, or 1 without DEV
// Without unlikelihood:
//   G = exp(lsm) · A_p/P − onehot(y)/P
// With unlikelihood (weight β, candidates C_p given as columns idx [P, T] with mask m [P, T],
// padded with m = 0; distinct within a row and never the target, as unlikelihood.rs builds them):
//   UL  = β/P Σ_p Σ_c m_pc·(−ln max(1 − p_pc, 1e-12))
//   w_pc = m_pc·p_pc/(1 − p_pc) where 1 − p_pc > 1e-12, else 0 (the clamp's gradient);  S_p = Σ_c w_pc
//   G_p = [p_p·(A_p − β·S_p) + β·Σ_c w_pc·onehot(c) − onehot(y_p)]/P
// A candidate's own column is written as [p_c·(A − β(S − w_c)) + β·m·p_c]/P (w_c·(1 − p_c) =
// m·p_c), as host_softmax writes it, not as the sum of its two large terms (each ~β/(1 − p_c)
// near p_c = 1); the [P, T] arithmetic is f64, as host_softmax's per-row sums are.
// G is written into lsm's buffer in place (exp, row scale, the candidates' columns, scatter-add at
// the targets): four passes over the [P, N] logits instead of the composed form's six and a copy,
// and with unlikelihood no autodiff graph over the logits at all.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "extension.h"

namespace {

// The candidates [P, T] (int64 columns, f32 or bf16 mask of the same shape) on `z`'s device.
void check_candidates(const at::Tensor* idx, const at::Tensor* mask, const at::Tensor& z) {
  if (idx == nullptr || !idx->defined() || idx->dim() != 2 || idx->scalar_type() != at::kLong) {
    throw std::invalid_argument("softmax head: unlikelihood's candidates are not int64 [P, T]");
  }
  if (mask == nullptr || !mask->defined() || mask->sizes() != idx->sizes() ||
      !at::isFloatingType(mask->scalar_type())) {
    throw std::invalid_argument("softmax head: unlikelihood's mask is not a float [P, T] like "
                                "its candidates");
  }
  if (idx->size(0) != z.size(0) || idx->device() != z.device() || mask->device() != z.device()) {
    throw std::invalid_argument("softmax head: " + std::to_string(idx->size(0)) +
                                " rows of unlikelihood candidates on " + idx->device().str() +
                                " for " + std::to_string(z.size(0)) + " rows of logits on " +
                                z.device().str());
  }
}

}  // namespace

extern "C" {

// `*nll` ([1]), `*dev` ([1], null when α = 0), `*ul` ([1], null when β = 0) and `*g` ([P, N],
// f32): new tensors the caller owns. `ul_idx` and `ul_mask` are read only when β > 0.
int conelab_softmax_head(at::Tensor* logits, at::Tensor* targets, double alpha,
                         at::Tensor* ul_idx, at::Tensor* ul_mask, double beta, at::Tensor** nll,
                         at::Tensor** dev, at::Tensor** ul, at::Tensor** g, char* err,
                         size_t err_len) {
  return conelab::guarded(err, err_len, [&] {
    if (nll == nullptr || dev == nullptr || ul == nullptr || g == nullptr) {
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
    if (!(beta >= 0.0)) {
      throw std::invalid_argument("softmax head: unlikelihood's weight is negative or not a "
                                  "number");
    }
    if (beta > 0.0) {
      check_candidates(ul_idx, ul_mask, z_in);
    }
    // The loss and G in f32 whatever the logits' precision (bf16 runs keep the softmax in f32).
    const at::Tensor z = z_in.scalar_type() == at::kFloat ? z_in : z_in.to(at::kFloat);
    const at::Tensor y = targets->reshape({p, 1});
    at::Tensor lsm = at::_log_softmax(z, 1, /*half_to_float=*/false);
    const at::Tensor lsm_y = lsm.gather(1, y);
    *nll = new at::Tensor(lsm_y.mean().neg().reshape({1}));
    *dev = nullptr;
    *ul = nullptr;
    const double inv_p = 1.0 / static_cast<double>(p);
    lsm.exp_();
    at::Tensor log_z;
    if (alpha > 0.0) {
      log_z = z.gather(1, y) - lsm_y;
      *dev = new at::Tensor((log_z.square().mean() * alpha).reshape({1}));
    }
    if (beta == 0.0) {
      if (alpha > 0.0) {
        lsm.mul_(log_z * (2.0 * alpha * inv_p) + inv_p);
      } else {
        lsm.mul_(inv_p);
      }
    } else {
      const at::Tensor& idx = *ul_idx;
      const at::Tensor m = ul_mask->to(at::kDouble);
      const at::Tensor pc = lsm.gather(1, idx).to(at::kDouble);
      const at::Tensor rest = 1.0 - pc;
      *ul = new at::Tensor(
          ((m * rest.clamp_min(1e-12).log()).sum() * (-beta * inv_p)).to(at::kFloat).reshape({1}));
      const at::Tensor w = at::where(rest > 1e-12, m * pc / rest, at::zeros_like(pc));
      const at::Tensor s = w.sum(1, /*keepdim=*/true);
      const at::Tensor a = alpha > 0.0 ? log_z.to(at::kDouble) * (2.0 * alpha) + 1.0
                                       : at::ones_like(s);
      lsm.mul_(((a - beta * s) * inv_p).to(at::kFloat));
      // m·p_c where w_c is on, 0 where the clamp took it: w_c·(1 − p_c).
      const at::Tensor own = w * rest;
      const at::Tensor want = ((pc * (a - beta * (s - w)) + beta * own) * inv_p).to(at::kFloat);
      // Padding writes the target's column with the value it already holds (the target is never
      // a candidate), so one scatter covers every row whatever its number of candidates.
      const at::Tensor on = m != 0.0;
      const at::Tensor cols = at::where(on, idx, y.expand_as(idx));
      lsm.scatter_(1, cols, at::where(on, want, lsm.gather(1, y).expand_as(want)));
    }
    lsm.scatter_add_(1, y, at::full({p, 1}, -inv_p, lsm.options()));
    *g = new at::Tensor(std::move(lsm));
  });
}

}  // extern "C"
