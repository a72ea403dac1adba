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
#include "report/csv.h"
#include "search/measure.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

struct ReferenceTable {
  CliOptions options;  // from the command line the table's .md records
  CsvDocument csv;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ReferenceTable load(const fs::path& stem) {
  ReferenceTable table;
  std::ifstream md(stem.string() + ".md");
  std::string line, command;
  while (std::getline(md, line))
    if (line.starts_with("vrambench ")) command += line.substr(10) + " ";
  std::vector<std::string> words;
  std::istringstream split(command);
  for (std::string word; split >> word;) words.push_back(word);
  for (std::size_t i = 0; i + 1 < words.size(); i += 2) {
    const std::string flag = words[i].substr(2);
    if (flag == "sweep")
      table.options.sweeps.push_back(parse_axis(words[i + 1]));
    else
      table.options.fields[flag] = parse_field(find_field(flag), words[i + 1]);
  }
  const fs::path csv = stem.string() + ".csv";
  table.csv = parse_csv(read_file(csv), csv.string());
  return table;
}

class ReferenceTables : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceTables, EveryRowIsReproduced) {
  const fs::path stem = fs::path(VRAMBENCH_SOURCE_DIR) / "results" / GetParam();
  ASSERT_TRUE(fs::exists(stem.string() + ".csv")) << stem;
  const ReferenceTable table = load(stem);
  const Grid grid = make_grid(table.options);
  const CsvDocument& csv = table.csv;
  ASSERT_EQ(grid.configs.size(), csv.rows.size()) << "the table's command makes another grid";
  const std::size_t est = csv.column("est_max_batch"), sim = csv.column("sim_max_batch"),
                    sim_peak = csv.column("sim_peak_bytes"),
                    est_peak = csv.column("est_peak_bytes");
  for (std::size_t r = 0; r < csv.rows.size(); ++r) {
    const RunConfig& cfg = grid.configs[r];
    const Measurement m = measure(cfg, make_device(cfg), {});
    const std::vector<std::string>& row = csv.rows[r];
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
