// From command-line options to validated configurations.
#include <gtest/gtest.h>

#include "cli/options.h"
#include "config/fields.h"
#include "core/error.h"
#include "model/families.h"
#include "model/weights.h"

namespace vrambench {
namespace {

// The typed value of --name text, as the command line stores it.
FieldValue value(std::string_view name, std::string_view text) {
  return parse_field(find_field(name), text);
}

TEST(Options, BaseConfigAppliesPresetThenExplicitFields) {
  CliOptions o;
  o.fields = {{"layers", value("layers", "4")},
              {"preset", value("preset", "llama2-7b")},
              {"seq", value("seq", "2048")}};
  const RunConfig cfg = base_config(o);
  EXPECT_EQ(cfg.model.arch, Arch::llama);
  EXPECT_EQ(cfg.model.hidden, 4096);
  EXPECT_EQ(cfg.model.layers, 4);  // the explicit field wins over the preset
  EXPECT_EQ(cfg.seq, 2048);
}

TEST(Options, DefaultModelIsGpt2) {
  const RunConfig cfg = base_config(CliOptions{});
  EXPECT_EQ(parameter_count(cfg.model), 124'439'808);
}

TEST(Options, CustomLlamaUnties) {
  CliOptions o;
  o.fields = {{"arch", value("arch", "llama")}};
  EXPECT_FALSE(base_config(o).model.tied_embeddings);
}

TEST(Options, FormatsParseAnySubset) {
  const Formats f = parse_formats("csv,md");
  EXPECT_TRUE(f.csv);
  EXPECT_TRUE(f.markdown);
  EXPECT_FALSE(f.json);
  EXPECT_THROW(parse_formats("csv,xml"), UsageError);
  EXPECT_THROW(parse_formats(""), UsageError);
}

TEST(Options, GridValidatesEveryPointAndNamesTheBadOne) {
  CliOptions o;
  o.fields = {{"hidden", value("hidden", "768")}};
  o.sweeps = {parse_axis("heads=12,7")};
  try {
    make_grid(o);
    FAIL() << "heads=7 does not divide 768";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--heads 7"), std::string::npos) << what;
    EXPECT_NE(what.find("heads=7"), std::string::npos) << what;
  }
}

TEST(Options, GridExpandsTheCartesianProduct) {
  CliOptions o;
  o.sweeps = {parse_axis("seq=512..2048"), parse_axis("dtype=fp16,bf16")};
  const Grid g = make_grid(o);
  ASSERT_EQ(g.configs.size(), 6u);
  EXPECT_EQ(g.varying, (std::vector<std::string>{"seq", "dtype"}));
  EXPECT_EQ(g.configs[0].seq, 512);
  EXPECT_EQ(g.configs[1].dtype, Precision::bf16);
  EXPECT_EQ(g.configs[5].seq, 2048);
}

}  // namespace
}  // namespace vrambench
