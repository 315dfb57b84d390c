// conelab's ATen extension: computations run under torch's own autograd for a node of burn's
// graph ("islands"): one LSTM layer as `aten::lstm` (cuDNN on CUDA), and causal attention as
// `aten::scaled_dot_product_attention` (flash or memory-efficient kernels on CUDA, dropout
// inside). The forward detaches its inputs into leaves that require gradients, runs with grad
// mode on and keeps the leaves and the output in an island (an opaque handle burn's node
// holds); the node's backward hands the output's gradient to `torch::autograd::grad` over the
// leaves it wants, once. Compiled by crates/train/build.rs; every entry point reports what
// libtorch throws in `err`.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "extension.h"

using conelab::checked_f32;
using conelab::checked_float;
using conelab::guarded;

namespace {

struct Island {
  std::vector<at::Tensor> leaves;  // the inputs, in the order of the function that made it
  at::Tensor out;                  // the output, with its graph back to the leaves
};

// cuDNN wants a layer's weights in one flat buffer; burn keeps them apart, so cuDNN compacts
// them at every call (a copy of the layer's weights, microseconds on a GPU) and libtorch warns
// of it every time. That one warning is dropped here; any other goes to the handler in force.
class CompactionWarningFilter : public c10::WarningHandler {
 public:
  explicit CompactionWarningFilter(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("single contiguous chunk of memory") != std::string::npos) {
      return;
    }
    if (next_ != nullptr) {
      next_->process(warning);
    }
  }

 private:
  c10::WarningHandler* next_;
};

}  // namespace

extern "C" {

// One batch-first LSTM layer over x [B, T, D] from state (h0, c0) [B, H] with torch's weights
// w_ih [4H, D], w_hh [4H, H], b_ih, b_hh [4H] (gates in torch's order: input, forget, cell,
// output). New tensors in *out [B, T, H], *h_n, *c_n [B, H] (no graph, fp32). With `track`,
// *island receives the handle the backward needs (free it with conelab_island_free); else null.
// With `lower`, the layer runs in bfloat16 (inputs cast inside the graph, results cast back to
// fp32, so the leaves' gradients are fp32).
int conelab_lstm_layer(at::Tensor* x, at::Tensor* h0, at::Tensor* c0, at::Tensor* w_ih,
                       at::Tensor* w_hh, at::Tensor* b_ih, at::Tensor* b_hh, int track,
                       int lower, at::Tensor** out, at::Tensor** h_n, at::Tensor** c_n, void** island,
                       char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const at::Tensor& xt = checked_f32(x, "LSTM layer", "input", 3);
    const at::Tensor& h = checked_f32(h0, "LSTM layer", "hidden state", 2);
    const at::Tensor& c = checked_f32(c0, "LSTM layer", "cell state", 2);
    const at::Tensor& wi = checked_f32(w_ih, "LSTM layer", "input weights", 2);
    const at::Tensor& wh = checked_f32(w_hh, "LSTM layer", "hidden weights", 2);
    const at::Tensor& bi = checked_f32(b_ih, "LSTM layer", "input bias", 1);
    const at::Tensor& bh = checked_f32(b_hh, "LSTM layer", "hidden bias", 1);
    int64_t b = xt.size(0), d = xt.size(2), hid = h.size(1);
    bool shapes = h.size(0) == b && c.sizes() == h.sizes() && wi.size(0) == 4 * hid &&
                  wi.size(1) == d && wh.size(0) == 4 * hid && wh.size(1) == hid &&
                  bi.size(0) == 4 * hid && bh.size(0) == 4 * hid;
    if (!shapes) {
      throw std::invalid_argument("LSTM layer: the weights, biases and states do not fit the input");
    }
    for (const at::Tensor* t : {&h, &c, &wi, &wh, &bi, &bh}) {
      if (t->device() != xt.device()) {
        throw std::invalid_argument("LSTM layer: tensors on different devices");
      }
    }
    if (out == nullptr || h_n == nullptr || c_n == nullptr || island == nullptr) {
      throw std::invalid_argument("LSTM layer: nowhere to put the results");
    }
    at::AutoGradMode grad_mode(track != 0);
    CompactionWarningFilter filter(c10::WarningUtils::get_warning_handler());
    c10::WarningUtils::WarningHandlerGuard quiet(&filter);
    // Contiguous leaves: cuDNN copies each weight into its flat buffer through `view_as`, which a
    // transposed weight (burn's [D, 4H] seen as [4H, D]) cannot give, and it refuses a strided
    // hidden state; the CPU kernel takes either. One copy of each weight, as cuDNN makes anyway.
    std::vector<at::Tensor> leaves;
    for (const at::Tensor* t : {&xt, &wi, &wh, &bi, &bh, &h, &c}) {
      at::Tensor leaf = t->detach().contiguous();
      if (track != 0) {
        leaf.requires_grad_(true);
      }
      leaves.push_back(leaf);
    }
    std::vector<at::Tensor> in;
    for (const at::Tensor& leaf : leaves) {
      in.push_back(lower != 0 ? leaf.to(at::kBFloat16) : leaf);
    }
    auto r = at::lstm(in[0], {in[5].unsqueeze(0), in[6].unsqueeze(0)},
                      {in[1], in[2], in[3], in[4]}, /*has_biases=*/true,
                      /*num_layers=*/1, /*dropout=*/0.0, /*train=*/track != 0,
                      /*bidirectional=*/false, /*batch_first=*/true);
    // Back to f32 where the layer ran in bf16; in f32 no `to` is dispatched at all (a no-op
    // `to` launches nothing but costs a dispatch, three a layer and step).
    auto f32 = [](const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); };
    at::Tensor o = f32(std::get<0>(r));
    *out = new at::Tensor(o.detach());
    *h_n = new at::Tensor(f32(std::get<1>(r).squeeze(0)).detach());
    *c_n = new at::Tensor(f32(std::get<2>(r).squeeze(0)).detach());
    *island = track != 0 ? new Island{std::move(leaves), o} : nullptr;
  });
}

// Causal attention softmax(q·kᵀ/√d + causal mask)·v with dropout `dropout_p` on the attention
// weights (drawn from libtorch's generator), q, k, v [B, heads, T, d] (fp32 or bf16, all one
// type): the output [B, heads, T, d] in *out, in their type, and with `track` the island in
// *island. With `lower`, in bfloat16 (fp32 inputs cast inside the graph; a bf16 output).
int conelab_causal_attention(at::Tensor* q, at::Tensor* k, at::Tensor* v, double dropout_p,
                             int track, int lower, at::Tensor** out, void** island, char* err,
                             size_t err_len) {
  return guarded(err, err_len, [&] {
    const at::Tensor& qt = checked_float(q, "attention", "query", 4);
    const at::Tensor& kt = checked_float(k, "attention", "key", 4);
    const at::Tensor& vt = checked_float(v, "attention", "value", 4);
    if (qt.sizes() != kt.sizes() || qt.sizes() != vt.sizes()) {
      throw std::invalid_argument("attention: query, key and value differ in shape");
    }
    if (kt.scalar_type() != qt.scalar_type() || vt.scalar_type() != qt.scalar_type()) {
      throw std::invalid_argument("attention: query, key and value differ in type");
    }
    if (kt.device() != qt.device() || vt.device() != qt.device()) {
      throw std::invalid_argument("attention: tensors on different devices");
    }
    if (!(dropout_p >= 0.0 && dropout_p < 1.0)) {
      throw std::invalid_argument("attention: the dropout probability must be in [0, 1)");
    }
    if (out == nullptr || island == nullptr) {
      throw std::invalid_argument("attention: nowhere to put the results");
    }
    at::AutoGradMode grad_mode(track != 0);
    std::vector<at::Tensor> leaves;
    for (const at::Tensor* t : {&qt, &kt, &vt}) {
      at::Tensor leaf = t->detach();
      if (track != 0) {
        leaf.requires_grad_(true);
      }
      leaves.push_back(leaf);
    }
    // The output stays in the computation's type: bf16 feeds the projection, a product too.
    auto in = [&](const at::Tensor& t) { return lower != 0 ? t.to(at::kBFloat16) : t; };
    at::Tensor o = at::scaled_dot_product_attention(in(leaves[0]), in(leaves[1]), in(leaves[2]),
                                                    {}, dropout_p, /*is_causal=*/true);
    *out = new at::Tensor(o.detach());
    *island = track != 0 ? new Island{std::move(leaves), o} : nullptr;
  });
}

// The gradients of the island's `n` leaves (in the order of the function that made it) from
// its output's, each only where want[i] is nonzero (else grads[i] is null). The island's graph
// is freed.
int conelab_island_backward(void* island, at::Tensor* grad_out, size_t n, const int* want,
                            at::Tensor** grads, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto* is = static_cast<Island*>(island);
    if (is == nullptr || !is->out.defined()) {
      throw std::invalid_argument("backward: no island (already taken?)");
    }
    if (grad_out == nullptr || !grad_out->defined() || grad_out->sizes() != is->out.sizes()) {
      throw std::invalid_argument("backward: the output gradient's shape is not the output's");
    }
    if (want == nullptr || grads == nullptr || n != is->leaves.size()) {
      throw std::invalid_argument("backward: not one slot per input of the island");
    }
    std::vector<at::Tensor> inputs;
    std::vector<size_t> at_index;
    for (size_t i = 0; i < is->leaves.size(); ++i) {
      grads[i] = nullptr;
      if (want[i] != 0) {
        inputs.push_back(is->leaves[i]);
        at_index.push_back(i);
      }
    }
    if (!inputs.empty()) {
      CompactionWarningFilter filter(c10::WarningUtils::get_warning_handler());
      c10::WarningUtils::WarningHandlerGuard quiet(&filter);
      auto g = torch::autograd::grad({is->out}, inputs, {*grad_out}, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t k = 0; k < g.size(); ++k) {
        grads[at_index[k]] = g[k].defined() ? new at::Tensor(g[k]) : nullptr;
      }
    }
    is->out = at::Tensor();
    is->leaves.clear();
  });
}

void conelab_island_free(void* island) { delete static_cast<Island*>(island); }

}  // extern "C"
