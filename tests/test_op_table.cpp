// The op table (program/ops.def): its rows are the signature table's, every kind has its own CPU
// adapter in the dispatch, each row's CPU adapter and CUDA launcher are defined in the files of the
// family the row names (the promise that a new kind touches its family's files alone), and each
// family's files carry one name on both sides. tests/gpu/test_cuda_op_table.cpp holds the CUDA
// dispatch, where the build has CUDA.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

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

// A row's CUDA launcher is defined in one of kernels/cuda/<family>*.cu/.cpp: the family's own file
// or one named after it (attention_cudnn.cpp runs the flash kinds through cuDNN).
TEST(OpTable, EachRowsCudaLauncherIsInItsFamilysFiles) {
  const fs::path cuda = fs::path(VRAMBENCH_SOURCE_DIR) / "kernels" / "cuda";
  for (const Row& row : kRows) {
    const std::string definition = "void cuda_run_" + std::string(row.kind) + "(";
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(cuda)) {
      const std::string name = entry.path().filename().string();
      const std::string ext = entry.path().extension().string();
      if (ext != ".cu" && ext != ".cpp") continue;
      if (read(entry.path()).find(definition) == std::string::npos) continue;
      found.push_back(name);
      EXPECT_EQ(name.rfind(std::string(row.family), 0), 0u)
          << row.kind << ": its launcher is in " << name << ", not a file of its family "
          << row.family;
    }
    EXPECT_EQ(found.size(), 1u) << row.kind << ": its launcher should be defined once under "
                                << cuda << ", found " << found.size();
  }
}

// Each family has one file name on both sides: kernels/cpu/<family>.cpp beside
// kernels/cuda/<family>.cu (or .cpp, host code of the CUDA side).
TEST(OpTable, EachFamilyHasOneNameOnBothSides) {
  const fs::path kernels = fs::path(VRAMBENCH_SOURCE_DIR) / "kernels";
  std::set<std::string> families;
  for (const Row& row : kRows) families.insert(std::string(row.family));
  for (const std::string& family : families) {
    EXPECT_TRUE(fs::exists(kernels / "cpu" / (family + ".cpp"))) << family << ": no cpu file";
    EXPECT_TRUE(fs::exists(kernels / "cuda" / (family + ".cu")) ||
                fs::exists(kernels / "cuda" / (family + ".cpp")))
        << family << ": no cuda file of that name";
  }
}

}  // namespace
}  // namespace vrambench
