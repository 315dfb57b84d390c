// What a training step needs so that the host never waits on the device within it (the
// pipelined step, engine/trainer.rs): the step's guard — is it finite, and the clip's factor —
// decided on the device, and its few values copied back to the host while the next step is
// already queued, with an event that says when they have arrived.
#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <stdexcept>
#include <string>

#include "extension.h"

namespace {

const at::Tensor& one_element(at::Tensor* t, const char* what) {
  const at::Tensor& checked = conelab::checked_f32(t, "step guard", what);
  if (checked.numel() != 1) {
    throw std::invalid_argument(std::string("step guard: ") + what + " is not one element");
  }
  return checked;
}

}  // namespace

extern "C" {

// From the step's loss, the sum of its penalties and its squared gradient norm (one-element f32
// tensors on one device), all on the device:
//   found  = max(sticky, 1 if loss or penalty is not finite else 0)   (f32, exactly 0 or 1)
//   divisor = max(1, (√sq + 1e-6) / max_norm) where max_norm > 0, else none: the gradients
//             divided by it are torch's clipped ones (AdamW divides as it reads them)
//   values = [loss, penalty, sq]                                       (f32, shape [3])
// `sticky` (may be null): the previous step's `found`, so that once a step went wrong every
// later one is left undone too until the host has read it. New tensors in `*found`, `*divisor`
// (null without a clip), `*values`; the caller owns them.
int conelab_step_guard(at::Tensor* loss, at::Tensor* penalty, at::Tensor* sq, at::Tensor* sticky,
                       double max_norm, at::Tensor** found, at::Tensor** divisor, at::Tensor** values,
                       char* err, size_t err_len) {
  return conelab::guarded(err, err_len, [&] {
    if (found == nullptr || divisor == nullptr || values == nullptr) {
      throw std::invalid_argument("step guard: nowhere to put the results");
    }
    const at::Tensor& l = one_element(loss, "the loss");
    const at::Tensor& p = one_element(penalty, "the penalty");
    const at::Tensor& s = one_element(sq, "the squared norm");
    if (p.device() != l.device() || s.device() != l.device()) {
      throw std::invalid_argument("step guard: the step's values are on different devices");
    }
    at::Tensor vals = at::cat({l.reshape({1}), p.reshape({1}), s.reshape({1})});
    at::Tensor bad = at::logical_not(at::isfinite(vals.narrow(0, 0, 2)).all()).to(at::kFloat).reshape({1});
    if (sticky != nullptr) {
      const at::Tensor& before = one_element(sticky, "the previous step's flag");
      if (before.device() != l.device()) {
        throw std::invalid_argument("step guard: the previous step's flag is on another device");
      }
      bad = at::maximum(bad, before.reshape({1}));
    }
    *found = new at::Tensor(std::move(bad));
    *values = new at::Tensor(std::move(vals));
    *divisor = nullptr;
    if (max_norm > 0.0) {
      // torch.nn.utils.clip_grad_norm_'s factor min(1, max_norm / (‖g‖ + 1e-6)), as the
      // divisor AdamW's kernel takes (`grad_scale`): max(1, (‖g‖ + 1e-6) / max_norm).
      at::Tensor scale = at::clamp_min((s.reshape({1}).sqrt() + 1e-6) / max_norm, 1.0);
      *divisor = new at::Tensor(std::move(scale));
    }
  });
}

// A copy of `t` in host memory, queued behind the work already on the device's current stream:
// on CUDA into pinned memory without waiting, with an event recorded after it (`*event`, freed by
// conelab_event_free); elsewhere a plain copy, done when this returns (`*event` null). Read the
// copy only after conelab_event_wait.
int conelab_host_copy_async(at::Tensor* t, at::Tensor** out, void** event, char* err, size_t err_len) {
  return conelab::guarded(err, err_len, [&] {
    if (t == nullptr || !t->defined() || out == nullptr || event == nullptr) {
      throw std::invalid_argument("host copy: no tensor or nowhere to put it");
    }
    *event = nullptr;
    const at::Tensor& src = *t;
    if (!src.is_cuda()) {
      *out = new at::Tensor(src.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
      return;
    }
    at::Tensor host = at::empty(src.sizes(), src.options().device(at::kCPU).pinned_memory(true));
    host.copy_(src, /*non_blocking=*/true);
    auto* ev = new c10::Event(src.device().type());
    try {
      c10::impl::VirtualGuardImpl impl(src.device().type());
      ev->record(impl.getStream(src.device()));
    } catch (...) {
      delete ev;
      throw;
    }
    *out = new at::Tensor(std::move(host));
    *event = ev;
  });
}

// Waits until the work queued before `event` (conelab_host_copy_async's) is done.
int conelab_event_wait(void* event, char* err, size_t err_len) {
  return conelab::guarded(err, err_len, [&] {
    if (event != nullptr) {
      static_cast<c10::Event*>(event)->synchronize();
    }
  });
}

void conelab_event_free(void* event) {
  delete static_cast<c10::Event*>(event);
}

}  // extern "C"
