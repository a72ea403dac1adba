// The committed reference tables under results/ re-derived row by row: a change to the closed-form
// model, the step program or the allocator that moves any figure fails here, and must regenerate
// the tables (scripts/reference-tables.sh) and explain the change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/options.h"
#include "core/fields.h"
#include "device/device.h"
#include "search/measure.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

struct ReferenceTable {
  CliOptions options;  // from the command line the table's .md records
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string cell; std::getline(ss, cell, sep);)
    if (sep != ' ' || !cell.empty()) out.push_back(cell);
  return out;
}

ReferenceTable load(const fs::path& stem) {
  ReferenceTable table;
  std::ifstream md(stem.string() + ".md");
  std::string line, command;
  while (std::getline(md, line))
    if (line.starts_with("vrambench ")) command += line.substr(10) + " ";
  const std::vector<std::string> words = split(command, ' ');
  for (std::size_t i = 0; i + 1 < words.size(); i += 2) {
    const std::string flag = words[i].substr(2);
    if (flag == "sweep")
      table.options.sweeps.push_back(parse_axis(words[i + 1]));
    else
      table.options.fields[flag] = parse_field(find_field(flag), words[i + 1]);
  }
  std::ifstream csv(stem.string() + ".csv");
  while (std::getline(csv, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (table.header.empty())
      table.header = split(line, ',');
    else
      table.rows.push_back(split(line, ','));
  }
  return table;
}

std::size_t column(const ReferenceTable& t, const std::string& key) {
  for (std::size_t i = 0; i < t.header.size(); ++i)
    if (t.header[i] == key) return i;
  ADD_FAILURE() << "no column " << key;
  return 0;
}

class ReferenceTables : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceTables, EveryRowIsReproduced) {
  const fs::path stem = fs::path(VRAMBENCH_SOURCE_DIR) / "results" / GetParam();
  ASSERT_TRUE(fs::exists(stem.string() + ".csv")) << stem;
  const ReferenceTable table = load(stem);
  const Grid grid = make_grid(table.options);
  ASSERT_EQ(grid.configs.size(), table.rows.size()) << "the table's command makes another grid";
  const std::size_t est = column(table, "est_max_batch"), sim = column(table, "sim_max_batch"),
                    sim_peak = column(table, "sim_peak_bytes"),
                    est_peak = column(table, "est_peak_bytes");
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const RunConfig& cfg = grid.configs[r];
    const Measurement m = measure(cfg, make_device(cfg), {});
    const std::vector<std::string>& row = table.rows[r];
    SCOPED_TRACE(GetParam() + std::string(" row ") + std::to_string(r + 1));
    EXPECT_EQ(std::to_string(m.est_max_batch), row[est]);
    EXPECT_EQ(std::to_string(m.search.max_batch), row[sim]);
    EXPECT_EQ(std::to_string(m.estimated_peak()), row[est_peak]);
    if (!row[sim_peak].empty()) {
      EXPECT_EQ(std::to_string(m.measured_peak()), row[sim_peak]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Results, ReferenceTables,
                         ::testing::Values("sim-h100-80gb/headline-gpt2", "sim-h100-80gb/grid-gpt2",
                                           "sim-rtx4090/llama3-8b-no-optimizer"));

}  // namespace
}  // namespace vrambench
