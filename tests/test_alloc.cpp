// Allocator policies and the virtual segment source: hand-worked allocation sequences with the
// bytes each rule should reserve, and a seeded random replay checked against invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "alloc/allocator.h"
#include "alloc/caching.h"
#include "alloc/virtual_source.h"
#include "core/error.h"
#include "device/sources.h"

namespace vrambench {
namespace {

std::uintptr_t offset(Bytes bytes) {
  return static_cast<std::uintptr_t>(bytes);
}

void expect_same_stats(const AllocStats& a, const AllocStats& b) {
  EXPECT_EQ(a.allocated, b.allocated);
  EXPECT_EQ(a.reserved, b.reserved);
  EXPECT_EQ(a.allocated_peak, b.allocated_peak);
  EXPECT_EQ(a.reserved_peak, b.reserved_peak);
  EXPECT_EQ(a.segment_allocs, b.segment_allocs);
  EXPECT_EQ(a.retries, b.retries);
}

// ---------------------------------------------------------------------------------------------
// Virtual source

TEST(AllocVirtualSource, HandsOutAlignedIncreasingAddressesUpToCapacity) {
  auto source = make_virtual_source(10 * MiB);
  EXPECT_EQ(source->capacity(), 10 * MiB);
  EXPECT_EQ(source->in_use(), 0);

  const auto a = source->allocate_segment(3 * MiB);
  ASSERT_TRUE(a);
  EXPECT_NE(*a, 0u);
  EXPECT_EQ(*a % offset(2 * MiB), 0u);
  // 3 MiB occupies two 2 MiB alignment steps of address space, so the next segment starts 4 MiB on.
  const auto b = source->allocate_segment(1 * KiB);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, *a + offset(4 * MiB));
  EXPECT_EQ(source->in_use(), 3 * MiB + 1 * KiB);

  // 3 MiB + 1 KiB + 7 MiB > 10 MiB: refused, nothing changes.
  EXPECT_FALSE(source->allocate_segment(7 * MiB));
  EXPECT_EQ(source->in_use(), 3 * MiB + 1 * KiB);
  // Exactly the rest fits.
  const auto c = source->allocate_segment(7 * MiB - 1 * KiB);
  ASSERT_TRUE(c);
  EXPECT_EQ(source->in_use(), 10 * MiB);
  EXPECT_FALSE(source->allocate_segment(512));

  source->free_segment(*a, 3 * MiB);
  EXPECT_EQ(source->in_use(), 7 * MiB);
  // Addresses are never reused, so a stale address cannot alias a new segment.
  const auto d = source->allocate_segment(2 * MiB);
  ASSERT_TRUE(d);
  EXPECT_GT(*d, *c);
  EXPECT_EQ(source->in_use(), 9 * MiB);
}

TEST(AllocVirtualSource, RejectsBadFrees) {
  auto source = make_virtual_source(10 * MiB);
  const auto a = source->allocate_segment(2 * MiB);
  ASSERT_TRUE(a);
  EXPECT_THROW(source->free_segment(*a + 512, 2 * MiB), InternalError);
  EXPECT_THROW(source->free_segment(*a, 4 * MiB), InternalError);
  EXPECT_THROW(source->allocate_segment(0), InternalError);
  source->free_segment(*a, 2 * MiB);
  EXPECT_THROW(source->free_segment(*a, 2 * MiB), InternalError);  // double free
  EXPECT_EQ(source->in_use(), 0);
}

// Frees in the order of allocation take a shortcut to the next segment; any other order finds the
// segment by address. Either way each segment is freed once, with its own size.
TEST(AllocVirtualSource, FreesSegmentsInAnyOrderOnceEach) {
  for (const std::vector<int>& order :
       {std::vector<int>{0, 1, 2, 3, 4, 5}, std::vector<int>{5, 4, 3, 2, 1, 0},
        std::vector<int>{2, 3, 0, 5, 1, 4}, std::vector<int>{1, 0, 3, 2, 5, 4}}) {
    auto source = make_virtual_source(64 * MiB);
    std::vector<std::uintptr_t> addresses;
    for (int i = 0; i < 6; ++i) addresses.push_back(*source->allocate_segment((i + 1) * MiB));
    Bytes in_use = 21 * MiB;
    for (int i : order) {
      const std::uintptr_t a = addresses[static_cast<std::size_t>(i)];
      EXPECT_THROW(source->free_segment(a, (i + 2) * MiB), InternalError);  // another size
      source->free_segment(a, (i + 1) * MiB);
      in_use -= (i + 1) * MiB;
      EXPECT_EQ(source->in_use(), in_use);
      EXPECT_THROW(source->free_segment(a, (i + 1) * MiB), InternalError);  // twice
    }
    EXPECT_EQ(source->in_use(), 0);
  }
}

TEST(AllocVirtualSource, HugeRequestIsRefusedWithoutOverflow) {
  auto source = make_virtual_source(10 * MiB);
  ASSERT_TRUE(source->allocate_segment(4 * MiB));
  EXPECT_FALSE(source->allocate_segment(INT64_MAX));
  EXPECT_EQ(source->in_use(), 4 * MiB);
}

// ---------------------------------------------------------------------------------------------
// direct: one segment per request

TEST(AllocDirect, RoundsSmallTo512BytesAndLargeTo2MiB) {
  auto source = make_virtual_source(1 * GiB);
  auto alloc = make_direct_allocator(*source);

  // 100 B -> 512 B; 1 MiB exactly is still "small" -> 1 MiB; 1 MiB + 1 B -> 2 MiB;
  // 5 MiB + 3 B -> 6 MiB.
  const auto a = alloc->allocate(100);
  const auto b = alloc->allocate(1 * MiB);
  const auto c = alloc->allocate(1 * MiB + 1);
  const auto d = alloc->allocate(5 * MiB + 3);
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(a->size, 512);
  EXPECT_EQ(b->size, 1 * MiB);
  EXPECT_EQ(c->size, 2 * MiB);
  EXPECT_EQ(d->size, 6 * MiB);

  // allocated = 100 + 1 MiB + (1 MiB + 1) + (5 MiB + 3); reserved = 512 B + 1 + 2 + 6 MiB.
  const AllocStats& s = alloc->stats();
  EXPECT_EQ(s.allocated, 7 * MiB + 104);
  EXPECT_EQ(s.reserved, 9 * MiB + 512);
  EXPECT_EQ(s.segment_allocs, 4);
  EXPECT_EQ(source->in_use(), s.reserved);
}

TEST(AllocDirect, FreeReturnsTheSegmentAtOnce) {
  auto source = make_virtual_source(1 * GiB);
  auto alloc = make_direct_allocator(*source);
  const auto a = alloc->allocate(3 * MiB);  // 4 MiB segment
  const auto b = alloc->allocate(700);      // 1 KiB segment
  ASSERT_TRUE(a && b);
  alloc->free(*a);
  // Nothing cached: allocated 700, reserved 1 KiB, and the source got the 4 MiB back.
  EXPECT_EQ(alloc->stats().allocated, 700);
  EXPECT_EQ(alloc->stats().reserved, 1 * KiB);
  EXPECT_EQ(source->in_use(), 1 * KiB);
  EXPECT_EQ(alloc->stats().allocated_peak, 3 * MiB + 700);
  EXPECT_EQ(alloc->stats().reserved_peak, 4 * MiB + 1 * KiB);
  EXPECT_THROW(alloc->free(*a), InternalError);  // double free
  alloc->free(*b);
  EXPECT_EQ(alloc->stats().reserved, 0);
  EXPECT_EQ(source->in_use(), 0);
}

TEST(AllocDirect, OomWhenTheSegmentDoesNotFit) {
  auto source = make_virtual_source(8 * MiB);
  auto alloc = make_direct_allocator(*source);
  ASSERT_TRUE(alloc->allocate(6 * MiB));
  const AllocStats before = alloc->stats();
  // 3 MiB needs a 4 MiB segment: 6 + 4 > 8 MiB, although 2 MiB are free.
  EXPECT_FALSE(alloc->allocate(3 * MiB));
  EXPECT_EQ(alloc->free_bytes(), 2 * MiB);
  expect_same_stats(alloc->stats(), before);
  ASSERT_TRUE(alloc->allocate(2 * MiB));
  EXPECT_EQ(alloc->free_bytes(), 0);
}

// ---------------------------------------------------------------------------------------------
// caching: PyTorch's rules, one hand-worked sequence per rule

class AllocCaching : public ::testing::Test {
 protected:
  std::unique_ptr<SegmentSource> source = make_virtual_source(1 * GiB);
  std::unique_ptr<Allocator> alloc = make_caching_allocator(*source);

  Block must_allocate(Bytes bytes) {
    const auto block = alloc->allocate(bytes);
    if (!block) ADD_FAILURE() << "allocation of " << bytes << " bytes failed";
    return block.value_or(Block{});
  }
  const AllocStats& stats() const { return alloc->stats(); }
};

TEST_F(AllocCaching, RoundsRequestsTo512Bytes) {
  EXPECT_EQ(must_allocate(1).size, 512);
  EXPECT_EQ(must_allocate(512).size, 512);
  EXPECT_EQ(must_allocate(513).size, 1024);
  // allocated counts rounded block sizes: 512 + 512 + 1024.
  EXPECT_EQ(stats().allocated, 2048);
}

TEST_F(AllocCaching, ThreeSmallAllocationsShareOne2MiBSegment) {
  // 100 B -> 512 B block at the segment start; the 2 MiB - 512 B rest is split off (>= 512 B).
  // 1000 B -> 1 KiB from that rest; 4 KiB -> 4 KiB after it. One segment, packed front to back.
  const Block a = must_allocate(100);
  const Block b = must_allocate(1000);
  const Block c = must_allocate(4 * KiB);
  EXPECT_EQ(b.address, a.address + 512);
  EXPECT_EQ(c.address, a.address + 512 + 1024);
  EXPECT_EQ(stats().segment_allocs, 1);
  EXPECT_EQ(stats().reserved, 2 * MiB);
  EXPECT_EQ(stats().allocated, 512 + 1024 + 4096);
}

TEST_F(AllocCaching, SmallBlockIsSplitDownToA512ByteRest) {
  // 1 MiB, then 1 MiB - 512 B from the same 2 MiB segment: the rest is exactly 512 B, which is
  // >= kMinBlockSize, so it is split off and serves a 512 B request without a new segment.
  const Block a = must_allocate(1 * MiB);
  const Block b = must_allocate(1 * MiB - 512);
  EXPECT_EQ(b.size, 1 * MiB - 512);
  const Block c = must_allocate(512);
  EXPECT_EQ(c.address, a.address + offset(2 * MiB - 512));
  EXPECT_EQ(stats().segment_allocs, 1);
  EXPECT_EQ(stats().allocated, 2 * MiB);
}

TEST_F(AllocCaching, ExactlyOneMiBIsSmallAndOneByteMoreIsLarge) {
  // 1 MiB (<= kSmallSize) -> a 2 MiB small segment; 1 MiB + 1 B -> 1 MiB + 512 B, large pool,
  // below 10 MiB -> a 20 MiB segment. Reserved 22 MiB.
  must_allocate(1 * MiB);
  EXPECT_EQ(stats().reserved, 2 * MiB);
  must_allocate(1 * MiB + 1);
  EXPECT_EQ(stats().reserved, 22 * MiB);
  EXPECT_EQ(stats().segment_allocs, 2);
  EXPECT_EQ(stats().allocated, 2 * MiB + 512);
}

TEST_F(AllocCaching, FiveMiBTakesA20MiBSegmentAndTheNextIsSplitFromIt) {
  // 5 MiB is in (1, 10) MiB -> a 20 MiB segment; the 15 MiB rest (> 1 MiB) is split off.
  const Block a = must_allocate(5 * MiB);
  EXPECT_EQ(a.size, 5 * MiB);
  EXPECT_EQ(stats().reserved, 20 * MiB);
  // The second 5 MiB is cut from the 15 MiB free block right behind the first.
  const Block b = must_allocate(5 * MiB);
  EXPECT_EQ(b.address, a.address + offset(5 * MiB));
  EXPECT_EQ(stats().segment_allocs, 1);
  EXPECT_EQ(stats().reserved, 20 * MiB);
  EXPECT_EQ(stats().allocated, 10 * MiB);
}

TEST_F(AllocCaching, TenMiBStartsTheRoundedSegments) {
  // 10 MiB - 512 B is below kMinLargeAlloc: a 20 MiB segment, the 10 MiB + 512 B rest split off.
  must_allocate(10 * MiB - 512);
  EXPECT_EQ(stats().reserved, 20 * MiB);
  // 10 MiB exactly is not: its own segment, rounded up to 2 MiB, is 10 MiB. The cached 10 MiB +
  // 512 B rest would fit it, so fill that first with a request of its exact size.
  must_allocate(10 * MiB + 512);
  EXPECT_EQ(stats().segment_allocs, 1);
  must_allocate(10 * MiB);
  EXPECT_EQ(stats().reserved, 30 * MiB);
  EXPECT_EQ(stats().segment_allocs, 2);
}

TEST_F(AllocCaching, TwelvePointThreeMiBReserves14MiB) {
  // 12.3 MiB = 12'897'485 B -> rounded to 512 B: 25'191 * 512 = 12'897'792 B. >= 10 MiB, so the
  // segment is that rounded up to 2 MiB: 14 MiB. The 1'782'272 B (1.7 MiB) rest is > 1 MiB and
  // is split off, so the block (and `allocated`) is 12'897'792 B.
  const Block a = must_allocate(12'897'485);
  EXPECT_EQ(a.size, 12'897'792);
  EXPECT_EQ(stats().reserved, 14 * MiB);
  EXPECT_EQ(stats().allocated, 12'897'792);
  // The 1.7 MiB rest serves a 1.5 MiB request without a new segment.
  const Block b = must_allocate(1 * MiB + 512 * KiB);
  EXPECT_EQ(b.address, a.address + offset(12'897'792));
  EXPECT_EQ(stats().segment_allocs, 1);
}

TEST_F(AllocCaching, LargeBlockIsSplitOnlyWhenTheRestExceeds1MiB) {
  // 19 MiB -> 20 MiB segment, rest exactly 1 MiB: not > 1 MiB, so the whole 20 MiB is the block.
  const Block a = must_allocate(19 * MiB);
  EXPECT_EQ(a.size, 20 * MiB);
  EXPECT_EQ(stats().allocated, 20 * MiB);
  // 18.5 MiB -> 20 MiB segment, rest 1.5 MiB > 1 MiB: split, the block is 18.5 MiB.
  const Block b = must_allocate(18 * MiB + 512 * KiB);
  EXPECT_EQ(b.size, 18 * MiB + 512 * KiB);
  EXPECT_EQ(stats().reserved, 40 * MiB);
  EXPECT_EQ(stats().allocated, 38 * MiB + 512 * KiB);
}

TEST_F(AllocCaching, FreeThenReallocateTheSameSizeReusesTheBlock) {
  const Block a = must_allocate(12'897'485);
  const Block s = must_allocate(700);
  alloc->free(a);
  alloc->free(s);
  // Freed memory stays reserved: allocated 0, reserved 14 MiB + 2 MiB.
  EXPECT_EQ(stats().allocated, 0);
  EXPECT_EQ(stats().reserved, 16 * MiB);
  const Block a2 = must_allocate(12'897'485);
  const Block s2 = must_allocate(700);
  EXPECT_EQ(a2.address, a.address);
  EXPECT_EQ(s2.address, s.address);
  EXPECT_EQ(stats().segment_allocs, 2);
  EXPECT_EQ(stats().reserved, 16 * MiB);
}

TEST_F(AllocCaching, CoalescedNeighboursServeABiggerRequest) {
  // One 20 MiB segment: A 4 MiB @0, B 4 MiB @4, C 4 MiB @8, D 8 MiB @12 (D takes the 8 MiB rest
  // exactly, no split). The segment is full.
  const Block a = must_allocate(4 * MiB);
  const Block b = must_allocate(4 * MiB);
  const Block c = must_allocate(4 * MiB);
  const Block d = must_allocate(8 * MiB);
  EXPECT_EQ(d.address, a.address + offset(12 * MiB));
  EXPECT_EQ(d.size, 8 * MiB);
  // Free A, then C (two separate 4 MiB holes), then B: B merges with both into 12 MiB @0.
  alloc->free(a);
  alloc->free(c);
  alloc->free(b);
  // 12 MiB fits the merged hole exactly; without merging no hole is bigger than 4 MiB.
  const Block e = must_allocate(12 * MiB);
  EXPECT_EQ(e.address, a.address);
  EXPECT_EQ(e.size, 12 * MiB);
  EXPECT_EQ(stats().segment_allocs, 1);
  EXPECT_EQ(stats().allocated, 20 * MiB);
}

TEST_F(AllocCaching, FreedBlockMergesWithTheRestOfItsSegment) {
  // 5 MiB from a 20 MiB segment; freeing it merges with the 15 MiB rest into one 20 MiB block,
  // which then serves an 18 MiB request whole.
  const Block a = must_allocate(5 * MiB);
  alloc->free(a);
  const Block b = must_allocate(18 * MiB);
  EXPECT_EQ(b.address, a.address);
  EXPECT_EQ(stats().segment_allocs, 1);
}

TEST_F(AllocCaching, BestFitTakesTheSmallestHoleThenTheLowestAddress) {
  // Small segment: A 64 KiB @0, B 4 KiB @64K, C 8 KiB @68K, D 4 KiB @76K, rest free @80K.
  const Block a = must_allocate(64 * KiB);
  must_allocate(4 * KiB);
  const Block c = must_allocate(8 * KiB);
  must_allocate(4 * KiB);
  alloc->free(a);
  alloc->free(c);
  // Free: 64 KiB @0, 8 KiB @68K, ~1.9 MiB @80K. 6 KiB best-fits the 8 KiB hole (split, 2 KiB
  // left), not the lower-addressed 64 KiB one.
  const Block e = must_allocate(6 * KiB);
  EXPECT_EQ(e.address, c.address);
  EXPECT_EQ(e.size, 6 * KiB);
  // 2 KiB now fits the 2 KiB rest exactly.
  const Block f = must_allocate(2 * KiB);
  EXPECT_EQ(f.address, c.address + offset(6 * KiB));
  EXPECT_EQ(stats().segment_allocs, 1);
}

TEST_F(AllocCaching, BestFitPrefersTheLowerAddressAmongEqualHoles) {
  // Two small segments, each filled by two 1 MiB blocks: P1 @S1, P2 @S1+1M, Q1 @S2, Q2 @S2+1M.
  const Block p1 = must_allocate(1 * MiB);
  must_allocate(1 * MiB);
  const Block q1 = must_allocate(1 * MiB);
  must_allocate(1 * MiB);
  ASSERT_LT(p1.address, q1.address);
  // Two equal 1 MiB holes; free the higher one first so that order of freeing cannot decide.
  alloc->free(q1);
  alloc->free(p1);
  EXPECT_EQ(must_allocate(1 * MiB).address, p1.address);
  EXPECT_EQ(must_allocate(1 * MiB).address, q1.address);
  EXPECT_EQ(stats().segment_allocs, 2);
}

// Holes of many sizes in one segment (sizes spread over many of the free index's size classes,
// some equal, so that the address decides), then requests of random sizes: each takes the hole a
// search of them all names (the smallest large enough, the lowest address among equals) and is
// freed again, which puts the holes back as they were.
void expect_best_fit_over_holes(Bytes segment_bytes, Bytes smallest, Bytes largest,
                                Bytes request_step, unsigned seed) {
  VirtualSource source(4 * GiB);
  CachingAllocator alloc(source);
  std::mt19937_64 rng(seed);
  // Sizes log-uniform in [smallest, largest], multiples of 512 B, every third one repeated.
  auto random_size = [&](Bytes lo, Bytes hi) {
    const double span = std::log(static_cast<double>(hi) / static_cast<double>(lo));
    const double x =
        static_cast<double>(lo) * std::exp(std::uniform_real_distribution<double>(0.0, span)(rng));
    return std::clamp<Bytes>(static_cast<Bytes>(x) / 512 * 512, lo, hi);
  };
  // One segment, cached whole, to carve the holes from: every block below is cut from its front.
  // The small pool's segment (2 MiB) comes with any small request.
  const std::optional<Block> whole = alloc.allocate(segment_bytes > 2 * MiB ? segment_bytes : 512);
  ASSERT_TRUE(whole);
  alloc.free(*whole);
  struct Hole {
    Bytes size;
    std::uintptr_t address;
  };
  std::vector<Hole> holes;
  std::vector<Block> holes_blocks;
  Bytes used = 0;
  Bytes last = 0;
  // An eighth of the segment stays at its end, so that every cut leaves a rest to split off.
  for (int i = 0; used + largest + smallest + segment_bytes / 8 <= segment_bytes; ++i) {
    const Bytes size = i % 3 == 2 ? last : random_size(smallest, largest);
    last = size;
    const std::optional<Block> hole = alloc.allocate(size);
    const std::optional<Block> wall = alloc.allocate(smallest);  // keeps the holes apart
    ASSERT_TRUE(hole && wall);
    ASSERT_EQ(hole->address, whole->address + static_cast<std::uintptr_t>(used));
    used += hole->size + wall->size;
    holes.push_back({hole->size, hole->address});
    holes_blocks.push_back(*hole);
  }
  for (const Block& b : holes_blocks) alloc.free(b);
  // The rest of the segment is a hole too.
  holes.push_back({segment_bytes - used, whole->address + static_cast<std::uintptr_t>(used)});
  ASSERT_GE(holes.size(), 20u);
  const std::int64_t segments = alloc.stats().segment_allocs;

  int probes = 0;
  for (Bytes request = smallest; request <= largest; request += request_step, ++probes) {
    const Bytes rounded = (request + 511) / 512 * 512;
    const Hole* best = nullptr;
    for (const Hole& h : holes)
      if (h.size >= rounded && (best == nullptr || h.size < best->size ||
                                (h.size == best->size && h.address < best->address)))
        best = &h;
    ASSERT_NE(best, nullptr);
    const std::optional<Block> got = alloc.allocate(request);
    ASSERT_TRUE(got);
    ASSERT_EQ(got->address, best->address) << "request of " << request << " bytes";
    alloc.free(*got);
  }
  EXPECT_GT(probes, 100);
  EXPECT_EQ(alloc.stats().segment_allocs, segments);  // every request was served by a hole
}

TEST(AllocCachingBestFit, LargeHolesOfManySizes) {
  expect_best_fit_over_holes(2 * GiB, 1 * MiB + 512, 48 * MiB, 97 * KiB + 512, 13);
}

TEST(AllocCachingBestFit, SmallHolesOfManySizes) {
  // A small segment is 2 MiB: holes of 512 B to 24 KiB fit it many times over.
  expect_best_fit_over_holes(2 * MiB, 512, 24 * KiB, 173, 7);
}

TEST_F(AllocCaching, SmallAndLargePoolsDoNotShareBlocks) {
  // A cached 20 MiB large segment does not serve a 4 KiB request: it gets a new 2 MiB segment.
  alloc->free(must_allocate(5 * MiB));
  must_allocate(4 * KiB);
  EXPECT_EQ(stats().segment_allocs, 2);
  EXPECT_EQ(stats().reserved, 22 * MiB);
  // And the small segment's free 2 MiB - 4 KiB does not serve a 1.5 MiB (large) request; the
  // cached 20 MiB block does.
  must_allocate(1 * MiB + 512 * KiB);
  EXPECT_EQ(stats().segment_allocs, 2);
}

TEST_F(AllocCaching, PeaksFollowTheHighWaterMarkAndResetToCurrent) {
  const Block a = must_allocate(5 * MiB);  // 20 MiB segment
  const Block b = must_allocate(5 * MiB);  // split from it
  alloc->free(a);
  alloc->free(b);
  EXPECT_EQ(stats().allocated, 0);
  EXPECT_EQ(stats().allocated_peak, 10 * MiB);
  EXPECT_EQ(stats().reserved, 20 * MiB);
  EXPECT_EQ(stats().reserved_peak, 20 * MiB);
  alloc->reset_peaks();
  EXPECT_EQ(stats().allocated_peak, 0);
  EXPECT_EQ(stats().reserved_peak, 20 * MiB);
  alloc->release_cached();
  EXPECT_EQ(stats().reserved, 0);
  EXPECT_EQ(stats().reserved_peak, 20 * MiB);
  alloc->reset_peaks();
  EXPECT_EQ(stats().reserved_peak, 0);
  EXPECT_EQ(source->in_use(), 0);
}

TEST_F(AllocCaching, ReleaseCachedKeepsSegmentsWithLiveBlocks) {
  const Block a = must_allocate(5 * MiB);   // segment 1 (20 MiB), stays live
  const Block b = must_allocate(20 * MiB);  // segment 2 (20 MiB)
  const Block c = must_allocate(100);       // segment 3 (2 MiB)
  alloc->free(b);
  alloc->free(c);
  alloc->release_cached();
  // Segments 2 and 3 are one free block each and go back; segment 1 holds A and stays.
  EXPECT_EQ(stats().reserved, 20 * MiB);
  EXPECT_EQ(source->in_use(), 20 * MiB);
  // Its free 15 MiB rest is still cached and serves a 15 MiB request.
  const Block d = must_allocate(15 * MiB);
  EXPECT_EQ(d.address, a.address + offset(5 * MiB));
  EXPECT_EQ(stats().segment_allocs, 3);
}

TEST(AllocCachingOom, CachedSegmentsAreReleasedAndTheSegmentRetried) {
  auto source = make_virtual_source(64 * MiB);
  auto alloc = make_caching_allocator(*source);
  // Three 20 MiB requests, each a 20 MiB segment (>= 10 MiB: rounded to 2 MiB): reserved 60 MiB.
  const auto x = alloc->allocate(20 * MiB);
  const auto y = alloc->allocate(20 * MiB);
  const auto z = alloc->allocate(20 * MiB);
  ASSERT_TRUE(x && y && z);
  alloc->free(*x);
  alloc->free(*y);
  EXPECT_EQ(alloc->stats().reserved, 60 * MiB);
  // 30 MiB: the two cached 20 MiB blocks lie in different segments and never merge, so a new
  // 30 MiB segment is needed; 60 + 30 > 64 MiB is refused; X's and Y's segments are released
  // (reserved 20 MiB) and the retry fits: 20 + 30 <= 64 MiB.
  const auto w = alloc->allocate(30 * MiB);
  ASSERT_TRUE(w);
  EXPECT_EQ(alloc->stats().retries, 1);
  EXPECT_EQ(alloc->stats().reserved, 50 * MiB);
  EXPECT_EQ(alloc->stats().reserved_peak, 60 * MiB);
  EXPECT_EQ(alloc->stats().segment_allocs, 4);
  EXPECT_EQ(alloc->stats().allocated, 50 * MiB);
  EXPECT_EQ(alloc->free_bytes(), 14 * MiB);
}

TEST(AllocCachingOom, RetryThatStillDoesNotFitIsAnOom) {
  auto source = make_virtual_source(64 * MiB);
  auto alloc = make_caching_allocator(*source);
  const auto x = alloc->allocate(20 * MiB);
  const auto y = alloc->allocate(20 * MiB);
  ASSERT_TRUE(x && y);
  alloc->free(*y);
  // 50 MiB: 40 + 50 > 64 refused; Y's segment released (reserved 20); 20 + 50 > 64 still: OOM.
  EXPECT_FALSE(alloc->allocate(50 * MiB));
  EXPECT_EQ(alloc->stats().retries, 1);
  EXPECT_EQ(alloc->stats().reserved, 20 * MiB);
  EXPECT_EQ(alloc->stats().segment_allocs, 2);
  EXPECT_EQ(alloc->free_bytes(), 44 * MiB);
  // What remains is usable: 44 MiB fits now.
  EXPECT_TRUE(alloc->allocate(44 * MiB));
}

TEST(AllocCachingOom, RequestLargerThanCapacityFailsWithStatsUnchanged) {
  auto source = make_virtual_source(64 * MiB);
  auto alloc = make_caching_allocator(*source);
  ASSERT_TRUE(alloc->allocate(20 * MiB));
  const AllocStats before = alloc->stats();
  // Nothing is cached, so nothing is released and no retry is counted.
  EXPECT_FALSE(alloc->allocate(100 * MiB));
  EXPECT_FALSE(alloc->allocate(INT64_MAX));
  expect_same_stats(alloc->stats(), before);
  EXPECT_EQ(source->in_use(), 20 * MiB);
}

// The estimate's replay (estimate/allocator_share.cpp) stops where the source first refuses a
// segment, and copies the allocator there to go on both with and without a limit.
TEST(AllocCachingCopy, WithoutRetryARefusedSegmentChangesNothing) {
  VirtualSource source(64 * MiB);
  CachingAllocator alloc(source);
  const auto x = alloc.allocate(20 * MiB);
  const auto y = alloc.allocate(20 * MiB);
  const auto z = alloc.allocate(20 * MiB);
  ASSERT_TRUE(x && y && z);
  alloc.free(*x);
  alloc.free(*y);
  const AllocStats before = alloc.stats();
  // 30 MiB needs a new segment and 60 + 30 > 64 MiB: refused, and the cache is kept.
  EXPECT_FALSE(alloc.allocate_without_retry(30 * MiB));
  expect_same_stats(alloc.stats(), before);
  EXPECT_EQ(source.in_use(), 60 * MiB);
  // A cached block still serves what fits in it, without a new segment.
  EXPECT_TRUE(alloc.allocate_without_retry(20 * MiB));
  EXPECT_EQ(alloc.stats().segment_allocs, 3);
  // allocate() frees the other cached segment and retries: 40 + 30 > 64, still refused.
  EXPECT_FALSE(alloc.allocate(30 * MiB));
  EXPECT_EQ(alloc.stats().retries, 1);
  EXPECT_EQ(alloc.stats().reserved, 40 * MiB);
}

TEST(AllocCachingCopy, ACopyOverACopiedSourceGoesOnAlone) {
  VirtualSource source(64 * MiB);
  auto alloc = std::make_unique<CachingAllocator>(source);
  const auto x = alloc->allocate(20 * MiB);
  const auto y = alloc->allocate(20 * MiB);
  const auto z = alloc->allocate(5 * MiB);  // a 20 MiB segment, split
  ASSERT_TRUE(x && y && z);
  alloc->free(*x);
  // The copy has the same blocks and segments and room for 200 MiB.
  VirtualSource roomy(source, 200 * MiB);
  CachingAllocator copy(*alloc, roomy);
  expect_same_stats(copy.stats(), alloc->stats());
  EXPECT_EQ(roomy.in_use(), 60 * MiB);
  // Both serve the next request from the same cached block (the best fit: Z's 15 MiB rest, not
  // X's 20 MiB segment), at the same address.
  const auto a = alloc->allocate(12 * MiB);
  const auto b = copy.allocate(12 * MiB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->address, b->address);
  EXPECT_EQ(a->address, z->address + offset(5 * MiB));
  // 40 MiB: the original releases X's free segment and still fails (40 + 40 > 64 MiB); the copy
  // takes a new segment and keeps its cache.
  EXPECT_FALSE(alloc->allocate(40 * MiB));
  EXPECT_EQ(alloc->stats().retries, 1);
  EXPECT_EQ(source.in_use(), 40 * MiB);
  const auto c = copy.allocate(40 * MiB);
  ASSERT_TRUE(c);
  EXPECT_EQ(copy.stats().reserved, 100 * MiB);
  EXPECT_EQ(copy.stats().retries, 0);
  // Blocks of the copy free in the copy only; each allocator returns its own source's segments.
  copy.free(*c);
  copy.free(*z);
  EXPECT_EQ(copy.stats().allocated, 32 * MiB);
  EXPECT_EQ(alloc->stats().allocated, 37 * MiB);
  alloc.reset();
  EXPECT_EQ(source.in_use(), 0);
  EXPECT_EQ(roomy.in_use(), 100 * MiB);
}

TEST(AllocVirtualSourceCopy, KeepsTheSegmentsUnderTheNewCapacity) {
  VirtualSource source(10 * MiB);
  const auto a = source.allocate_segment(4 * MiB);
  ASSERT_TRUE(a);
  VirtualSource copy(source, 6 * MiB);
  EXPECT_EQ(copy.in_use(), 4 * MiB);
  EXPECT_EQ(copy.capacity(), 6 * MiB);
  EXPECT_FALSE(copy.allocate_segment(4 * MiB));  // 4 + 4 > 6
  const auto b = copy.allocate_segment(2 * MiB);
  const auto c = source.allocate_segment(2 * MiB);
  ASSERT_TRUE(b && c);
  EXPECT_EQ(*b, *c);  // the same next address in both
  copy.free_segment(*a, 4 * MiB);
  EXPECT_EQ(source.in_use(), 6 * MiB);
  EXPECT_THROW(copy.free_segment(*a, 4 * MiB), InternalError);
  EXPECT_THROW((VirtualSource(source, -1)), InternalError);
}

TEST_F(AllocCaching, ZeroBytesReserveNothing) {
  const Block empty = must_allocate(0);
  EXPECT_EQ(empty.address, 0u);
  EXPECT_EQ(empty.size, 0);
  alloc->free(empty);
  EXPECT_EQ(stats().segment_allocs, 0);
  EXPECT_EQ(stats().reserved, 0);
}

TEST_F(AllocCaching, RejectsBadFrees) {
  const Block a = must_allocate(4 * KiB);
  EXPECT_THROW(alloc->free(Block{a.address, 8 * KiB}), InternalError);  // wrong size
  EXPECT_THROW(alloc->free(Block{a.address + offset(4 * KiB), 4 * KiB}),
               InternalError);  // a free block
  alloc->free(a);
  EXPECT_THROW(alloc->free(a), InternalError);  // double free
  EXPECT_THROW(alloc->allocate(-1), InternalError);
}

TEST(AllocLifetime, DestroyingAnAllocatorReturnsItsSegments) {
  auto source = make_virtual_source(1 * GiB);
  {
    auto caching = make_caching_allocator(*source);
    auto direct = make_direct_allocator(*source);
    ASSERT_TRUE(caching->allocate(5 * MiB));
    ASSERT_TRUE(caching->allocate(100));
    ASSERT_TRUE(direct->allocate(3 * MiB));
    EXPECT_EQ(source->in_use(), 20 * MiB + 2 * MiB + 4 * MiB);
  }
  EXPECT_EQ(source->in_use(), 0);
}

TEST(AllocFactory, MakesThePolicyAsked) {
  auto source = make_virtual_source(1 * GiB);
  auto direct = make_allocator(AllocatorKind::direct, *source);
  auto caching = make_allocator(AllocatorKind::caching, *source);
  ASSERT_TRUE(direct->allocate(100));
  ASSERT_TRUE(caching->allocate(100));
  EXPECT_EQ(direct->stats().reserved, 512);  // a 512 B segment of its own
  EXPECT_EQ(direct->stats().allocated, 100);
  EXPECT_EQ(caching->stats().reserved, 2 * MiB);  // a small-pool segment
  EXPECT_EQ(caching->stats().allocated, 512);
}

// ---------------------------------------------------------------------------------------------
// Random replay against invariants

// The segment a caching allocator needs for a request, from the rules in caching.cpp; used to
// check that an OOM really lacked room for it.
Bytes caching_segment_for(Bytes bytes) {
  const Bytes rounded = round_up(std::max<Bytes>(bytes, 512), 512);
  if (rounded <= 1 * MiB) return 2 * MiB;
  if (rounded < 10 * MiB) return 20 * MiB;
  return round_up(rounded, 2 * MiB);
}

Bytes direct_segment_for(Bytes bytes) {
  return bytes > 1 * MiB ? round_up(bytes, 2 * MiB) : round_up(bytes, 512);
}

void replay_random_program(AllocatorKind kind) {
  constexpr Bytes kCapacity = 2 * GiB;
  auto source = make_virtual_source(kCapacity);
  auto alloc = make_allocator(kind, *source);
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<int> size_class(0, 9);
  std::uniform_int_distribution<Bytes> small_bytes(1, 1 * MiB);
  std::uniform_int_distribution<Bytes> medium_bytes(1 * MiB, 10 * MiB);
  std::uniform_int_distribution<Bytes> large_bytes(10 * MiB, 200 * MiB);
  std::uniform_real_distribution<double> coin(0.0, 1.0);

  struct Live {
    Block block;
    Bytes requested;
  };
  std::vector<Live> live;
  std::map<std::uintptr_t, Bytes> by_address;  // live extents, to check they never overlap
  Bytes live_block_bytes = 0;
  Bytes live_requested_bytes = 0;
  int served = 0;
  int ooms = 0;

  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || coin(rng) < 0.6) {
      const int c = size_class(rng);
      const Bytes bytes = c < 6 ? small_bytes(rng) : c < 9 ? medium_bytes(rng) : large_bytes(rng);
      const auto block = alloc->allocate(bytes);
      if (!block) {
        ++ooms;
        const Bytes needed =
            kind == AllocatorKind::caching ? caching_segment_for(bytes) : direct_segment_for(bytes);
        ASSERT_LT(alloc->free_bytes(), needed) << "OOM with room for the segment, step " << step;
        continue;
      }
      ++served;
      ASSERT_GE(block->size, bytes);
      ASSERT_EQ(block->size % 512, 0);
      // No overlap with the live block below or above it.
      const auto above = by_address.lower_bound(block->address);
      if (above != by_address.end()) {
        ASSERT_GE(above->first, block->address + offset(block->size)) << "step " << step;
      }
      if (above != by_address.begin()) {
        const auto below = std::prev(above);
        ASSERT_LE(below->first + offset(below->second), block->address) << "step " << step;
      }
      by_address.emplace(block->address, block->size);
      live.push_back({*block, bytes});
      live_block_bytes += block->size;
      live_requested_bytes += bytes;
    } else {
      std::uniform_int_distribution<std::size_t> pick(0, live.size() - 1);
      const std::size_t i = pick(rng);
      alloc->free(live[i].block);
      by_address.erase(live[i].block.address);
      live_block_bytes -= live[i].block.size;
      live_requested_bytes -= live[i].requested;
      live[i] = live.back();
      live.pop_back();
    }
    const AllocStats& s = alloc->stats();
    ASSERT_EQ(s.allocated,
              kind == AllocatorKind::caching ? live_block_bytes : live_requested_bytes);
    ASSERT_LE(s.allocated, s.reserved);
    ASSERT_LE(s.reserved, kCapacity);
    ASSERT_EQ(s.reserved, source->in_use());
    ASSERT_GE(s.allocated_peak, s.allocated);
    ASSERT_GE(s.reserved_peak, s.reserved);
  }
  // The program must have exercised both outcomes for the invariants to mean anything.
  EXPECT_GT(served, 1000);
  EXPECT_GT(ooms, 10);
  if (kind == AllocatorKind::caching) {
    EXPECT_GT(alloc->stats().retries, 0);
  }

  for (const Live& l : live) alloc->free(l.block);
  EXPECT_EQ(alloc->stats().allocated, 0);
  alloc->release_cached();
  EXPECT_EQ(alloc->stats().reserved, 0);
  EXPECT_EQ(source->in_use(), 0);
}

TEST(AllocRandom, CachingKeepsInvariants) {
  replay_random_program(AllocatorKind::caching);
}
TEST(AllocRandom, DirectKeepsInvariants) {
  replay_random_program(AllocatorKind::direct);
}

}  // namespace
}  // namespace vrambench
