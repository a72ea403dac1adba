// Quantised weights and 8-bit AdamW state (core/quant.h): the sizes worked out by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/units.h"

namespace vrambench {
namespace {

// ---- sizes -------------------------------------------------------------------------------------

TEST(QuantSizes, Nf4SquareWeightWithAndWithoutDoubleQuant) {
  // 4096 x 4096 = 16,777,216 weights: 4 bits each = 8 MiB of codes; 16,777,216 / 64 = 262,144
  // blocks, an fp32 absmax each = 1 MiB; the 16-entry fp32 code table = 64 bytes.
  const std::int64_t n = 4096LL * 4096;
  const QuantizedWeightBytes single = quantized_weight_bytes(n, 4096, QuantKind::nf4, false);
  EXPECT_EQ(single.data, 8 * MiB);
  EXPECT_EQ(single.absmax, 1 * MiB);
  EXPECT_EQ(single.absmax2, 0);
  EXPECT_EQ(single.code_and_offset, 64);
  EXPECT_EQ(single.total, 8 * MiB + 1 * MiB + 64);  // 9,437,248
  EXPECT_EQ(single.nested_absmax_transient, 0);
  // Double quant: the 262,144 absmax become one byte each (256 KiB); 262,144 / 256 = 1,024
  // second-level fp32 absmax = 4,096 bytes; constants 64 (4-bit table) + 1,024 (256-entry fp32
  // dynamic map) + 4 (offset) = 1,092. Total 8,388,608 + 262,144 + 4,096 + 1,092 = 8,655,940.
  const QuantizedWeightBytes nested = quantized_weight_bytes(n, 4096, QuantKind::nf4, true);
  EXPECT_EQ(nested.data, 8 * MiB);
  EXPECT_EQ(nested.absmax, 256 * KiB);
  EXPECT_EQ(nested.absmax2, 4096);
  EXPECT_EQ(nested.code_and_offset, 1092);
  EXPECT_EQ(nested.total, 8655940);
  EXPECT_EQ(nested.nested_absmax_transient, 1 * MiB);
  // 8,655,940 * 8 / 16,777,216 = 4.127 bits per weight: 4 + 8/64 + 32/(64*256), as QLoRA says.
  EXPECT_NEAR(static_cast<double>(nested.total) * 8.0 / static_cast<double>(n), 4.127, 1e-3);
  // FP4 stores the same amounts.
  EXPECT_EQ(quantized_weight_bytes(n, 4096, QuantKind::fp4, true), nested);
  EXPECT_EQ(quantized_weight_bytes(n, 4096, QuantKind::fp4, false), single);
}

TEST(QuantSizes, Int8AndNone) {
  // 1 byte per weight plus an fp32 per output row: 16,777,216 + 4,096 * 4 = 16,793,600.
  const QuantizedWeightBytes q = quantized_weight_bytes(4096LL * 4096, 4096, QuantKind::int8, true);
  EXPECT_EQ(q.data, 16 * MiB);
  EXPECT_EQ(q.absmax, 16 * KiB);
  EXPECT_EQ(q.absmax2, 0);
  EXPECT_EQ(q.code_and_offset, 0);
  EXPECT_EQ(q.total, 16793600);
  // down_proj of llama2-7b: 4096 output rows of 11008.
  EXPECT_EQ(quantized_weight_bytes(4096LL * 11008, 4096, QuantKind::int8, false).absmax, 16384);
  EXPECT_EQ(quantized_weight_bytes(4096LL * 4096, 4096, QuantKind::none, true),
            QuantizedWeightBytes{});
}

TEST(QuantSizes, PartialBlocksRoundUp) {
  // 3 x 5 = 15 weights: 8 bytes of codes (the last low nibble pads), one block.
  const QuantizedWeightBytes small = quantized_weight_bytes(15, 3, QuantKind::nf4, true);
  EXPECT_EQ(small.data, 8);
  EXPECT_EQ(small.absmax, 1);
  EXPECT_EQ(small.absmax2, 4);
  // 65 weights are two blocks; 257 blocks (16,448 weights) are two second-level blocks.
  EXPECT_EQ(quantized_weight_bytes(65, 1, QuantKind::nf4, false).absmax, 8);
  EXPECT_EQ(quantized_weight_bytes(257 * 64, 1, QuantKind::nf4, true).absmax2, 8);
  EXPECT_EQ(quantized_weight_bytes(256 * 64, 1, QuantKind::nf4, true).absmax2, 4);
  EXPECT_EQ(quant_blocks(0, 64), 0);
  EXPECT_EQ(quant_blocks(std::numeric_limits<std::int64_t>::max(), 64),
            std::numeric_limits<std::int64_t>::max() / 64 + 1);
}

TEST(QuantSizes, Llama2SevenBillionBlockLinears) {
  // 32 layers x 7 linears: q, k, v, o [4096 x 4096] = 16,777,216 weights; gate, up [11008 x 4096]
  // and down [4096 x 11008] = 45,088,768 weights.
  struct Linear {
    std::int64_t rows, cols;
  };
  const Linear layer[] = {{4096, 4096},  {4096, 4096},  {4096, 4096}, {4096, 4096},
                          {11008, 4096}, {11008, 4096}, {4096, 11008}};
  auto total = [&](QuantKind kind, bool double_quant) {
    Bytes sum = 0;
    for (int l = 0; l < 32; ++l)
      for (const Linear& lin : layer)
        sum += quantized_weight_bytes(lin.rows * lin.cols, lin.rows, kind, double_quant).total;
    return sum;
  };
  // NF4: a square linear 9,437,248 (above); a 45,088,768-weight one 22,544,384 codes + 704,512
  // blocks * 4 = 2,818,048 absmax + 64 = 25,362,496. Per layer 4 * 9,437,248 + 3 * 25,362,496
  // = 113,836,480; 32 layers 3,642,767,360.
  EXPECT_EQ(total(QuantKind::nf4, false), 3642767360LL);
  // Double quant: 8,655,940 (above) and 22,544,384 + 704,512 + ceil(704,512 / 256) = 2,752 * 4
  // = 11,008 + 1,092 = 23,260,996. Per layer 4 * 8,655,940 + 3 * 23,260,996 = 104,406,748;
  // 32 layers 3,341,015,936 (the 6,476,005,376 weights at 4.127 bits).
  EXPECT_EQ(total(QuantKind::nf4, true), 3341015936LL);
  // int8: the 6,476,005,376 weights plus 4 bytes per output row: per layer 4 * 4,096 + 2 * 11,008
  // + 4,096 = 42,496 rows = 169,984 bytes, 32 layers 5,439,488.
  EXPECT_EQ(total(QuantKind::int8, false), 6476005376LL + 5439488LL);
}

TEST(QuantSizes, TensorsAreTheSeparateAllocations) {
  const std::int64_t n = 4096LL * 4096;
  const std::vector<QuantizedTensor> nested =
      quantized_weight_tensors(n, 4096, QuantKind::nf4, true);
  const std::vector<QuantizedTensor> want = {{"weight", 8 * MiB},     {"quant_map", 64},
                                             {"offset", 4},           {"absmax", 256 * KiB},
                                             {"nested_absmax", 4096}, {"nested_quant_map", 1024}};
  EXPECT_EQ(nested, want);
  const std::vector<QuantizedTensor> single =
      quantized_weight_tensors(n, 4096, QuantKind::fp4, false);
  const std::vector<QuantizedTensor> want_single = {
      {"weight", 8 * MiB}, {"absmax", 1 * MiB}, {"quant_map", 64}};
  EXPECT_EQ(single, want_single);
  const std::vector<QuantizedTensor> int8 =
      quantized_weight_tensors(n, 4096, QuantKind::int8, false);
  const std::vector<QuantizedTensor> want_int8 = {{"weight", 16 * MiB}, {"row_absmax", 16 * KiB}};
  EXPECT_EQ(int8, want_int8);
  EXPECT_TRUE(quantized_weight_tensors(n, 4096, QuantKind::none, false).empty());
}

TEST(QuantSizes, RejectsBadShapesAndOverflow) {
  EXPECT_THROW(quantized_weight_bytes(-1, 1, QuantKind::nf4, false), UsageError);
  EXPECT_THROW(quantized_weight_bytes(10, 3, QuantKind::int8, false), UsageError);
  EXPECT_THROW(quantized_weight_bytes(10, 0, QuantKind::int8, false), UsageError);
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  EXPECT_THROW(quantized_weight_bytes(huge, huge, QuantKind::int8, false), UsageError);
  EXPECT_THROW(optimizer8bit_state_bytes(-1), UsageError);
  EXPECT_THROW(optimizer8bit_state_bytes(huge / 2 + 1), UsageError);  // 2 bytes each overflows
}

TEST(QuantSizes, Optimizer8bitStateAndItsThreshold) {
  // 10,000 elements: m and v one byte each = 20,000; ceil(10,000 / 256) = 40 blocks, two fp32
  // absmax each = 320; 20,320 in all.
  const Optimizer8bitStateBytes s = optimizer8bit_state_bytes(10000);
  EXPECT_TRUE(s.eight_bit);
  EXPECT_EQ(s.moments, 20000);
  EXPECT_EQ(s.absmax, 320);
  EXPECT_EQ(s.total, 20320);
  EXPECT_FALSE(s.moments_paged);
  // min_8bit_size = 4096 is the first 8-bit size: 8,192 + 16 blocks * 8 = 8,320 bytes; one
  // element fewer keeps fp32 m and v: 4,095 * 8 = 32,760 bytes.
  EXPECT_EQ(optimizer8bit_state_bytes(4096).total, 8320);
  EXPECT_TRUE(optimizer_state_is_8bit(4096));
  const Optimizer8bitStateBytes below = optimizer8bit_state_bytes(4095);
  EXPECT_FALSE(below.eight_bit);
  EXPECT_FALSE(optimizer_state_is_8bit(4095));
  EXPECT_EQ(below.moments, 32760);
  EXPECT_EQ(below.absmax, 0);
  EXPECT_EQ(below.total, 32760);
  // A large tensor: 2 + 8/256 = 2.03125 bytes per parameter (facts.md: ~2.03).
  const std::int64_t big = std::int64_t{1} << 20;
  EXPECT_EQ(optimizer8bit_state_bytes(big).total, 2 * big + big / 256 * 8);
  // Paged: m and v page from 100,000 elements on (1e5 in get_state_buffer), not below.
  EXPECT_TRUE(optimizer8bit_state_bytes(100000, true).moments_paged);
  EXPECT_FALSE(optimizer8bit_state_bytes(99999, true).moments_paged);
  EXPECT_FALSE(optimizer8bit_state_bytes(100000, false).moments_paged);
  EXPECT_EQ(kOptimizer8bitMapBytes, 2048);
}

}  // namespace
}  // namespace vrambench
