// Chooses the allocator policy a run asks for; returns segments quietly during cleanup.
#include "alloc/allocator.h"

#include <fmt/format.h>

#include "core/error.h"

namespace vrambench {

void free_segment_quietly(SegmentSource& source, std::uintptr_t address, Bytes bytes) noexcept {
  try {
    source.free_segment(address, bytes);
  } catch (...) {  // NOLINT(bugprone-empty-catch): see the header
  }
}

std::unique_ptr<Allocator> make_allocator(AllocatorKind kind, SegmentSource& source) {
  switch (kind) {
    case AllocatorKind::direct:
      return make_direct_allocator(source);
    case AllocatorKind::caching:
      return make_caching_allocator(source);
  }
  throw InternalError(
      fmt::format("{}:{}: unknown allocator kind {}", __FILE__, __LINE__, static_cast<int>(kind)));
}

}  // namespace vrambench
