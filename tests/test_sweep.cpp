// The --sweep grammar, its errors, and the Cartesian expansion of axes into configurations.
#include <gtest/gtest.h>

#include "config/fields.h"
#include "core/error.h"
#include "core/units.h"
#include "sweep/sweep.h"

namespace vrambench {
namespace {

using Values = std::vector<std::string>;

// The axis's values as the text parse_field reads back.
Values values_of(std::string_view text) {
  const Axis axis = parse_axis(text);
  Values out;
  for (const FieldValue& v : axis.values) out.push_back(field_text(find_field(axis.field), v));
  return out;
}

// The error must be one line, quote what was given and show a valid form.
std::string usage_error(std::string_view text) {
  try {
    parse_axis(text);
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("example: "), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "no UsageError for '" << text << "'";
  return {};
}

#define EXPECT_SWEEP_ERROR(text, part)                                                      \
  do {                                                                                      \
    const std::string message = usage_error(text);                                          \
    EXPECT_NE(message.find(part), std::string::npos) << message;                            \
    EXPECT_NE(message.find(std::string("'") + (text) + "'"), std::string::npos) << message; \
  } while (false)

TEST(SweepParse, DoublingRangeIsInclusive) {
  const Axis axis = parse_axis("seq=512..8192");
  EXPECT_EQ(axis.field, "seq");
  EXPECT_EQ(values_of("seq=512..8192"), (Values{"512", "1024", "2048", "4096", "8192"}));
  EXPECT_EQ(values_of("seq=512..512"), (Values{"512"}));
  // The end is a bound, not a value: 3000 is never reached by doubling 512.
  EXPECT_EQ(values_of("seq=512..3000"), (Values{"512", "1024", "2048"}));
}

TEST(SweepParse, AdditiveStep) {
  EXPECT_EQ(values_of("seq=512..4096:+512"),
            (Values{"512", "1024", "1536", "2048", "2560", "3072", "3584", "4096"}));
  EXPECT_EQ(values_of("batch=100..350:+100"), (Values{"100", "200", "300"}));
}

TEST(SweepParse, FactorEndIsInclusiveOnlyWhenHit) {
  EXPECT_EQ(values_of("seq=256..8192:*4"), (Values{"256", "1024", "4096"}));
  EXPECT_EQ(values_of("seq=256..4096:*4"), (Values{"256", "1024", "4096"}));
  EXPECT_EQ(values_of("layers=1..100:*10"), (Values{"1", "10", "100"}));
}

TEST(SweepParse, DoublingNearTheTopOfInt64DoesNotOverflow) {
  const Values values = values_of("seq=1..9223372036854775807");
  ASSERT_EQ(values.size(), 63u);
  EXPECT_EQ(values.back(), "4611686018427387904");  // 2^62
}

TEST(SweepParse, ListsKeepOrderAndDuplicates) {
  EXPECT_EQ(values_of("seq=512,1024,3000"), (Values{"512", "1024", "3000"}));
  EXPECT_EQ(values_of("seq=2048,512,2048"), (Values{"2048", "512", "2048"}));
  EXPECT_EQ(values_of("seq=777"), (Values{"777"}));
}

TEST(SweepParse, ListsOfChoicesPresetsAndSizesAreCanonical) {
  EXPECT_EQ(values_of("dtype=fp16,bf16"), (Values{"fp16", "bf16"}));
  EXPECT_EQ(values_of("recompute=none,full"), (Values{"none", "full"}));
  EXPECT_EQ(values_of("preset=gpt2,llama2-7b"), (Values{"gpt2", "llama2-7b"}));
  // Sizes are stored as raw bytes: 24 * 2^30 and 80 * 2^30.
  EXPECT_EQ(values_of("vram=24GiB,80GiB"), (Values{"25769803776B", "85899345920B"}));
  EXPECT_EQ(values_of("dropout=0,0.1"), (Values{"0", "0.1"}));
  EXPECT_EQ(values_of("device=cpu,sim:h100-80gb"), (Values{"cpu", "sim:h100-80gb"}));
}

TEST(SweepParse, FieldNamesAreCanonical) {
  EXPECT_EQ(parse_axis("kv_heads=1,2").field, "kv-heads");
  EXPECT_EQ(parse_axis("kv-heads=1,2").field, "kv-heads");
}

TEST(SweepParse, NvbenchRanges) {
  EXPECT_EQ(values_of("seq=[512:4096:512]"),
            (Values{"512", "1024", "1536", "2048", "2560", "3072", "3584", "4096"}));
  EXPECT_EQ(values_of("batch=[1:3]"), (Values{"1", "2", "3"}));
  EXPECT_EQ(values_of("batch=[1:10:4]"), (Values{"1", "5", "9"}));
  EXPECT_EQ(values_of("seq=[512,1024]"), (Values{"512", "1024"}));
}

TEST(SweepParse, NvbenchPowersOfTwo) {
  EXPECT_EQ(values_of("seq[pow2]=[9:13]"), (Values{"512", "1024", "2048", "4096", "8192"}));
  EXPECT_EQ(values_of("seq[pow2]=[9:13:2]"), (Values{"512", "2048", "8192"}));
  EXPECT_EQ(values_of("batch[pow2]=0,3"), (Values{"1", "8"}));
  EXPECT_EQ(parse_axis("seq[pow2]=[9:10]").field, "seq");
}

TEST(SweepParse, WhitespaceAroundTokensIsTolerated) {
  EXPECT_EQ(values_of("  seq = 512 .. 2048 : +512 "), (Values{"512", "1024", "1536", "2048"}));
  EXPECT_EQ(values_of(" dtype = fp16 , bf16 "), (Values{"fp16", "bf16"}));
  EXPECT_EQ(values_of("seq = [ 512 : 1024 : 512 ]"), (Values{"512", "1024"}));
  EXPECT_EQ(values_of("seq [pow2] = [ 9 : 10 ]"), (Values{"512", "1024"}));
}

TEST(SweepParse, ExactMessageForAReversedRange) {
  EXPECT_EQ(usage_error("seq=512..100"),
            "invalid --sweep 'seq=512..100': range end 100 is below start 512 "
            "(example: seq=512..8192)");
}

TEST(SweepParse, RejectsMalformedAxes) {
  EXPECT_SWEEP_ERROR("seq512", "expected FIELD=VALUES");
  EXPECT_SWEEP_ERROR("=512", "no field");
  EXPECT_SWEEP_ERROR("sequence=512", "unknown field 'sequence'");
  EXPECT_SWEEP_ERROR("seq=", "no values");
  EXPECT_SWEEP_ERROR("seq=512,,1024", "empty value");
  EXPECT_SWEEP_ERROR("seq=512,", "empty value");
  EXPECT_SWEEP_ERROR("seq=[512:4096", "unbalanced brackets");
  EXPECT_SWEEP_ERROR("seq[log]=[1:3]", "[pow2]");
}

TEST(SweepParse, RejectsBadSteps) {
  EXPECT_SWEEP_ERROR("seq=512..4096:+0", "+0");
  EXPECT_SWEEP_ERROR("seq=512..4096:*1", "*1");
  EXPECT_SWEEP_ERROR("seq=512..4096:*0", "*0");
  EXPECT_SWEEP_ERROR("seq=512..4096:512", "must be +N (add) or *N (multiply)");
  EXPECT_SWEEP_ERROR("seq=512..4096:", "empty step");
  EXPECT_SWEEP_ERROR("seq=512..4096:+x", "'+x' is not a whole number");
  EXPECT_SWEEP_ERROR("seq=[512:4096:0]", "step 0");
}

TEST(SweepParse, RejectsNonIntegerBounds) {
  EXPECT_SWEEP_ERROR("seq=abc..4096", "range start 'abc'");
  EXPECT_SWEEP_ERROR("seq=512..4k", "range end '4k'");
  EXPECT_SWEEP_ERROR("seq=1.5..8", "range start '1.5'");
  EXPECT_SWEEP_ERROR("seq=0..8", "range start '0'");
  EXPECT_SWEEP_ERROR("seq=..8", "range start is empty");
  EXPECT_SWEEP_ERROR("seq=[a:8]", "range start 'a'");
  EXPECT_SWEEP_ERROR("seq=512..99999999999999999999", "range end");
}

TEST(SweepParse, RangesOnlyForIntegerFields) {
  EXPECT_SWEEP_ERROR("dtype=1..4", "ranges need an integer field");
  EXPECT_SWEEP_ERROR("vram=1..4", "ranges need an integer field");
  EXPECT_SWEEP_ERROR("dropout=[0:1]", "ranges need an integer field");
  EXPECT_SWEEP_ERROR("preset[pow2]=[1:2]", "ranges need an integer field");
  // The example shows a list the field accepts.
  EXPECT_SWEEP_ERROR("dtype=1..4", "example: dtype=fp32,tf32,fp16,bf16");
}

TEST(SweepParse, RejectsValuesTheFieldRejects) {
  EXPECT_SWEEP_ERROR("dtype=fp16,fp8", "'fp8'");
  EXPECT_SWEEP_ERROR("preset=gpt2,gpt5", "'gpt5'");
  EXPECT_SWEEP_ERROR("seq=0,512", "'0'");
  EXPECT_SWEEP_ERROR("seq=512,1k", "'1k'");
  EXPECT_SWEEP_ERROR("vram=24GiB,lots", "'lots'");
  EXPECT_SWEEP_ERROR("dropout=0.1,1.5", "1.5");
}

TEST(SweepParse, LimitsTheNumberOfValues) {
  EXPECT_EQ(values_of("batch=1..100000:+1").size(), 100000u);
  EXPECT_SWEEP_ERROR("batch=1..100001:+1", "100001 values");
  EXPECT_SWEEP_ERROR("batch=[1:200000]", "200000 values");
  EXPECT_SWEEP_ERROR("seq=1..9223372036854775807:+1", "more than the 100000 allowed");
  EXPECT_SWEEP_ERROR("seq[pow2]=[9:63]", "2^63");
}

RunConfig base_config() {
  RunConfig base;
  base.seq = 777;
  base.batch = 3;
  return base;
}

TEST(SweepExpand, NoAxesGivesTheBase) {
  const std::vector<RunConfig> configs = expand(base_config(), {});
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_EQ(configs[0].seq, 777);
  EXPECT_EQ(configs[0].batch, 3);
}

TEST(SweepExpand, CartesianProductFirstAxisOutermost) {
  const std::vector<RunConfig> configs =
      expand(base_config(), {parse_axis("seq=512,1024,2048"), parse_axis("dtype=fp16,bf16")});
  ASSERT_EQ(configs.size(), 6u);
  const std::vector<std::pair<std::int64_t, Precision>> expected{
      {512, Precision::fp16},  {512, Precision::bf16},  {1024, Precision::fp16},
      {1024, Precision::bf16}, {2048, Precision::fp16}, {2048, Precision::bf16}};
  for (std::size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(configs[i].seq, expected[i].first) << i;
    EXPECT_EQ(configs[i].dtype, expected[i].second) << i;
    EXPECT_EQ(configs[i].batch, 3) << i;  // fields without an axis keep the base value
  }
}

TEST(SweepExpand, ThreeAxesCountAndLastAxisFastest) {
  const std::vector<RunConfig> configs =
      expand(base_config(),
             {parse_axis("batch=1,2"), parse_axis("seq=[1:3]"), parse_axis("recompute=none,full")});
  ASSERT_EQ(configs.size(), 12u);
  EXPECT_EQ(configs[0].recompute, Recompute::none);
  EXPECT_EQ(configs[1].recompute, Recompute::full);
  EXPECT_EQ(configs[1].seq, 1);
  EXPECT_EQ(configs[2].seq, 2);
  EXPECT_EQ(configs[5].batch, 1);
  EXPECT_EQ(configs[6].batch, 2);
  EXPECT_EQ(configs[6].seq, 1);
}

TEST(SweepExpand, PresetAxisIsAppliedBeforeModelFieldAxes) {
  // The hidden axis comes first in iteration order, yet overrides the preset's hidden size.
  const std::vector<RunConfig> configs =
      expand(base_config(), {parse_axis("hidden=1024,2048"), parse_axis("preset=gpt2,llama2-7b")});
  ASSERT_EQ(configs.size(), 4u);
  const std::vector<std::pair<std::int64_t, std::int64_t>> hidden_layers{
      {1024, 12}, {1024, 32}, {2048, 12}, {2048, 32}};  // gpt2 has 12 layers, llama2-7b 32
  for (std::size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(configs[i].model.hidden, hidden_layers[i].first) << i;
    EXPECT_EQ(configs[i].model.layers, hidden_layers[i].second) << i;
  }
  EXPECT_EQ(configs[0].model.arch, Arch::gpt);
  EXPECT_EQ(configs[1].model.arch, Arch::llama);
}

TEST(SweepExpand, ValuesRoundTripThroughGetField) {
  const std::vector<Axis> axes{parse_axis("vram=24GiB,80GiB"), parse_axis("kv_heads=4,8")};
  const std::vector<RunConfig> configs = expand(base_config(), axes);
  ASSERT_EQ(configs.size(), 4u);
  EXPECT_EQ(configs[0].vram, 24 * GiB);
  EXPECT_EQ(configs[3].vram, 80 * GiB);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(get_field(configs[i], find_field("vram")), axes[0].values[i / 2]);
    EXPECT_EQ(get_field(configs[i], find_field("kv-heads")), axes[1].values[i % 2]);
  }
}

TEST(SweepParse, ValuesAreTypedWhenTheAxisIsRead) {
  EXPECT_EQ(parse_axis("dtype=fp16,bf16").values,
            (std::vector<FieldValue>{Precision::fp16, Precision::bf16}));
  EXPECT_EQ(parse_axis("seq=512,1024").values,
            (std::vector<FieldValue>{std::int64_t{512}, std::int64_t{1024}}));
  EXPECT_EQ(parse_axis("vram=1GiB").values, (std::vector<FieldValue>{std::int64_t{GiB}}));
  EXPECT_EQ(parse_axis("dropout=0.25").values, (std::vector<FieldValue>{0.25}));
  EXPECT_EQ(parse_axis("device=sim:rtx4090").values,
            (std::vector<FieldValue>{DeviceChoice{DeviceChoice::Kind::sim, "rtx4090"}}));
  const Axis presets = parse_axis("preset=tiny");
  ASSERT_EQ(presets.values.size(), 1u);
  EXPECT_EQ(std::get<ModelConfig>(presets.values[0]).hidden, 64);
}

TEST(SweepExpand, RejectsTwoAxesOnOneField) {
  try {
    expand(base_config(),
           {parse_axis("kv-heads=1,2"), parse_axis("seq=1"), parse_axis("kv_heads=4")});
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("two axes on field 'kv-heads'"), std::string::npos) << message;
    EXPECT_NE(message.find("(example: kv-heads=512..8192)"), std::string::npos) << message;
  }
}

TEST(SweepExpand, RejectsAGridOverAMillionPoints) {
  try {
    expand(base_config(), {parse_axis("seq=[1:1000]"), parse_axis("batch=[1:1001]")});
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("1001000 points"), std::string::npos) << e.what();
  }
}

TEST(SweepExpand, RejectsAGridWhoseSizeOverflows) {
  // 100000^4 = 10^20 points does not fit in 64 bits; the message must still say it is too big.
  const std::vector<FieldValue> ones(100000, std::int64_t{1});
  const Axis wide{"seq", ones};
  const Axis wide_batch{"batch", ones};
  const Axis wide_layers{"layers", ones};
  const Axis wide_hidden{"hidden", ones};
  try {
    expand(base_config(), {wide, wide_batch, wide_layers, wide_hidden});
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 2^63 points"), std::string::npos) << e.what();
  }
}

TEST(SweepExpand, VaryingFieldsInAxisOrder) {
  const std::vector<Axis> axes{parse_axis("dtype=bf16"), parse_axis("seq=512..2048"),
                               parse_axis("kv_heads=4"), parse_axis("preset=gpt2,tiny")};
  EXPECT_EQ(varying_fields(axes), (Values{"seq", "preset"}));
  EXPECT_TRUE(varying_fields({}).empty());
}

}  // namespace
}  // namespace vrambench
