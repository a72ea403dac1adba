// The `caching` policy: PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) as it
// behaves for one stream with the default settings, so that `sim` predicts what PyTorch reserves.
//
// The rules, each with the PyTorch name it implements:
// - round_size: a request is rounded up to a multiple of kMinBlockSize = 512 B, at least 512 B.
//   (roundup_power2_divisions is off by default and not modelled.)
// - get_pool: rounded sizes <= kSmallSize = 1 MiB go to the small pool, larger ones to the large.
// - get_allocation_size: a new segment for the small pool is kSmallBuffer = 2 MiB; for sizes in
//   (1 MiB, kMinLargeAlloc = 10 MiB) it is kLargeBuffer = 20 MiB; from 10 MiB up it is the size
//   rounded up to kRoundLarge = 2 MiB.
// - get_free_block: best fit in the request's pool: the smallest free block that is large enough,
//   the lowest address among equals (BlockComparatorSize orders by size, then address).
//   PyTorch also refuses to hand an "oversize" cached block (>= max_split_size) to a smaller
//   request; max_split_size is unlimited by default, so no block is ever oversize and that rule,
//   with release_available_cached_blocks which only frees oversize blocks, never applies here.
// - should_split: the block is split, the front part allocated and the rest kept free, when the
//   remainder is >= kMinBlockSize in the small pool, or > kSmallSize (1 MiB) in the large pool.
//   An unsplit block is allocated whole, remainder included.
// - free_block / try_merge_blocks: a freed block merges with free neighbours of its own segment;
//   the segment itself stays cached (reserved) until memory runs out.
// - malloc / alloc_block: when no cached block fits, a new segment is requested; if the device
//   refuses, release_cached_blocks frees every fully free segment of both pools and the segment
//   is requested once more (num_alloc_retries); if that fails too, the request is an OOM.
// - Stats follow DeviceStats: `allocated` is allocated_bytes, the sizes of live blocks (rounded,
//   and including an unsplit remainder), not the bytes the tensors asked for; `reserved` is
//   reserved_bytes, the sizes of segments held; `segment_allocs` counts segments obtained from
//   the source (the allocation count of the "segment" stat); `retries` is num_alloc_retries.
//
// One deliberate difference: PyTorch counts a retry even when the cache held nothing to release.
// Here a retry is counted, and the segment requested again, only when at least one segment was
// released: with nothing released the source's answer cannot change, and a request larger than
// the device then fails without touching any statistic.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <source_location>
#include <string_view>
#include <utility>

#include "alloc/allocator.h"
#include "core/error.h"

namespace vrambench {
namespace {

constexpr Bytes kMinBlockSize = 512;        // every size is a multiple of this
constexpr Bytes kSmallSize = 1 * MiB;       // largest "small" request
constexpr Bytes kSmallBuffer = 2 * MiB;     // segment size of the small pool
constexpr Bytes kLargeBuffer = 20 * MiB;    // segment for large requests below kMinLargeAlloc
constexpr Bytes kMinLargeAlloc = 10 * MiB;  // from here, segments are the request rounded
constexpr Bytes kRoundLarge = 2 * MiB;      // ... up to this granule
// Requests above this cannot be rounded without overflow; they are refused before any rounding
// (no source has an exabyte to give).
constexpr Bytes kLargestRequest = std::numeric_limits<Bytes>::max() / 2;

[[noreturn]] void fail(std::string_view what,
                       std::source_location where = std::source_location::current()) {
  throw InternalError(
      fmt::format("{}:{}: caching allocator: {}", where.file_name(), where.line(), what));
}

Bytes round_size(Bytes bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

bool is_small(Bytes rounded) {
  return rounded <= kSmallSize;
}

Bytes allocation_size(Bytes rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

bool should_split(bool small_pool, Bytes block_size, Bytes rounded) {
  const Bytes remaining = block_size - rounded;
  return small_pool ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(SegmentSource& source) : source_(source) {}

  ~CachingAllocator() override {
    // Segments still holding live blocks go back too: the allocator owns every segment it took.
    for (const auto& [address, segment] : segments_)
      free_segment_quietly(source_, address, segment.size);
  }

  std::optional<Block> allocate(Bytes bytes) override {
    if (bytes < 0) fail(fmt::format("negative request of {} bytes", bytes));
    // PyTorch's allocate(0) returns a null pointer without touching the pools.
    if (bytes == 0) return Block{};
    if (bytes > kLargestRequest) return std::nullopt;
    const Bytes rounded = round_size(bytes);
    const bool small = is_small(rounded);
    FreeSet& pool = small ? free_small_ : free_large_;

    auto found = pool.lower_bound({rounded, 0});
    std::uintptr_t address = 0;
    if (found != pool.end()) {
      address = found->second;
      pool.erase(found);
    } else {
      const auto segment = allocate_segment(allocation_size(rounded), small);
      if (!segment) return std::nullopt;
      address = *segment;
    }

    BlockInfo& block = blocks_.at(address);
    if (should_split(small, block.size, rounded)) {
      // The front is allocated and the rest stays free right after it (PyTorch's split).
      const std::uintptr_t rest_address = address + static_cast<std::uintptr_t>(rounded);
      const Bytes rest_size = block.size - rounded;
      block.size = rounded;
      blocks_.emplace(rest_address, BlockInfo{rest_size, block.segment, false});
      pool.insert({rest_size, rest_address});
    }
    block.allocated = true;
    stats_.allocated += block.size;
    stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
    return Block{address, block.size};
  }

  void free(const Block& block) override {
    if (block.size == 0 && block.address == 0) return;  // the empty block of a zero-byte request
    auto it = blocks_.find(block.address);
    if (it == blocks_.end() || !it->second.allocated) {
      fail(fmt::format("free of a block that is not allocated: {:#x}", block.address));
    }
    if (it->second.size != block.size) {
      fail(fmt::format("block {:#x} holds {} bytes, freed as {}", block.address, it->second.size,
                       block.size));
    }
    stats_.allocated -= it->second.size;
    it->second.allocated = false;
    FreeSet& pool = segments_.at(it->second.segment).small ? free_small_ : free_large_;

    // Merge with the next block of the same segment when it is free (try_merge_blocks).
    if (auto next = std::next(it); next != blocks_.end() &&
                                   next->second.segment == it->second.segment &&
                                   !next->second.allocated) {
      pool.erase({next->second.size, next->first});
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    // ... and with the previous one, which then absorbs this block.
    if (it != blocks_.begin()) {
      if (auto prev = std::prev(it);
          prev->second.segment == it->second.segment && !prev->second.allocated) {
        pool.erase({prev->second.size, prev->first});
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    pool.insert({it->second.size, it->first});
  }

  void release_cached() override { release_free_segments(); }

  const AllocStats& stats() const override { return stats_; }

  void reset_peaks() override {
    stats_.allocated_peak = stats_.allocated;
    stats_.reserved_peak = stats_.reserved;
  }

  Bytes free_bytes() const override { return source_.capacity() - source_.in_use(); }

 private:
  struct BlockInfo {
    Bytes size;              // bytes of the block, a multiple of kMinBlockSize
    std::uintptr_t segment;  // address of the segment it lies in
    bool allocated;
  };
  struct SegmentInfo {
    Bytes size;
    bool small;  // which pool its blocks belong to
  };
  // Free blocks of one pool ordered by (size, address): lower_bound({n, 0}) is the best fit.
  using FreeSet = std::set<std::pair<Bytes, std::uintptr_t>>;

  // A new segment holding one free block (not yet in a free set), or nullopt when the source
  // refuses even after the cache was emptied.
  std::optional<std::uintptr_t> allocate_segment(Bytes size, bool small) {
    auto address = source_.allocate_segment(size);
    if (!address && release_free_segments() > 0) {
      ++stats_.retries;
      address = source_.allocate_segment(size);
    }
    if (!address) return std::nullopt;
    segments_.emplace(*address, SegmentInfo{size, small});
    blocks_.emplace(*address, BlockInfo{size, *address, false});
    ++stats_.segment_allocs;
    stats_.reserved += size;
    stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
    return address;
  }

  // Returns every segment that is one free block to the source (release_cached_blocks); the
  // number of segments released.
  int release_free_segments() {
    int released = 0;
    for (auto it = segments_.begin(); it != segments_.end();) {
      const auto block = blocks_.find(it->first);
      if (block->second.allocated || block->second.size != it->second.size) {
        ++it;
        continue;
      }
      (it->second.small ? free_small_ : free_large_).erase({it->second.size, it->first});
      blocks_.erase(block);
      source_.free_segment(it->first, it->second.size);
      stats_.reserved -= it->second.size;
      it = segments_.erase(it);
      ++released;
    }
    return released;
  }

  SegmentSource& source_;
  AllocStats stats_;
  std::map<std::uintptr_t, SegmentInfo> segments_;  // by address
  // Every block, allocated or free, by address: a block's neighbours in its segment are its
  // neighbours in this map that carry the same segment address.
  std::map<std::uintptr_t, BlockInfo> blocks_;
  FreeSet free_small_;
  FreeSet free_large_;
};

}  // namespace

std::unique_ptr<Allocator> make_caching_allocator(SegmentSource& source) {
  return std::make_unique<CachingAllocator>(source);
}

}  // namespace vrambench
