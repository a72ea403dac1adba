// The `caching` policy as a class (caching.cpp has its rules and where they come from), for code
// that replays many steps through it: the estimate's replay calls it directly, and copies it at the
// point where a replay at the device's capacity and one without a limit part ways.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "alloc/allocator.h"

namespace vrambench {

// The blocks are PyTorch's: each knows its neighbours in its segment (prev, next), so a free
// merges without a search. They live in a pool of nodes reused after a merge. The free blocks of
// each pool are indexed by size class (FreeIndex below): a request looks in its own class, then
// takes the smallest block of the next class that holds any. This is PyTorch's best fit exactly,
// with no node allocation per request and no shifting of a sorted array on every free.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(SegmentSource& source) : source_(source) {}
  // A copy of `other`'s blocks and segments over `source`, which must hold the same segments
  // (a copy of other's source): both go on from the same state.
  CachingAllocator(const CachingAllocator& other, SegmentSource& source);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator() override;

  std::optional<Block> allocate(Bytes bytes) override;
  // As allocate(), except where the source refuses a new segment: then it returns nullopt with
  // nothing changed, the cache kept, where allocate() would free the cache and retry.
  std::optional<Block> allocate_without_retry(Bytes bytes);
  void free(const Block& block) override;
  // A segment of `size` bytes from the source in a state recorded elsewhere (a PyTorch snapshot
  // replayed, tests/test_allocator_traces.cpp): `allocated` lists its live blocks as (offset,
  // bytes), by offset, each a multiple of 512 B; the space between them is free, as the
  // allocator's merged free blocks would be. Returns the live blocks in that order, to free later,
  // or nullopt when the source refuses the segment. The pool is the one whose segments have the
  // size (2 MiB: small). Throws InternalError for blocks that overlap or pass the segment's end.
  std::optional<std::vector<Block>> restore_segment(
      Bytes size, const std::vector<std::pair<Bytes, Bytes>>& allocated);
  void release_cached() override { release_free_segments(); }
  const AllocStats& stats() const override { return stats_; }
  void reset_peaks() override { stats_.reset_peaks(); }
  Bytes free_bytes() const override { return source_.capacity() - source_.in_use(); }

 private:
  struct Node {
    std::uintptr_t address;
    Bytes size;               // bytes of the block, a multiple of kMinBlockSize
    std::int32_t segment;     // index in segments_
    std::int32_t prev, next;  // neighbours in the segment, -1 at its ends
    bool allocated;
    bool spare = false;  // merged away or released: no block, waiting for reuse
    bool small = false;  // its segment's pool, kept here so that a free reads no segment
    // A free block's neighbours in its size class's list (FreeIndex), -1 at its ends.
    std::int32_t free_prev = -1, free_next = -1;
  };
  struct SegmentInfo {
    std::uintptr_t address;
    Bytes size;
    bool small;         // which pool its blocks belong to
    std::int32_t head;  // its first block; -1 once the segment went back to the source
  };
  // The free blocks of one pool: a list per size class, each ordered by (size, address) and
  // known at both ends, and a bitmap of the classes that hold any. A class spans an eighth of a
  // power of two (sizes below 4 KiB have a class each), so a list holds few blocks and the classes
  // above a request's are all larger: best fit is the first large enough block of its class, else
  // the first block of the next class with any. A freed block is placed by walking from both ends
  // at once: most land at or next to one of them, while a walk from the front alone crosses long
  // runs of equal sizes.
  struct FreeIndex {
    static constexpr int kClasses = 512;  // enough for every 64-bit size
    std::int32_t head[kClasses];
    std::int32_t tail[kClasses];
    std::uint64_t held[kClasses / 64] = {};
    FreeIndex();
  };

  std::optional<Block> allocate(Bytes bytes, bool retry);
  std::int32_t new_node(const Node& node);
  void absorb(std::int32_t into, std::int32_t gone);
  // The best fit for `rounded` bytes in `pool`, or -1.
  std::int32_t best_fit(const FreeIndex& pool, Bytes rounded) const;
  void insert_free(FreeIndex& pool, std::int32_t index);
  void erase_free(FreeIndex& pool, std::int32_t index);
  std::int32_t find(const Block& block) const;
  void retire(std::int32_t index);
  std::optional<std::int32_t> allocate_segment(Bytes size, bool small, bool retry);
  int release_free_segments();

  SegmentSource& source_;
  AllocStats stats_;
  std::vector<SegmentInfo> segments_;
  std::vector<std::int32_t> spare_segments_;
  std::vector<Node> nodes_;  // every block, allocated or free, and spare nodes
  std::vector<std::int32_t> spare_nodes_;
  FreeIndex free_small_;
  FreeIndex free_large_;
};

}  // namespace vrambench
