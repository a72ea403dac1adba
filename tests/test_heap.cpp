// keep_freed_memory (core/heap.h): a block freed and asked for again comes back without the kernel
// faulting its pages in a second time.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>

#include "core/heap.h"
#include "core/units.h"

namespace vrambench {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Page faults of allocating `bytes`, writing every page of it, and freeing it.
long faults_of_a_block(Bytes bytes) {
  const long before = minor_faults();
  auto* block = static_cast<volatile char*>(std::malloc(static_cast<std::size_t>(bytes)));
  if (block == nullptr) return -1;
  for (Bytes i = 0; i < bytes; i += 4096) block[i] = 1;
  std::free(const_cast<char*>(block));
  return minor_faults() - before;
}

#if defined(__GLIBC__)
TEST(Heap, AFreedBlockOfAFewMiBIsReusedWithoutFaultingItsPagesAgain) {
  constexpr Bytes kBlock = 8 * MiB;  // 2,048 pages; above glibc's default mapping threshold
  keep_freed_memory();
  ASSERT_GT(faults_of_a_block(kBlock), -1);
  // The second time the pages are the heap's already: a handful of faults at most, not 2,048.
  EXPECT_LT(faults_of_a_block(kBlock), 64);
}
#endif

}  // namespace
}  // namespace vrambench
