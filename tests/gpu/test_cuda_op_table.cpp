// The CUDA side of the op table (kernels/cuda/op_table.h), checked without a GPU: the executor runs
// op kind k through cuda_run(k), a launcher of its own for every kind (a row without one does not
// link: the dispatch takes the address of every row's cuda_run_<kind>).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <stdexcept>

#include "cuda/op_table.h"
#include "program/signature.h"

namespace vrambench {
namespace {

TEST(CudaOpTable, EveryKindHasItsOwnLauncher) {
  std::set<CudaRun> launchers;
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const CudaRun run = cuda_run(kind);
    EXPECT_NE(run, nullptr) << to_string(kind);
    launchers.insert(run);
  }
  EXPECT_EQ(launchers.size(), kOpKindCount);
}

TEST(CudaOpTable, AKindPastTheTableHasNoLauncher) {
  EXPECT_THROW(cuda_run(static_cast<OpKind>(kOpKindCount)), std::out_of_range);
}

// A column block of a row is found by elements of the operand's dtype, not by bytes.
TEST(CudaOpTable, ElementOffsetCountsElementsOfTheDtype) {
  alignas(8) unsigned char row[64] = {};
  const void* base = row;
  EXPECT_EQ(cuda::element_offset(base, 3, DType::bf16), static_cast<const void*>(row + 6));
  EXPECT_EQ(cuda::element_offset(base, 3, DType::f32), static_cast<const void*>(row + 12));
  void* mut = row;
  EXPECT_EQ(cuda::element_offset(mut, 0, DType::f16), mut);
}

}  // namespace
}  // namespace vrambench
