// The cpu device's SegmentSource: real host memory, 256-byte aligned, capped at a capacity so that
// a CPU trial runs out of memory where a GPU of that size would.
#pragma once

#include <memory>

#include "alloc/allocator.h"

namespace vrambench {

// Segments come from aligned operator new; the address returned is the host pointer. Refuses
// (nullopt) when the capacity would be exceeded or the host has no memory left.
std::unique_ptr<SegmentSource> make_host_source(Bytes capacity);

}  // namespace vrambench
