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
#include "alloc/caching.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <iterator>
#include <limits>
#include <source_location>
#include <string_view>
#include <utility>
#include <vector>

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

// The size class of a block of `size` bytes, a positive multiple of kMinBlockSize: sizes of fewer
// than 8 units of 512 B have a class each; above that each power of two is cut into eight classes
// of equal width. Classes increase with the size, so a larger class holds only larger blocks.
int size_class(Bytes size) {
  const auto units = static_cast<std::uint64_t>(size / kMinBlockSize);
  if (units < 8) return static_cast<int>(units);
  const int log = static_cast<int>(std::bit_width(units)) - 1;  // >= 3
  return (log - 2) * 8 + static_cast<int>((units >> (log - 3)) & 7);
}

bool should_split(bool small_pool, Bytes block_size, Bytes rounded) {
  const Bytes remaining = block_size - rounded;
  return small_pool ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

}  // namespace

CachingAllocator::FreeIndex::FreeIndex() {
  std::fill(std::begin(head), std::end(head), -1);
  std::fill(std::begin(tail), std::end(tail), -1);
}

CachingAllocator::CachingAllocator(const CachingAllocator& other, SegmentSource& source)
    : source_(source),
      stats_(other.stats_),
      segments_(other.segments_),
      spare_segments_(other.spare_segments_),
      nodes_(other.nodes_),
      spare_nodes_(other.spare_nodes_),
      free_small_(other.free_small_),
      free_large_(other.free_large_) {}

CachingAllocator::~CachingAllocator() {
  // Segments still holding live blocks go back too: the allocator owns every segment it took.
  for (const SegmentInfo& segment : segments_)
    if (segment.head >= 0) free_segment_quietly(source_, segment.address, segment.size);
}

std::optional<Block> CachingAllocator::allocate(Bytes bytes) {
  return allocate(bytes, true);
}

std::optional<Block> CachingAllocator::allocate_without_retry(Bytes bytes) {
  return allocate(bytes, false);
}

std::optional<Block> CachingAllocator::allocate(Bytes bytes, bool retry) {
  if (bytes < 0) fail(fmt::format("negative request of {} bytes", bytes));
  // PyTorch's allocate(0) returns a null pointer without touching the pools.
  if (bytes == 0) return Block{};
  if (bytes > kLargestRequest) return std::nullopt;
  const Bytes rounded = round_size(bytes);
  const bool small = is_small(rounded);
  FreeIndex& pool = small ? free_small_ : free_large_;

  std::int32_t index = best_fit(pool, rounded);
  if (index >= 0) {
    erase_free(pool, index);
  } else {
    const std::optional<std::int32_t> segment =
        allocate_segment(allocation_size(rounded), small, retry);
    if (!segment) return std::nullopt;
    index = *segment;
  }

  if (should_split(small, nodes_[index].size, rounded)) {
    // The front is allocated and the rest stays free right after it (PyTorch's split).
    const Node& block = nodes_[index];
    const std::int32_t rest =
        new_node(Node{block.address + static_cast<std::uintptr_t>(rounded), block.size - rounded,
                      block.segment, index, block.next, false, false, small});
    Node& front = nodes_[index];
    if (front.next >= 0) nodes_[front.next].prev = rest;
    front.next = rest;
    front.size = rounded;
    insert_free(pool, rest);
  }
  Node& block = nodes_[index];
  block.allocated = true;
  stats_.allocated += block.size;
  stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
  return Block{block.address, block.size, index};
}

void CachingAllocator::free(const Block& block) {
  if (block.size == 0 && block.address == 0) return;  // the empty block of a zero-byte request
  std::int32_t index = find(block);
  if (index < 0 || !nodes_[index].allocated) {
    fail(fmt::format("free of a block that is not allocated: {:#x}", block.address));
  }
  if (nodes_[index].size != block.size) {
    fail(fmt::format("block {:#x} holds {} bytes, freed as {}", block.address, nodes_[index].size,
                     block.size));
  }
  stats_.allocated -= nodes_[index].size;
  nodes_[index].allocated = false;
  FreeIndex& pool = nodes_[index].small ? free_small_ : free_large_;

  // Merge with the next block of the same segment when it is free (try_merge_blocks).
  if (const std::int32_t next = nodes_[index].next; next >= 0 && !nodes_[next].allocated) {
    erase_free(pool, next);
    absorb(index, next);
  }
  // ... and with the previous one, which then absorbs this block and changes class.
  if (const std::int32_t prev = nodes_[index].prev; prev >= 0 && !nodes_[prev].allocated) {
    erase_free(pool, prev);
    absorb(prev, index);
    index = prev;
  }
  insert_free(pool, index);
}

std::optional<std::vector<Block>> CachingAllocator::restore_segment(
    Bytes size, const std::vector<std::pair<Bytes, Bytes>>& allocated) {
  const bool small = size == kSmallBuffer;
  const std::optional<std::int32_t> head = allocate_segment(size, small, false);
  if (!head) return std::nullopt;
  const std::int32_t segment = nodes_[*head].segment;
  const std::uintptr_t base = nodes_[*head].address;
  FreeIndex& pool = small ? free_small_ : free_large_;
  // The head node becomes the first block; each next one is linked after the last.
  std::vector<Block> live;
  std::int32_t last = -1;
  Bytes at = 0;
  auto add = [&](Bytes offset, Bytes bytes, bool is_allocated) {
    std::int32_t index = *head;
    if (last >= 0) {
      index = new_node(Node{base + static_cast<std::uintptr_t>(offset), bytes, segment, last, -1,
                            is_allocated, false, small});
      nodes_[last].next = index;
    } else {
      nodes_[index].size = bytes;
      nodes_[index].allocated = is_allocated;
    }
    if (is_allocated) {
      stats_.allocated += bytes;
      live.push_back(Block{nodes_[index].address, bytes, index});
    } else {
      insert_free(pool, index);
    }
    last = index;
  };
  for (const auto& [offset, bytes] : allocated) {
    if (offset < at || bytes <= 0 || bytes % kMinBlockSize != 0 || offset % kMinBlockSize != 0 ||
        offset + bytes > size)
      fail(fmt::format("restored block at {} of {} bytes does not fit segment of {} after {}",
                       offset, bytes, size, at));
    if (offset > at) add(at, offset - at, false);
    add(offset, bytes, true);
    at = offset + bytes;
  }
  if (at < size) add(at, size - at, false);
  stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
  return live;
}

std::int32_t CachingAllocator::new_node(const Node& node) {
  if (!spare_nodes_.empty()) {
    const std::int32_t index = spare_nodes_.back();
    spare_nodes_.pop_back();
    nodes_[index] = node;
    nodes_[index].spare = false;
    return index;
  }
  nodes_.push_back(node);
  return static_cast<std::int32_t>(nodes_.size()) - 1;
}

// `into` takes over `gone`, the block right after it.
void CachingAllocator::absorb(std::int32_t into, std::int32_t gone) {
  Node& a = nodes_[into];
  a.size += nodes_[gone].size;
  a.next = nodes_[gone].next;
  if (a.next >= 0) nodes_[a.next].prev = into;
  retire(gone);
}

std::int32_t CachingAllocator::best_fit(const FreeIndex& pool, Bytes rounded) const {
  // The first block of the request's class that is large enough: the list is in (size, address)
  // order, so it is the smallest, the lowest address among equals.
  const int own = size_class(rounded);
  for (std::int32_t i = pool.head[own]; i >= 0; i = nodes_[i].free_next)
    if (nodes_[i].size >= rounded) return i;
  // Else the first block of the next class that holds any.
  const int from = own + 1;
  for (int word = from / 64; word < FreeIndex::kClasses / 64; ++word) {
    std::uint64_t held = pool.held[word];
    if (word == from / 64) held &= ~std::uint64_t{0} << (from % 64);
    if (held != 0) return pool.head[word * 64 + std::countr_zero(held)];
  }
  return -1;
}

void CachingAllocator::insert_free(FreeIndex& pool, std::int32_t index) {
  Node& node = nodes_[index];
  const int c = size_class(node.size);
  // Blocks ordered before the new one: smaller, or as large at a lower address (addresses differ).
  auto precedes = [&](std::int32_t i) {
    const Node& other = nodes_[i];
    return other.size < node.size || (other.size == node.size && other.address < node.address);
  };
  // From the front, the first block that follows it; from the back, the last that precedes it;
  // a step of each in turn, until one of them has its place.
  std::int32_t before = -1;
  std::int32_t after = -1;
  for (std::int32_t front = pool.head[c], back = pool.tail[c];;) {
    if (front < 0 || !precedes(front)) {
      after = front;
      before = front < 0 ? pool.tail[c] : nodes_[front].free_prev;
      break;
    }
    if (precedes(back)) {
      before = back;
      after = nodes_[back].free_next;
      break;
    }
    front = nodes_[front].free_next;
    back = nodes_[back].free_prev;
  }
  node.free_prev = before;
  node.free_next = after;
  (before >= 0 ? nodes_[before].free_next : pool.head[c]) = index;
  (after >= 0 ? nodes_[after].free_prev : pool.tail[c]) = index;
  pool.held[c / 64] |= std::uint64_t{1} << (c % 64);
}

// Takes the free block `index` off its class's list; its size must still be the one it was
// listed with.
void CachingAllocator::erase_free(FreeIndex& pool, std::int32_t index) {
  const Node& node = nodes_[index];
  if (node.free_next >= 0 && node.free_prev >= 0) {
    nodes_[node.free_next].free_prev = node.free_prev;
    nodes_[node.free_prev].free_next = node.free_next;
    return;
  }
  const int c = size_class(node.size);
  (node.free_next >= 0 ? nodes_[node.free_next].free_prev : pool.tail[c]) = node.free_prev;
  (node.free_prev >= 0 ? nodes_[node.free_prev].free_next : pool.head[c]) = node.free_next;
  if (pool.head[c] < 0) pool.held[c / 64] &= ~(std::uint64_t{1} << (c % 64));
}

// The node of an allocated or free block: by its handle, else (a block made elsewhere) by its
// address; -1 when there is none.
std::int32_t CachingAllocator::find(const Block& block) const {
  const std::int32_t h = block.handle;
  if (h >= 0 && static_cast<std::size_t>(h) < nodes_.size() && !nodes_[h].spare &&
      nodes_[h].address == block.address)
    return h;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i].spare && nodes_[i].address == block.address) return static_cast<std::int32_t>(i);
  return -1;
}

void CachingAllocator::retire(std::int32_t index) {
  nodes_[index].spare = true;
  spare_nodes_.push_back(index);
}

// A new segment holding one free block (not yet in a free set), or nullopt when the source
// refuses (with `retry`: even after the cache was emptied).
std::optional<std::int32_t> CachingAllocator::allocate_segment(Bytes size, bool small, bool retry) {
  auto address = source_.allocate_segment(size);
  if (!address && retry && release_free_segments() > 0) {
    ++stats_.retries;
    address = source_.allocate_segment(size);
  }
  if (!address) return std::nullopt;
  std::int32_t segment = -1;
  if (!spare_segments_.empty()) {
    segment = spare_segments_.back();
    spare_segments_.pop_back();
  } else {
    segments_.emplace_back();
    segment = static_cast<std::int32_t>(segments_.size()) - 1;
  }
  const std::int32_t head = new_node(Node{*address, size, segment, -1, -1, false, false, small});
  segments_[segment] = SegmentInfo{*address, size, small, head};
  ++stats_.segment_allocs;
  stats_.reserved += size;
  stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
  return head;
}

// Returns every segment that is one free block to the source (release_cached_blocks); the
// number of segments released.
int CachingAllocator::release_free_segments() {
  int released = 0;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    SegmentInfo& segment = segments_[i];
    if (segment.head < 0) continue;
    const Node& block = nodes_[segment.head];
    if (block.allocated || block.size != segment.size) continue;
    erase_free(segment.small ? free_small_ : free_large_, segment.head);
    retire(segment.head);
    source_.free_segment(segment.address, segment.size);
    stats_.reserved -= segment.size;
    segment.head = -1;
    spare_segments_.push_back(static_cast<std::int32_t>(i));
    ++released;
  }
  return released;
}

std::unique_ptr<Allocator> make_caching_allocator(SegmentSource& source) {
  return std::make_unique<CachingAllocator>(source);
}

}  // namespace vrambench
