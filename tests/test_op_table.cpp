// The op table (program/ops.def): its rows are the signature table's, every kind has its own CPU
// adapter in the dispatch, and each row's adapter is defined in the file of the family the row
// names (the promise that a new kind touches its family's files alone).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "cpu/op_table.h"
#include "program/signature.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

struct Row {
  std::string_view kind, family;
};
// clang-format off
constexpr Row kRows[] = {
#define VB_OP(kind, family, ...) {#kind, #family},
#include "program/ops.def"
};
// clang-format on

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(OpTable, ItsRowsAreTheSignatureTable) {
  ASSERT_EQ(std::size(kRows), kOpKindCount);
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const OpSignature& s = signature(static_cast<OpKind>(k));
    EXPECT_EQ(s.kind, static_cast<OpKind>(k));
    EXPECT_EQ(s.name, kRows[k].kind);
    EXPECT_EQ(to_string(s.kind), kRows[k].kind);
  }
}

// The executor runs op kind k through cpu_run(k): a function of its own for every kind.
TEST(OpTable, EveryKindHasItsOwnCpuAdapter) {
  std::set<CpuRun> adapters;
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    const CpuRun run = cpu_run(static_cast<OpKind>(k));
    EXPECT_NE(run, nullptr) << kRows[k].kind;
    adapters.insert(run);
  }
  EXPECT_EQ(adapters.size(), kOpKindCount);
}

// A row's CPU adapter is defined in kernels/cpu/<family>.cpp, the file a new kind of the family is
// written in.
TEST(OpTable, EachRowsAdapterIsInItsFamilysFile) {
  const fs::path kernels = fs::path(VRAMBENCH_SOURCE_DIR) / "kernels";
  for (const Row& row : kRows) {
    const fs::path cpu_file = kernels / "cpu" / (std::string(row.family) + ".cpp");
    ASSERT_TRUE(fs::exists(cpu_file)) << row.kind << ": no " << cpu_file;
    EXPECT_NE(read(cpu_file).find("void cpu_run_" + std::string(row.kind) + "("), std::string::npos)
        << row.kind << ": its adapter is not in " << cpu_file;
  }
}

}  // namespace
}  // namespace vrambench
