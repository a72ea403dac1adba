// The command line as a library (cli/app.h): a command's output goes to the streams it is given,
// and a mistake is thrown, not printed, so that a caller other than the program (the Python
// module) can keep both.
#include <gtest/gtest.h>
#include <stdio.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/app.h"
#include "core/error.h"

namespace vrambench {
namespace {

// A stream kept in memory, read back once closed.
class Captured {
 public:
  Captured() : file_(open_memstream(&data_, &size_)) {}
  Captured(const Captured&) = delete;
  Captured& operator=(const Captured&) = delete;
  ~Captured() {
    close();
    std::free(data_);
  }
  std::FILE* file() const { return file_; }
  std::string text() {
    close();
    return data_ ? std::string(data_, size_) : std::string();
  }

 private:
  void close() {
    if (file_) std::fclose(file_);
    file_ = nullptr;
  }
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_ = nullptr;
};

struct Ran {
  int code;
  std::string out, err;
};

Ran run(const std::vector<std::string>& args) {
  Captured out, err;
  const int code = run_cli(args, {out.file(), err.file()});
  return {code, out.text(), err.text()};
}

TEST(App, ACommandPrintsToTheStreamsItIsGiven) {
  const Ran presets = run({"presets"});
  EXPECT_EQ(presets.code, 0);
  EXPECT_NE(presets.out.find("llama2-7b"), std::string::npos) << presets.out;
  EXPECT_EQ(presets.err, "");

  const Ran plan = run({"plan", "--preset", "gpt2", "--vram", "24GiB", "--target-batch", "8",
                        "--emit", "json", "--quiet"});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const nlohmann::json j = nlohmann::json::parse(plan.out);
  EXPECT_EQ(j["target_batch"], 8);
  EXPECT_EQ(j["plan"]["micro_batch"].get<int>() * j["plan"]["grad_accum"].get<int>(), 8);
}

TEST(App, OptionsFirstMeanSearch) {
  const Ran search = run(
      {"--preset", "gpt2", "--device", "sim:rtx4090", "--seq", "256", "--format", "md", "--quiet"});
  EXPECT_EQ(search.code, 0) << search.err;
  EXPECT_NE(search.out.find("| max batch |"), std::string::npos) << search.out;
}

TEST(App, HelpAndVersionPrintToTheOutputStream) {
  const Ran help = run({"plan", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--target-batch"), std::string::npos);
  const Ran version = run({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.out.rfind("vrambench ", 0), 0u) << version.out;
}

TEST(App, AMistakeIsThrownWithTheLineTheProgramPrints) {
  Captured out, err;
  // A line CLI11 refuses, a configuration validate() refuses, a request plan refuses.
  EXPECT_THROW(run_cli({"plan", "--no-such-option"}, {out.file(), err.file()}), CommandLineError);
  try {
    run_cli({"plan", "--preset", "gpt2", "--heads", "5"}, {out.file(), err.file()});
    FAIL() << "heads that do not divide hidden";
  } catch (const CommandLineError&) {
    FAIL() << "a configuration's mistake is not CLI11's";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "invalid --heads 5: must divide --hidden 768");
  }
  EXPECT_THROW(run_cli({"plan", "--preset", "gpt2", "--emit", "yaml"}, {out.file(), err.file()}),
               UsageError);
  // Nothing was printed for them: the caller says it.
  EXPECT_EQ(out.text(), "");
  EXPECT_EQ(err.text(), "");
}

}  // namespace
}  // namespace vrambench
