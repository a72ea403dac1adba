// compare: the join on configuration columns, the tolerances, rows in one file only, bad input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "report/compare.h"

namespace vrambench {
namespace {

ResultFile table_of(const std::string& path, std::vector<std::vector<std::string>> rows,
                    std::vector<std::string> keys = {"seq", "dtype", "sim_max_batch",
                                                     "sim_peak_bytes", "note"}) {
  ResultFile file;
  file.path = path;
  for (const std::string& key : keys) file.table.columns.push_back({key, key, CellKind::text});
  for (const auto& row : rows) {
    std::vector<Cell> cells;
    for (const std::string& text : row) cells.push_back(Cell::of_text(text));
    file.table.add_row(std::move(cells));
  }
  return file;
}

const ResultFile kBase = table_of("base.csv", {{"512", "bf16", "40", "1000", ""},
                                               {"1024", "bf16", "20", "2000", ""},
                                               {"512", "fp16", "40", "1000", ""}});

TEST(Compare, ConfigurationColumnsAreTheFieldNames) {
  Table t;
  t.columns = {{"seq", "seq", CellKind::integer},
               {"vram_bytes", "vram", CellKind::bytes},
               {"kv-heads", "kv-heads", CellKind::integer},
               {"est_max_batch", "est", CellKind::integer},
               {"note", "note", CellKind::text}};
  EXPECT_EQ(configuration_columns(t), (std::vector<std::string>{"seq", "vram_bytes", "kv-heads"}));
}

TEST(Compare, SameTablesInAnotherOrderPass) {
  const ResultFile fresh = table_of("new.csv", {{"512", "fp16", "40", "1000", "moved note"},
                                                {"512", "bf16", "40", "1000", ""},
                                                {"1024", "bf16", "20", "2000", ""}});
  const Comparison c = compare_results(kBase, fresh, {});
  EXPECT_TRUE(c.passed());
  EXPECT_EQ(c.matched, 3);
  EXPECT_EQ(c.compared, (std::vector<std::string>{"sim_max_batch", "sim_peak_bytes"}));
  EXPECT_TRUE(c.table.rows.empty());  // only rows out of tolerance are shown
  EXPECT_EQ(compare_results(kBase, fresh, {0, 0, true}).table.rows.size(), 3u);
}

TEST(Compare, APeakBeyondTheToleranceFailsNamingTheRow) {
  const ResultFile fresh = table_of("new.csv", {{"512", "bf16", "40", "1000", ""},
                                                {"1024", "bf16", "20", "2100", ""},
                                                {"512", "fp16", "40", "1000", ""}});
  const Comparison strict = compare_results(kBase, fresh, {});
  EXPECT_FALSE(strict.passed());
  EXPECT_EQ(strict.out_of_tolerance, 1);
  ASSERT_EQ(strict.table.rows.size(), 1u);
  EXPECT_EQ(strict.table.rows[0][0].text, "1024");
  EXPECT_EQ(strict.table.rows[0][1].text, "bf16");
  EXPECT_EQ(strict.table.rows[0][3].text, "+5%");
  EXPECT_EQ(strict.table.rows[0][4].text, "sim peak +5%");
  const std::string text = format_comparison(strict, kBase, fresh, {});
  EXPECT_NE(text.find("| 1024 | bf16"), std::string::npos) << text;
  EXPECT_NE(text.find("1 of 3 matched rows out of tolerance"), std::string::npos) << text;
  EXPECT_TRUE(compare_results(kBase, fresh, {5.0, 0, false}).passed());
  EXPECT_FALSE(compare_results(kBase, fresh, {4.9, 0, false}).passed());
}

// A sim table's peaks are its allocated and reserved ones; the formula's max batch and peak are
// figures too. Errors (formula_vs_est) are not compared: they follow from the figures.
TEST(Compare, ASimTablesPeaksAndTheFormulasAreCompared) {
  const std::vector<std::string> keys{"seq",
                                      "sim_max_batch",
                                      "allocated_peak_bytes",
                                      "reserved_peak_bytes",
                                      "sim_next_peak_bytes",
                                      "formula_max_batch",
                                      "formula_peak_bytes",
                                      "formula_vs_est",
                                      "note"};
  const ResultFile base =
      table_of("base.csv", {{"512", "40", "900", "1000", "1100", "38", "1050", "0.05", ""}}, keys);
  const auto moved = [&](std::size_t column, const std::string& value) {
    std::vector<std::string> row{"512", "40", "900", "1000", "1100", "38", "1050", "0.05", ""};
    row[column] = value;
    return compare_results(base, table_of("new.csv", {row}, keys), {});
  };
  EXPECT_EQ(
      moved(0, "512").compared,
      (std::vector<std::string>{"sim_max_batch", "allocated_peak_bytes", "reserved_peak_bytes",
                                "formula_max_batch", "formula_peak_bytes"}));
  EXPECT_TRUE(moved(0, "512").passed());
  EXPECT_EQ(moved(2, "990").table.rows.at(0).back().text, "allocated peak +10%");
  EXPECT_EQ(moved(3, "1100").table.rows.at(0).back().text, "reserved peak +10%");
  EXPECT_EQ(moved(5, "37").table.rows.at(0).back().text, "formula max batch 38 → 37");
  EXPECT_EQ(moved(6, "1155").table.rows.at(0).back().text, "formula peak +10%");
  EXPECT_TRUE(moved(7, "0.06").passed());
}

TEST(Compare, AMaxBatchBeyondTheBatchToleranceFails) {
  const ResultFile fresh = table_of("new.csv", {{"512", "bf16", "38", "1000", ""},
                                                {"1024", "bf16", "20", "2000", ""},
                                                {"512", "fp16", "40", "1000", ""}});
  const Comparison c = compare_results(kBase, fresh, {});
  ASSERT_EQ(c.table.rows.size(), 1u);
  EXPECT_EQ(c.table.rows[0][2].text, "40 → 38");
  EXPECT_FALSE(compare_results(kBase, fresh, {0, 1, false}).passed());
  EXPECT_TRUE(compare_results(kBase, fresh, {0, 2, false}).passed());
}

TEST(Compare, AValueGoneOrRowsInOneFileOnlyFail) {
  const ResultFile fresh = table_of("new.csv", {{"512", "bf16", "40", "", ""},
                                                {"2048", "bf16", "10", "3000", ""},
                                                {"512", "fp16", "40", "1000", ""}});
  const Comparison c = compare_results(kBase, fresh, {100, 100, false});
  EXPECT_EQ(c.out_of_tolerance, 1);  // a peak that is gone is out of any tolerance
  EXPECT_EQ(c.only_in_base, (std::vector<std::string>{"seq=1024 dtype=bf16"}));
  EXPECT_EQ(c.only_in_new, (std::vector<std::string>{"seq=2048 dtype=bf16"}));
  EXPECT_FALSE(c.passed());
  const std::string text = format_comparison(c, kBase, fresh, {100, 100, false});
  EXPECT_NE(text.find("Only in base.csv:\n  seq=1024 dtype=bf16"), std::string::npos) << text;
}

// A figure one file has and the other lacks is named and fails the comparison: it was skipped,
// and two tables that could not be compared on it were "same".
TEST(Compare, AFigureColumnInOneFileOnlyIsNamedAndFails) {
  const ResultFile fresh = table_of(
      "new.csv", {{"512", "bf16", "40", ""}, {"1024", "bf16", "20", ""}, {"512", "fp16", "40", ""}},
      {"seq", "dtype", "sim_max_batch", "note"});
  const Comparison c = compare_results(kBase, fresh, {});
  EXPECT_EQ(c.compared, (std::vector<std::string>{"sim_max_batch"}));
  EXPECT_EQ(c.columns_only_in_base, (std::vector<std::string>{"sim_peak_bytes"}));
  EXPECT_TRUE(c.columns_only_in_new.empty());
  EXPECT_FALSE(c.passed());
  const std::string text = format_comparison(c, kBase, fresh, {});
  EXPECT_NE(text.find("not compared, only in base.csv: sim_peak_bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("DIFFERENT"), std::string::npos) << text;
  const Comparison reversed = compare_results(fresh, kBase, {});
  EXPECT_EQ(reversed.columns_only_in_new, (std::vector<std::string>{"sim_peak_bytes"}));
  EXPECT_FALSE(reversed.passed());
}

// Key columns are only those the sweep varied: tables of another preset, device or recipe join on
// seq alone. Their provenances say so, on the first line; another command, device or framework
// fails, another tool version (what a regression check compares) is only said.
TEST(Compare, ProvenanceThatDiffersIsTheFirstLine) {
  const auto with = [](ResultFile file, const std::string& command, const std::string& device,
                       const std::string& version) {
    file.provenance = Provenance{version,
                                 "abc",
                                 device,
                                 "2026-01-01T00:00:00Z",
                                 "vrambench search --device " + command + " --out x --name y",
                                 {{"framework", "hf"}}};
    return file;
  };
  const ResultFile base =
      with(kBase, "sim:rtx4090", "sim:rtx4090 (GeForce RTX 4090 24GB)", "0.1.0");
  ResultFile same = with(kBase, "sim:rtx4090", "sim:rtx4090 (GeForce RTX 4090 24GB)", "0.1.0");
  same.path = "new.json";
  same.provenance["git_commit"] = "def";
  same.provenance["command_line"] = "vrambench search --device sim:rtx4090 --out z --name w";
  EXPECT_TRUE(compare_results(base, same, {}).passed());
  EXPECT_TRUE(compare_results(base, same, {}).provenance.empty());

  ResultFile newer = same;
  newer.provenance["tool_version"] = "0.2.0";
  const Comparison version = compare_results(base, newer, {});
  EXPECT_TRUE(version.passed());
  const std::string version_text = format_comparison(version, base, newer, {});
  EXPECT_EQ(version_text.substr(0, version_text.find('\n')),
            "base.csv and new.json differ in provenance: tool_version 0.1.0 vs 0.2.0");

  const ResultFile h100 = with(kBase, "sim:h100-80gb", "sim:h100-80gb (H100 SXM 80GB)", "0.1.0");
  const Comparison device = compare_results(base, h100, {});
  EXPECT_FALSE(device.passed());
  const std::string text = format_comparison(device, base, h100, {});
  const std::string first = text.substr(0, text.find('\n'));
  EXPECT_NE(first.find("command `vrambench search --device sim:rtx4090` vs `vrambench search "
                       "--device sim:h100-80gb`"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("device sim:rtx4090 (GeForce RTX 4090 24GB) vs sim:h100-80gb"),
            std::string::npos)
      << first;
  EXPECT_NE(text.find("rows of other configurations"), std::string::npos) << text;

  ResultFile lean = same;
  lean.provenance["extra"]["framework"] = "lean";
  EXPECT_FALSE(compare_results(base, lean, {}).passed());
  // A CSV has no provenance: nothing to say.
  EXPECT_TRUE(compare_results(kBase, same, {}).provenance.empty());
}

TEST(Compare, BadInputIsAUsageError) {
  // Other configuration columns.
  EXPECT_THROW(compare_results(kBase,
                               table_of("new.csv", {{"512", "40", "1000", ""}},
                                        {"seq", "sim_max_batch", "sim_peak_bytes", "note"}),
                               {}),
               UsageError);
  // A configuration twice.
  EXPECT_THROW(compare_results(kBase,
                               table_of("new.csv", {{"512", "bf16", "40", "1000", ""},
                                                    {"512", "bf16", "40", "1000", ""}}),
                               {}),
               UsageError);
  // Nothing to compare.
  EXPECT_THROW(compare_results(kBase, table_of("new.csv", {}, {"seq", "dtype", "note"}), {}),
               UsageError);
  // A figure that is not a number.
  EXPECT_THROW(
      compare_results(kBase, table_of("new.csv", {{"512", "bf16", "forty", "1000", ""}}), {}),
      UsageError);
}

}  // namespace
}  // namespace vrambench
