// What every entry point of conelab's ATen extension shares: reporting an error into the
// caller's buffer, running a body so that nothing libtorch throws crosses into Rust, and
// checking a tensor handle before use.
#pragma once

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace conelab {

// `what` into `err` (at most `len` bytes, NUL-terminated).
inline void say(char* err, size_t len, const char* what) {
  if (err != nullptr && len > 0) {
    std::strncpy(err, what, len - 1);
    err[len - 1] = '\0';
  }
}

// Runs `f`: 0, or -1 with what it threw in `err`.
template <typename F>
int guarded(char* err, size_t err_len, F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    say(err, err_len, e.what());
    return -1;
  } catch (...) {
    say(err, err_len, "libtorch threw an unknown exception");
    return -1;
  }
}

// The tensor behind `t`, checked: defined, f32 or bf16, and with `dims` dimensions where
// dims ≥ 0.
inline const at::Tensor& checked_float(at::Tensor* t, const std::string& op, const char* what,
                                       int64_t dims = -1) {
  if (t == nullptr || !t->defined()) {
    throw std::invalid_argument(op + ": no " + what);
  }
  if (t->scalar_type() != at::kFloat && t->scalar_type() != at::kBFloat16) {
    throw std::invalid_argument(op + ": " + what + " is neither f32 nor bf16");
  }
  if (dims >= 0 && t->dim() != dims) {
    throw std::invalid_argument(op + ": " + what + " has " + std::to_string(t->dim()) +
                                " dimensions, not " + std::to_string(dims));
  }
  return *t;
}

// The tensor behind `t`, checked: defined, f32, and with `dims` dimensions where dims ≥ 0.
// The error names the operation (`op`) and the argument (`what`).
inline const at::Tensor& checked_f32(at::Tensor* t, const std::string& op, const char* what,
                                     int64_t dims = -1) {
  const at::Tensor& checked = checked_float(t, op, what, dims);
  if (checked.scalar_type() != at::kFloat) {
    throw std::invalid_argument(op + ": " + what + " is not f32");
  }
  return checked;
}

}  // namespace conelab
