// conelab's ATen extension: an operator counter (an at::RecordFunction callback) for
// `conelab bench ops`. Compiled by crates/train/build.rs under the `tch` feature against the
// libtorch torch-sys links; every entry point catches what libtorch throws and reports it,
// never lets it cross into Rust.
#include <ATen/record_function.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "extension.h"

namespace {

struct Counter {
  std::mutex lock;
  bool active = false;
  std::thread::id owner;
  at::CallbackHandle handle = 0;
  std::map<std::string, uint64_t> counts;
  // The last stop's counts, in name order, for conelab_opcount_get.
  std::vector<std::pair<std::string, uint64_t>> taken;
};

Counter& counter() {
  static Counter c;
  return c;
}

// How deep in ATen operators this thread is: an operator is top-level at depth 0, that is,
// no other ATen operator (a composite's implementation) dispatched it.
thread_local int depth = 0;

// Only ATen operators count and nest; other records (torch's autograd engine evaluating a
// backward node, user scopes) are transparent, as in bench/reference_torch.py's count: the
// operators a backward node runs are top-level.
bool is_aten(const at::RecordFunction& fn) {
  const char* name = fn.name();
  return name != nullptr && std::strncmp(name, "aten::", 6) == 0;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Counter& c = counter();
  if (std::this_thread::get_id() != c.owner || !is_aten(fn)) {
    return nullptr;
  }
  if (depth == 0) {
    std::lock_guard<std::mutex> g(c.lock);
    if (c.active) {
      c.counts[fn.name()] += 1;
    }
  }
  depth += 1;
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (std::this_thread::get_id() == counter().owner && is_aten(fn) && depth > 0) {
    depth -= 1;
  }
}

}  // namespace

extern "C" {

// Starts counting the top-level ATen operators this thread dispatches from now on (operator
// scope only: autograd's nodes and user scopes are not operators). 0 on success; -1 with the
// reason in `err` (NUL-terminated, at most `err_len` bytes) when counting is already on or
// libtorch refused the callback.
int conelab_opcount_start(char* err, size_t err_len) {
  return conelab::guarded(err, err_len, [&] {
    Counter& c = counter();
    std::lock_guard<std::mutex> g(c.lock);
    if (c.active) {
      throw std::runtime_error("operators are already being counted");
    }
    c.counts.clear();
    c.owner = std::this_thread::get_id();
    depth = 0;
    c.handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                         .needsInputs(false)
                                         .needsOutputs(false)
                                         .scopes({at::RecordScope::FUNCTION}));
    c.active = true;
  });
}

// Stops counting (removing the callback, so uncounted operators pay nothing for it); the
// number of distinct operators counted, or -1 when counting was not on.
int64_t conelab_opcount_stop() {
  try {
    Counter& c = counter();
    std::lock_guard<std::mutex> g(c.lock);
    if (!c.active) {
      return -1;
    }
    at::removeCallback(c.handle);
    c.active = false;
    c.owner = std::thread::id();
    c.taken.assign(c.counts.begin(), c.counts.end());
    c.counts.clear();
    return static_cast<int64_t>(c.taken.size());
  } catch (...) {
    return -1;
  }
}

// The `i`-th operator of the last stop, by name: its name (NUL-terminated, valid until the next
// stop) and count. 0, or -1 when `i` is out of range.
int conelab_opcount_get(size_t i, const char** name, uint64_t* count) {
  Counter& c = counter();
  std::lock_guard<std::mutex> g(c.lock);
  if (i >= c.taken.size() || name == nullptr || count == nullptr) {
    return -1;
  }
  *name = c.taken[i].first.c_str();
  *count = c.taken[i].second;
  return 0;
}

}  // extern "C"
