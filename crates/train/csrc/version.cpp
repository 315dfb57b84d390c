// conelab's ATen extension: which libtorch the binary was compiled against (the headers'
// TORCH_VERSION) and what the libtorch loaded at run time says of itself (at::show_config(),
// whose build settings name its TORCH_VERSION), so that a binary run against another libtorch
// than its own is told apart before it computes anything. Compiled by crates/train/build.rs.
#include <ATen/Version.h>
#include <torch/version.h>

#include <cstring>
#include <string>

extern "C" {

// The libtorch version of the headers this extension was compiled with, e.g. "2.11.0".
const char* conelab_libtorch_built() { return TORCH_VERSION; }

// The loaded libtorch's configuration text (at::show_config()), copied into `buf` (at most
// `len` bytes with its NUL); the text's full length, or 0 when libtorch threw.
size_t conelab_libtorch_config(char* buf, size_t len) {
  try {
    std::string config = at::show_config();
    if (buf != nullptr && len > 0) {
      size_t n = config.size() < len - 1 ? config.size() : len - 1;
      std::memcpy(buf, config.data(), n);
      buf[n] = '\0';
    }
    return config.size();
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
