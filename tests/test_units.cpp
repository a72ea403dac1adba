// Size parsing, formatting and checked arithmetic.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/units.h"

namespace vrambench {
namespace {

TEST(Units, ParsesBinaryDecimalAndBareSizes) {
  EXPECT_EQ(parse_bytes("24GiB"), 24 * GiB);
  EXPECT_EQ(parse_bytes("24GB"), 24'000'000'000);
  EXPECT_EQ(parse_bytes("16384MiB"), 16 * GiB);
  EXPECT_EQ(parse_bytes("24"), 24 * GiB);
  EXPECT_EQ(parse_bytes("20.5"), 20 * GiB + 512 * MiB);
  EXPECT_EQ(parse_bytes("64mib"), 64 * MiB);
  EXPECT_EQ(parse_bytes("100B"), 100);
}

TEST(Units, RejectsMalformedSizes) {
  EXPECT_THROW(parse_bytes(""), UsageError);
  EXPECT_THROW(parse_bytes("GiB"), UsageError);
  EXPECT_THROW(parse_bytes("12XB"), UsageError);
  EXPECT_THROW(parse_bytes("-4GiB"), UsageError);
  EXPECT_THROW(parse_bytes("0"), UsageError);
  EXPECT_THROW(parse_bytes("1e30GiB"), UsageError);
}

TEST(Units, FormatsForPeople) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536 * KiB), "1.5 MiB");
  EXPECT_EQ(format_bytes(80 * GiB), "80.00 GiB");
}

TEST(Units, CheckedArithmeticThrowsOnOverflow) {
  EXPECT_EQ(checked_mul(1 << 20, 1 << 20, "x"), std::int64_t{1} << 40);
  EXPECT_THROW(checked_mul(std::int64_t{1} << 40, std::int64_t{1} << 40, "x"), UsageError);
  EXPECT_THROW(checked_add(INT64_MAX, 1, "x"), UsageError);
}

}  // namespace
}  // namespace vrambench
