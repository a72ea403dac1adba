// The segment sources of the devices that need no GPU: capped host memory (cpu) here; the sim
// device's virtual addresses are alloc/allocator.h's make_virtual_source. The cuda sources are
// declared in device/cuda_device.h.
#pragma once

#include <memory>

#include "alloc/allocator.h"

namespace vrambench {

// Host segments from aligned operator new, 256-byte aligned, capped at `capacity` so that a cpu
// trial runs out of memory where a GPU of that size would. The address returned is the host
// pointer. Refuses (nullopt) when the capacity would be exceeded or the host has no memory left.
std::unique_ptr<SegmentSource> make_host_source(Bytes capacity);

}  // namespace vrambench
