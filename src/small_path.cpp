#include "small_path.hpp"

namespace lowtide::small {

void configure() {
  // Nothing yet: the foundation leaves mimalloc at its defaults. The
  // performance work tunes decommit delays here, measured.
}

}  // namespace lowtide::small
