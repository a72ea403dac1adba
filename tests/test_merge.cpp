// Shards of a sweep and their merge: K/N, which rows a shard runs, the merge order and what it
// refuses.
#include <gtest/gtest.h>

#include "core/error.h"
#include "report/merge.h"
#include "sweep/shard.h"

namespace vrambench {
namespace {

TEST(Shard, ParsesKOfNFromZero) {
  EXPECT_EQ(parse_shard("0/4"), (Shard{0, 4}));
  EXPECT_EQ(parse_shard("3/4"), (Shard{3, 4}));
  for (const char* bad : {"4/4", "-1/4", "1/0", "1", "a/b", "1/2/3", "/2", "1/"})
    EXPECT_THROW(parse_shard(bad), UsageError) << bad;
}

TEST(Shard, EveryConfigurationInExactlyOneShard) {
  for (std::int64_t total : {0, 1, 5, 7, 120}) {
    std::vector<int> seen(static_cast<std::size_t>(total), 0);
    std::int64_t rows = 0;
    for (std::int64_t k = 0; k < 3; ++k) {
      const Shard shard{k, 3};
      std::int64_t mine = 0;
      for (std::int64_t i = 0; i < total; ++i)
        if (in_shard(shard, static_cast<std::size_t>(i))) {
          EXPECT_EQ(grid_index(shard, mine), i);
          ++mine;
          ++seen[static_cast<std::size_t>(i)];
        }
      EXPECT_EQ(shard_size(shard, total), mine) << total << " " << k;
      rows += mine;
    }
    EXPECT_EQ(rows, total);
    for (int n : seen) EXPECT_EQ(n, 1);
  }
}

TEST(Merge, CommandWordsDropWhereARunWritesAndItsShard) {
  Shard shard;
  EXPECT_EQ(
      command_words("build/vrambench search --sweep 'seq=[512:4096:512]' --shard 1/3 --out "
                    "parts --name=p1 --quiet --resume --format csv,json --jobs 4 --device cpu",
                    &shard),
      (std::vector<std::string>{"search", "--sweep", "seq=[512:4096:512]", "--device", "cpu"}));
  EXPECT_EQ(shard, (Shard{1, 3}));
}

ResultFile part(const std::string& shard, std::vector<std::int64_t> seqs,
                const std::string& sweep = "seq=1..5:+1") {
  ResultFile file;
  file.path = "part-" + shard + ".json";
  file.table.columns = {{"seq", "seq", CellKind::integer},
                        {"est_max_batch", "est", CellKind::integer}};
  for (std::int64_t seq : seqs) file.table.add_row({Cell::of_int(seq), Cell::of_int(100 / seq)});
  Provenance p{"0.1.0",
               "abc",
               "sim:h100-80gb",
               "2026-01-01T00:00:00Z",
               "vrambench estimate --sweep " + sweep + " --shard " + shard + " --out x",
               {}};
  file.provenance = p;
  file.summary = {{"min_est_max_batch", 1}, {"max_est_max_batch", 100}};
  return file;
}

TEST(Merge, InterleavesTheShardsInTheOrderOfTheSweep) {
  const MergedResult merged = merge_shards({part("1/2", {2, 4}), part("0/2", {1, 3, 5})});
  ASSERT_EQ(merged.table.rows.size(), 5u);
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(merged.table.rows[i][0].integer, i + 1);
  EXPECT_EQ(merged.shards, 2);
  EXPECT_EQ(merged.provenance.command_line, "vrambench estimate --sweep seq=1..5:+1");
  EXPECT_NE(merged.provenance.extra.at("merged_from").find("part-0/2.json"), std::string::npos);
}

TEST(Merge, RefusesPartsOfAnotherCommandVersionOrDeviceAndIncompleteSets) {
  EXPECT_THROW(merge_shards({part("0/2", {1, 3, 5}), part("1/2", {2, 4}, "seq=1..9:+1")}),
               UsageError);
  ResultFile other_version = part("1/2", {2, 4});
  other_version.provenance["git_commit"] = "def";
  EXPECT_THROW(merge_shards({part("0/2", {1, 3, 5}), other_version}), UsageError);
  ResultFile other_device = part("1/2", {2, 4});
  other_device.provenance["device"] = "cpu";
  EXPECT_THROW(merge_shards({part("0/2", {1, 3, 5}), other_device}), UsageError);
  EXPECT_THROW(merge_shards({part("0/2", {1, 3, 5})}), UsageError);  // 1/2 missing
  EXPECT_THROW(merge_shards({part("0/2", {1, 3, 5}), part("0/2", {1, 3, 5})}), UsageError);
  EXPECT_THROW(merge_shards({part("0/2", {1, 3}), part("1/2", {2, 4, 6})}), UsageError);
  ResultFile csv = part("1/2", {2, 4});
  csv.provenance = nullptr;  // a CSV has no provenance
  EXPECT_THROW(merge_shards({part("0/2", {1, 3, 5}), csv}), UsageError);
}

}  // namespace
}  // namespace vrambench
