// Allocator policies over a SegmentSource. A SegmentSource hands out whole segments of device
// memory (virtual, host or cudaMalloc) up to a capacity; an Allocator serves tensor-sized requests
// from segments with a policy: `direct` (a segment per request, like raw cudaMalloc/cudaFree) or
// `caching` (PyTorch's CUDA caching allocator: rounding, pools, splitting, free-and-retry).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "config/run_config.h"
#include "core/units.h"

namespace vrambench {

// Where memory comes from. The devices implement it (src/device/): virtual addresses (sim), host
// memory (cpu), cudaMalloc (cuda).
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // A segment of exactly `bytes` (the allocator has already rounded), or nullopt when it would
  // exceed the capacity or the device refuses. The returned address is opaque to the allocator
  // except for identity; for real devices it is the device pointer.
  virtual std::optional<std::uintptr_t> allocate_segment(Bytes bytes) = 0;
  virtual void free_segment(std::uintptr_t address, Bytes bytes) = 0;
  virtual Bytes capacity() const = 0;  // what this source may hand out in total
  virtual Bytes in_use() const = 0;    // bytes of segments currently handed out
  // Memory in use on the whole device as its driver reports it (total - free), for sources over a
  // real device; nullopt elsewhere. The trial runner samples it around every op.
  virtual std::optional<Bytes> device_used() const { return std::nullopt; }
};

// free_segment for destructors and cleanup after an error: a failure is dropped, because the error
// that led here is the one to report (after a sticky CUDA error every cudaFree fails too, and the
// memory goes with the context), and a destructor must not throw.
void free_segment_quietly(SegmentSource& source, std::uintptr_t address, Bytes bytes) noexcept;

struct AllocStats {
  // Bytes of live blocks: `direct` counts the bytes requested (tensor bytes); `caching` counts
  // block sizes after rounding, as PyTorch's allocated_bytes does (see caching.cpp).
  Bytes allocated = 0;
  Bytes reserved = 0;  // bytes of segments held from the source
  Bytes allocated_peak = 0;
  Bytes reserved_peak = 0;
  std::int64_t segment_allocs = 0;  // segments requested from the source
  std::int64_t retries = 0;         // times the cache was emptied to retry an allocation

  // The peaks start again from what is held now (Allocator::reset_peaks).
  void reset_peaks() {
    allocated_peak = allocated;
    reserved_peak = reserved;
  }
};

struct Block {
  std::uintptr_t address = 0;  // start of the block (segment address + offset)
  Bytes size = 0;              // bytes reserved for it (after rounding)
  // The allocator's own index of the block, so that free() need not look the address up; a block
  // made elsewhere (-1) is looked up by its address.
  std::int32_t handle = -1;
};

// Sets `to` to `from` field by field. A block an allocator has just returned was written with
// narrower stores; a copy of the whole reads it back wider, which waits for those stores to
// retire instead of taking their values (about 3% of a sim search, where every tensor does it).
inline void assign_fields(Block& to, const Block& from) {
  to.address = from.address;
  to.size = from.size;
  to.handle = from.handle;
}

// An allocator must not outlive its source; destroying it returns every segment it holds, live
// blocks included, to the source.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // nullopt when the request cannot be served even after freeing cached segments (an OOM).
  // A zero-byte request reserves nothing and returns the empty block {0, 0}, which free() accepts.
  virtual std::optional<Block> allocate(Bytes bytes) = 0;
  virtual void free(const Block& block) = 0;
  // Returns every cached, unused segment to the source.
  virtual void release_cached() = 0;
  virtual const AllocStats& stats() const = 0;
  virtual void reset_peaks() = 0;
  // Bytes the source could still hand out (capacity - in_use): the "free" of an OOM message.
  virtual Bytes free_bytes() const = 0;
};

// Virtual addresses up to `capacity`, no memory behind them (virtual_source.cpp): the sim
// device's segments, and those of the estimate's allocator replay.
std::unique_ptr<SegmentSource> make_virtual_source(Bytes capacity);

// Raw cudaMalloc semantics: each request becomes one segment, rounded up to 2 MiB when it is
// larger than 1 MiB (the driver's large-page granularity) and to 512 bytes otherwise.
std::unique_ptr<Allocator> make_direct_allocator(SegmentSource& source);
// PyTorch-like caching allocator (see caching.cpp for the rules and where they come from).
std::unique_ptr<Allocator> make_caching_allocator(SegmentSource& source);
std::unique_ptr<Allocator> make_allocator(AllocatorKind kind, SegmentSource& source);

}  // namespace vrambench
