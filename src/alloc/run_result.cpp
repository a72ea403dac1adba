// The OOM report's text.
#include "alloc/run_result.h"

#include <fmt/format.h>

namespace vrambench {

std::string to_string(const OomInfo& oom) {
  const std::string where =
      oom.op.empty() ? "before the first op" : fmt::format("in op '{}'", oom.op);
  return fmt::format("OOM {} allocating '{}': {} requested, {} free", where, oom.tensor,
                     format_bytes(oom.requested), format_bytes(oom.free));
}

}  // namespace vrambench
