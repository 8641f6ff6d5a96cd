// The process-wide state (state.hpp), apart from init.cpp so that the
// large path and its cache link into tests/unit without the constructor.
#include "state.hpp"

#include "platform.hpp"

namespace lowtide {

constinit Process g;
__thread ThreadLocal t_local __attribute__((tls_model("initial-exec")));

std::uint32_t current_tid() {
  if (t_local.tid == 0) t_local.tid = static_cast<std::uint32_t>(pal::current_tid());
  return t_local.tid;
}

}  // namespace lowtide
