// The command line end to end: the acceptance commands of the README and the issues, run as a user
// would, checking exit codes, printed rows and written files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path scratch(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("vrambench-cli-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// Runs the built binary with `args` (shell words), capturing stdout and stderr.
CommandResult vrambench(const std::string& args, const std::string& env = "") {
  const fs::path err_file = scratch("stderr");
  const std::string cmd =
      env + " " + VRAMBENCH_BINARY + " " + args + " 2>" + err_file.string() + " </dev/null";
  CommandResult run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = slurp(err_file);
  fs::remove(err_file);
  return run;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

// Markdown data rows: lines starting with '|' minus the header and the separator.
std::vector<std::string> table_rows(const std::string& out) {
  std::vector<std::string> rows;
  for (const std::string& l : lines_of(out))
    if (!l.empty() && l[0] == '|') rows.push_back(l);
  return rows.size() >= 2 ? std::vector<std::string>(rows.begin() + 2, rows.end()) : rows;
}

// CSV without the '#' provenance lines: header + rows, split on commas (no quoted commas here).
std::vector<std::vector<std::string>> csv_of(const fs::path& p) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& l : lines_of(slurp(p))) {
    if (l.empty() || l[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(l);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    rows.push_back(cells);
  }
  return rows;
}

std::size_t column(const std::vector<std::string>& header, const std::string& key) {
  auto it = std::find(header.begin(), header.end(), key);
  EXPECT_NE(it, header.end()) << "no column " << key;
  return static_cast<std::size_t>(it - header.begin());
}

TEST(Cli, EstimateSweepPrintsAndWritesFiveNonIncreasingRows) {
  const fs::path dir = scratch("estimate");
  const CommandResult run = vrambench(
      "estimate --preset llama2-7b --dtype bf16 --sweep seq=512..8192 "
      "--vram 80GiB --out " +
      dir.string() + " --name est");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(table_rows(run.out).size(), 5u) << run.out;
  const auto csv = csv_of(dir / "est.csv");
  ASSERT_EQ(csv.size(), 6u);  // header + 5
  const std::size_t seq = column(csv[0], "seq"), max_batch = column(csv[0], "est_max_batch");
  for (std::size_t r = 2; r < csv.size(); ++r) {
    EXPECT_GT(std::stoll(csv[r][seq]), std::stoll(csv[r - 1][seq]));
    EXPECT_LE(std::stoll(csv[r][max_batch]), std::stoll(csv[r - 1][max_batch]));
  }
  EXPECT_TRUE(fs::exists(dir / "est.json"));
  EXPECT_FALSE(fs::exists(dir / "est.csv.partial"));
  const auto doc = nlohmann::json::parse(slurp(dir / "est.json"));
  EXPECT_EQ(doc.at("rows").size(), 5u);
  EXPECT_TRUE(doc.at("provenance").contains("command_line"));
  fs::remove_all(dir);
}

TEST(Cli, MistakesExitTwoWithOneLineAndWriteNothing) {
  for (const std::string args :
       {"estimate --sweep seq=512..100", "estimate --hidden 1000 --heads 3", "--sweep seq=512..100",
        "--vram 12XB", "--preset nope", "--dtype fp8", "--sweep dtype=fp16..bf16",
        "--flash-impl nope", "--cuda-memory nope", "--batch 4", "--sweep batch=1..4",
        "--format xml", "--max-batch 0"}) {
    const fs::path dir = scratch("mistake");
    const CommandResult run = vrambench(args + " --out " + dir.string());
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_NE(run.err.find("error"), std::string::npos) << run.err;
    EXPECT_FALSE(fs::exists(dir)) << args;
    EXPECT_TRUE(run.out.empty()) << args << ": " << run.out;
  }
}

TEST(Cli, SearchOnSimRespectsCapacityAtMaxAndMaxPlusOne) {
  const fs::path dir = scratch("search");
  const CommandResult run = vrambench(
      "--device sim:rtx4090 --preset gpt2 --dtype bf16 --sweep seq=512..8192 "
      "--out " +
      dir.string() + " --name s");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(table_rows(run.out).size(), 5u) << run.out;
  const auto doc = nlohmann::json::parse(slurp(dir / "s.json"));
  const auto& rows = doc.at("rows");
  ASSERT_EQ(rows.size(), 5u);
  const auto& details = doc.at("summary").at("details");
  std::int64_t previous = INT64_MAX;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t max_batch = rows[i].at("sim_max_batch").get<std::int64_t>();
    EXPECT_GT(max_batch, 0);
    EXPECT_LE(max_batch, previous);
    previous = max_batch;
    const std::int64_t capacity = details[i].at("capacity_bytes").get<std::int64_t>();
    EXPECT_LE(details[i].at("at_max").at("device_peak_bytes").get<std::int64_t>(), capacity);
    EXPECT_GT(details[i].at("max_plus_1_needed").at("device_peak_bytes").get<std::int64_t>(),
              capacity);
  }
  EXPECT_NE(run.out.find("median |err|"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(" per configuration) in "), std::string::npos) << run.out;
  fs::remove_all(dir);
}

TEST(Cli, ModelStateLargerThanTheCardIsMaxBatchZeroWithTheReason) {
  const fs::path dir = scratch("zero");
  const CommandResult run = vrambench(
      "--device sim:h100-80gb --preset llama2-7b --optimizer adamw "
      "--dtype bf16 --seq 2048 --out " +
      dir.string() + " --name z");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("model state alone exceeds capacity"), std::string::npos) << run.out;
  const auto csv = csv_of(dir / "z.csv");
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_EQ(csv[1][column(csv[0], "sim_max_batch")], "0");
  fs::remove_all(dir);
}

TEST(Cli, CrashedConfigurationBecomesAFailedRowAndTheSweepGoesOn) {
  const fs::path dir = scratch("crash");
  const CommandResult run = vrambench(
      "--isolate --device sim:rtx4090 --preset tiny --sweep seq=64,128 "
      "--out " +
          dir.string() + " --name c",
      "VRAMBENCH_FAULT=abort");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto rows = table_rows(run.out);
  ASSERT_EQ(rows.size(), 2u) << run.out;
  for (const std::string& row : rows) EXPECT_NE(row.find("crashed: signal 6"), std::string::npos);
  EXPECT_NE(run.out.find("2 failed"), std::string::npos) << run.out;
  fs::remove_all(dir);
}

TEST(Cli, AHangingTrialTimesOutIntoARowAndTheSweepGoesOn) {
  const fs::path dir = scratch("hang");
  const CommandResult run = vrambench("--isolate --trial-timeout 0.5 --device sim:rtx4090 "
                                      "--preset tiny --sweep seq=64,128 --out " +
                                          dir.string() + " --name h",
                                      "VRAMBENCH_FAULT=hang");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto rows = table_rows(run.out);
  ASSERT_EQ(rows.size(), 2u) << run.out;
  for (const std::string& row : rows)
    EXPECT_NE(row.find("timeout: the trial at batch 1 ran over 0.5 s"), std::string::npos) << row;
  EXPECT_NE(run.out.find("2 timed out"), std::string::npos) << run.out;
  EXPECT_EQ(run.err, "") << "stderr is not a terminal: no progress line";
  EXPECT_EQ(vrambench("--trial-timeout 0 --preset tiny").exit_code, 2);
  EXPECT_EQ(vrambench("--trial-timeout soon --preset tiny").exit_code, 2);
  fs::remove_all(dir);
}

TEST(Cli, CpuDeviceMeasuresNextToEstAndSim) {
  const fs::path dir = scratch("cpu");
  const CommandResult run = vrambench(
      "--device cpu --preset tiny --vram 4MiB --sweep seq=16,32 "
      "--out " +
      dir.string() + " --name c");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto csv = csv_of(dir / "c.csv");
  ASSERT_EQ(csv.size(), 3u);
  const std::size_t est = column(csv[0], "est_max_batch"), sim = column(csv[0], "sim_max_batch"),
                    meas = column(csv[0], "meas_max_batch");
  for (std::size_t r = 1; r < csv.size(); ++r) {
    EXPECT_GT(std::stoll(csv[r][meas]), 0);
    // Real host allocations through the same allocator policy and no fixed overhead: the same
    // answer as the replay on virtual memory.
    EXPECT_EQ(csv[r][meas], csv[r][sim]);
    EXPECT_FALSE(csv[r][est].empty());
  }
  EXPECT_EQ(csv[1][column(csv[0], "meas_peak_bytes")], csv[1][column(csv[0], "sim_peak_bytes")]);
  // The same peaks: no difference from the sim, and the summary says so. The cpu device runs its
  // fused attention kernel (flash is the default attention).
  for (std::size_t r = 1; r < csv.size(); ++r) {
    EXPECT_EQ(std::stod(csv[r][column(csv[0], "meas_vs_sim")]), 0.0);
    EXPECT_EQ(csv[r][column(csv[0], "attention_impl")], "kernel");
  }
  EXPECT_NE(run.out.find("meas vs sim peak: median |diff| 0.0%, max |diff| 0.0%"),
            std::string::npos)
      << run.out;

  // Allocation alone (no kernels) gives the same max batch: sizes never depend on values.
  const CommandResult alloc_only =
      vrambench("--device cpu --preset tiny --vram 4MiB --sweep seq=16,32 --no-execute --out " +
                dir.string() + " --name n");
  ASSERT_EQ(alloc_only.exit_code, 0) << alloc_only.err;
  const auto csv_n = csv_of(dir / "n.csv");
  EXPECT_EQ(csv_n[1][column(csv_n[0], "meas_max_batch")], csv[1][meas]);
  EXPECT_EQ(csv_n[1][column(csv_n[0], "attention_impl")], "");  // nothing ran
  fs::remove_all(dir);
}

TEST(Cli, InformationalCommands) {
  const CommandResult presets = vrambench("presets");
  EXPECT_EQ(presets.exit_code, 0);
  for (const char* name : {"gpt2", "gpt2-xl", "llama2-7b", "llama2-13b", "llama3-8b", "tiny"})
    EXPECT_NE(presets.out.find(name), std::string::npos) << name;
  EXPECT_NE(presets.out.find("124439808"), std::string::npos);  // gpt2's parameter count

  const CommandResult devices = vrambench("devices");
  EXPECT_EQ(devices.exit_code, 0);
  EXPECT_NE(devices.out.find("sim:h100-80gb"), std::string::npos);
  EXPECT_NE(devices.out.find("sim:rtx4050-laptop"), std::string::npos);

  const CommandResult help = vrambench("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--sweep seq=512..8192"), std::string::npos);

  const CommandResult program = vrambench("program --preset tiny --batch 2 --seq 16");
  EXPECT_EQ(program.exit_code, 0) << program.err;
  EXPECT_NE(program.out.find("peak"), std::string::npos);
}

TEST(Cli, SelftestWithoutAGpuSaysSoAndFails) {
  if (vrambench("devices").out.find("No GPU") == std::string::npos)
    GTEST_SKIP() << "a GPU is present: selftest runs for real (label gpu)";
  const CommandResult run = vrambench("selftest");
  EXPECT_EQ(lines_of(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("GPU"), std::string::npos) << run.err;
}

}  // namespace
