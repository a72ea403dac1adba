// The command line end to end: the acceptance commands of the README and the issues, run as a user
// would, checking exit codes, printed rows and written files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "config/gpu_profiles.h"
#include "estimate/formula.h"
#include "model/families.h"
#include "report/csv.h"

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

// A CSV as any reader opens it: header on line 1, one row per line (no quoted commas here), a final
// newline.
std::vector<std::vector<std::string>> csv_of(const fs::path& p) {
  std::vector<std::vector<std::string>> rows;
  const std::string text = slurp(p);
  EXPECT_TRUE(!text.empty() && text.back() == '\n') << p << " has no final newline";
  for (const std::string& l : lines_of(text))
    EXPECT_FALSE(l.empty() || l[0] == '#') << p << ": '" << l << "'";
  // The project's reader: a row ending in an empty cell keeps it.
  rows = vrambench::parse_csv_records(text);
  return rows;
}

std::string fmt_line(const std::string& key, std::int64_t value) {
  return key + std::to_string(value) + "\n";
}

std::size_t column(const std::vector<std::string>& header, const std::string& key) {
  auto it = std::find(header.begin(), header.end(), key);
  EXPECT_NE(it, header.end()) << "no column " << key;
  return static_cast<std::size_t>(it - header.begin());
}

#ifdef VRAMBENCH_HAVE_CUDA
// The tool opens cuBLASLt and NVRTC when a GPU first needs them (kernels/cuda/library_loader.cpp):
// loading them at start cost every run about 180 MB of resident memory, a sim sweep's too.
TEST(Cli, TheToolDoesNotLoadCublasLtOrNvrtcAtStart) {
  FILE* pipe = ::popen(("readelf -d " + std::string(VRAMBENCH_BINARY) + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string needed;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    needed.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << needed;
  EXPECT_NE(needed.find("(NEEDED)"), std::string::npos) << needed;
  EXPECT_EQ(needed.find("libcublasLt"), std::string::npos) << needed;
  EXPECT_EQ(needed.find("libnvrtc"), std::string::npos) << needed;
}
#endif

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
  // Both peaks users see: allocated (the tensors) below reserved (est peak: the allocator's
  // segments and the context), on every row that fits a batch.
  const std::size_t allocated = column(csv[0], "allocated_peak_bytes"),
                    reserved = column(csv[0], "est_peak_bytes");
  for (std::size_t r = 1; r < csv.size(); ++r) {
    if (csv[r][max_batch] == "0") continue;
    EXPECT_GT(std::stoll(csv[r][allocated]), 0) << r;
    EXPECT_LT(std::stoll(csv[r][allocated]), std::stoll(csv[r][reserved])) << r;
  }
  EXPECT_TRUE(fs::exists(dir / "est.json"));
  EXPECT_FALSE(fs::exists(dir / "est.csv.partial"));
  const auto doc = nlohmann::json::parse(slurp(dir / "est.json"));
  EXPECT_EQ(doc.at("rows").size(), 5u);
  EXPECT_TRUE(doc.at("provenance").contains("command_line"));
  fs::remove_all(dir);
}

// The README's question on the estimate's row: the formula's peak at the batch beside the model's,
// with its error.
TEST(Cli, EstimatePrintsTheFormulaBesideTheModelWithItsError) {
  const fs::path dir = scratch("estimate-formula");
  const CommandResult run = vrambench("estimate --preset llama2-7b --seq 4096 --batch 1 --out " +
                                      dir.string() + " --name e");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<std::string> rows = table_rows(run.out);
  ASSERT_EQ(rows.size(), 1u) << run.out;
  EXPECT_NE(run.out.find(" formula |"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(" formula vs est |"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("; formula vs est peak: median |err| "), std::string::npos) << run.out;
  const auto csv = csv_of(dir / "e.csv");
  ASSERT_EQ(csv.size(), 2u);
  vrambench::RunConfig cfg;
  cfg.model = vrambench::find_preset("llama2-7b").model;
  cfg.seq = 4096;
  cfg.batch = 1;
  const std::int64_t formula =
      vrambench::formula_peak(cfg, vrambench::find_gpu_profile("h100-80gb").context_overhead());
  EXPECT_EQ(std::stoll(csv[1][column(csv[0], "formula_peak_bytes")]), formula);
  const double est = std::stod(csv[1][column(csv[0], "est_peak_bytes")]);
  EXPECT_NEAR(std::stod(csv[1][column(csv[0], "formula_vs_est")]),
              (static_cast<double>(formula) - est) / est, 1e-5);
  fs::remove_all(dir);
}

// `estimate --sweep batch=...` gives each batch's peak (the batch is the key column, once), and
// those peaks are the sim's: the rows fit up to the search's max batch and no further, and the
// peaks at the max batch and the one after it are, to the byte, what the search's trials reserved
// there.
TEST(Cli, EstimateAtEachBatchOfASweepGivesTheSimsPeaks) {
  const fs::path dir = scratch("estimate-at");
  const std::string config = "--device sim:rtx4090 --preset gpt2 --seq 1024 --out " + dir.string();
  const CommandResult search = vrambench(config + " --name s --quiet");
  ASSERT_EQ(search.exit_code, 0) << search.err;
  const auto s = csv_of(dir / "s.csv");
  ASSERT_EQ(s.size(), 2u);
  const std::int64_t most = std::stoll(s[1][column(s[0], "sim_max_batch")]);
  ASSERT_GT(most, 2);
  const std::vector<std::int64_t> batches{1, most / 2, most, most + 1};
  std::string sweep = "batch=";
  for (std::int64_t b : batches) sweep += std::to_string(b) + (b == batches.back() ? "" : ",");
  const CommandResult run = vrambench("estimate " + config + " --name e --sweep " + sweep);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(table_rows(run.out).size(), batches.size()) << run.out;
  const auto e = csv_of(dir / "e.csv");
  ASSERT_EQ(e.size(), batches.size() + 1);
  EXPECT_EQ(std::count(e[0].begin(), e[0].end(), "batch"), 1);
  const std::size_t batch = column(e[0], "batch"), peak = column(e[0], "est_peak_bytes"),
                    fits = column(e[0], "fits");
  for (std::size_t r = 1; r < e.size(); ++r) {
    const std::int64_t b = std::stoll(e[r][batch]);
    EXPECT_EQ(b, batches[r - 1]);
    EXPECT_EQ(e[r][fits], b <= most ? "1" : "0") << "batch " << b;
    if (r > 1) {
      EXPECT_GT(std::stoll(e[r][peak]), std::stoll(e[r - 1][peak]));
    }
    if (b == most) {
      EXPECT_EQ(e[r][peak], s[1][column(s[0], "reserved_peak_bytes")]);
    }
    if (b == most + 1) {
      EXPECT_EQ(e[r][peak], s[1][column(s[0], "sim_next_peak_bytes")]);
    }
  }
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

// Options that would write elsewhere or be ignored are refused, and a bound is said in words: a
// name with a folder in it (it would write outside --out), the LoRA options without LoRA,
// --double-quant without a 4-bit base, numbers out of their range (CLI11's own message printed the
// largest double, 309 digits).
TEST(Cli, UnsafeOrIgnoredOptionsAreRefusedInOneShortLine) {
  const fs::path dir = scratch("unsafe");
  const fs::path outside = dir.parent_path() / ("vrambench-escaped-" + std::to_string(::getpid()));
  for (const std::string& args : std::vector<std::string>{
           "estimate --name ../" + outside.filename().string(), "--name a/b", "--name ..",
           "estimate --name 'a\\b'", "--lora-rank 8", "estimate --lora-targets attn",
           "estimate --lora-alpha 8", "estimate --lora-dropout 0.1", "--sweep lora-rank=8,16",
           "estimate --finetune lora --double-quant off", "estimate --double-quant on",
           "estimate --lora-alpha -1", "--trial-timeout -5", "--trial-timeout 0"}) {
    const CommandResult run = vrambench(args + " --out " + dir.string());
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_LT(run.err.size(), 200u) << args << ": " << run.err;
    EXPECT_FALSE(fs::exists(dir)) << args;
    EXPECT_FALSE(fs::exists(outside.string() + ".csv")) << args;
    EXPECT_TRUE(run.out.empty()) << args << ": " << run.out;
  }
  const CommandResult tolerance = vrambench("compare a.csv b.csv --tolerance -1");
  EXPECT_EQ(tolerance.exit_code, 2);
  EXPECT_NE(tolerance.err.find("0 or more"), std::string::npos) << tolerance.err;
  const CommandResult lora = vrambench("estimate --lora-rank 8 --out " + dir.string());
  EXPECT_NE(lora.err.find("--finetune lora or qlora"), std::string::npos) << lora.err;
  // With LoRA in the grid the options apply: no refusal.
  EXPECT_EQ(vrambench("estimate --preset tiny --sweep finetune=full,lora --lora-rank 8 --format md")
                .exit_code,
            0);
  EXPECT_EQ(
      vrambench("estimate --preset tiny --finetune qlora --double-quant off --format md").exit_code,
      0);
}

// A model no GPU holds, or deeper than the tool answers for in seconds, is refused in one line
// before anything is built; at the bound the estimate answers.
TEST(Cli, AModelPastTheLimitsIsRefusedBeforeAnythingIsBuilt) {
  const fs::path dir = scratch("limits");
  const std::string out = " --out " + dir.string();
  for (const std::string& args : std::vector<std::string>{
           "estimate --layers 100000" + out, "--layers 100000" + out, "plan --layers 100000",
           "program --layers 100000 --batch 1",
           "estimate --hidden 65536 --heads 64 --kv-heads 64 --ffn 262144 --layers 2048" + out}) {
    const CommandResult run = vrambench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.out;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_TRUE(run.err.find("at most 2048") != std::string::npos ||
                run.err.find("no GPU holds it") != std::string::npos)
        << args << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << args;
    EXPECT_FALSE(fs::exists(dir)) << args;
  }
  const CommandResult deepest = vrambench("estimate --layers 2048 --format md --quiet");
  EXPECT_EQ(deepest.exit_code, 0) << deepest.err;
  EXPECT_NE(deepest.out.find("estimated max batch"), std::string::npos) << deepest.out;
}

// Every table states whose allocations its step reproduces and the recipe: the summary line and
// the JSON's provenance name the framework, or say "per row" when the sweep varies it (a column
// then) or when auto picks hf for some rows and lean for others (selective recompute, which
// transformers does not do), and the fine-tuning, quantisation, optimizer and recompute, listing
// the values of a field the sweep varies.
TEST(Cli, EveryTableStatesItsFrameworkAndRecipe) {
  const fs::path dir = scratch("framework");
  struct Case {
    std::string args, name, says, recipe;
  };
  const std::string full = "dtype bf16, finetune full, quant none, optimizer adamw, recompute none";
  for (const Case& c : std::vector<Case>{
           {"--device sim:rtx4090 --seq 512", "auto", "hf", full},
           {"--device sim:rtx4090 --seq 512 --finetune lora", "auto-lora", "hf",
            "dtype bf16, finetune lora, quant none, optimizer adamw, recompute none"},
           {"--device sim:rtx4090 --seq 512 --sweep finetune=full,lora", "auto-ft", "hf",
            "dtype bf16, finetune full/lora, quant none, optimizer adamw, recompute none"},
           {"--device sim:rtx4090 --seq 512 --sweep recompute=full,selective", "auto-both",
            "per row",
            "dtype bf16, finetune full, quant none, optimizer adamw, recompute full/selective"},
           {"--device sim:rtx4090 --seq 512 --framework lean", "lean", "lean", full},
           {"--device sim:rtx4090 --seq 512 --sweep framework=lean,hf", "both", "per row", full},
           {"estimate --seq 512 --framework lean --finetune qlora --optimizer paged-adamw-8bit "
            "--sweep recompute=none,full",
            "est", "lean",
            "dtype bf16, finetune qlora, quant nf4, optimizer paged-adamw-8bit, recompute "
            "none/full"},
           {"--device sim:rtx4090 --over seq --framework hf", "seq", "hf", full}}) {
    SCOPED_TRACE(c.args);
    const CommandResult run = vrambench(c.args + " --out " + dir.string() + " --name " + c.name);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_NE(run.out.find(", framework " + c.says + ", " + c.recipe), std::string::npos)
        << run.out;
    const auto doc = nlohmann::json::parse(slurp(dir / (c.name + ".json")));
    EXPECT_EQ(doc.at("provenance").at("extra").at("framework"), c.says);
    EXPECT_EQ(doc.at("provenance").at("extra").at("recipe"), c.recipe);
    const bool column = c.name == "both";
    const auto csv = csv_of(dir / (c.name + ".csv"));
    EXPECT_EQ(std::find(csv[0].begin(), csv[0].end(), "framework") != csv[0].end(), column);
  }
  fs::remove_all(dir);
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
    EXPECT_LE(details[i].at("at_max").at("device_peak").get<std::int64_t>(), capacity);
    EXPECT_GT(details[i].at("max_plus_1_needed").at("device_peak").get<std::int64_t>(), capacity);
  }
  EXPECT_NE(run.out.find("median |err|"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(" per configuration) in "), std::string::npos) << run.out;
  fs::remove_all(dir);
}

TEST(Cli, ModelStateLargerThanTheCardIsMaxBatchZeroWithTheReason) {
  const fs::path dir = scratch("zero");
  const CommandResult run = vrambench(
      "--device sim:h100-80gb --preset llama2-7b --optimizer adamw --framework lean "
      "--dtype bf16 --seq 2048 --out " +
      dir.string() + " --name z");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("model state alone exceeds capacity"), std::string::npos) << run.out;
  const auto csv = csv_of(dir / "z.csv");
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_EQ(csv[1][column(csv[0], "sim_max_batch")], "0");
  fs::remove_all(dir);
}

// The estimate follows the framework: an hf row's est is its sim's peak to the byte (it reads and
// replays the same program, under the direct allocator too), and no row says it is the lean
// model's.
TEST(Cli, HfRowsEstimateTheHfStep) {
  const fs::path dir = scratch("hf-est");
  const CommandResult run = vrambench(
      "--device sim:rtx4090 --preset gpt2 --seq 512 "
      "--sweep framework=lean,hf --allocator direct --out " +
      dir.string() + " --name h");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // A sim row shows the peak once, as the sim's; the estimate's is in the details.
  const auto doc = nlohmann::json::parse(slurp(dir / "h.json"));
  const auto& rows = doc.at("rows");
  const auto& details = doc.at("summary").at("details");
  ASSERT_EQ(rows.size(), 2u);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(rows[r].at("note").get<std::string>().find("lean model"), std::string::npos);
    if (rows[r].at("framework") != "hf") continue;
    const auto e = details[r].at("est_peak_bytes").get<double>();
    const auto m = details[r].at("at_max").at("device_peak").get<double>();
    EXPECT_EQ(m, rows[r].at("reserved_peak_bytes").get<double>());
    EXPECT_EQ(e, m);
  }
  fs::remove_all(dir);
}

TEST(Cli, CrashedConfigurationBecomesAFailedRowAndTheSweepGoesOn) {
  const fs::path dir = scratch("crash");
  const CommandResult run = vrambench(
      "--isolate --device sim:rtx4090 --preset tiny --sweep seq=64,128 "
      "--out " +
          dir.string() + " --name c",
      "VRAMBENCH_FAULT=abort");
  // Every row is written, and the run still fails, naming how many rows have no answer.
  ASSERT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.err, "vrambench: 2 of 2 configurations failed (see the note column)\n");
  const auto rows = table_rows(run.out);
  ASSERT_EQ(rows.size(), 2u) << run.out;
  for (const std::string& row : rows) EXPECT_NE(row.find("crashed: signal 6"), std::string::npos);
  EXPECT_NE(run.out.find("2 failed"), std::string::npos) << run.out;
  EXPECT_EQ(csv_of(dir / "c.csv").size(), 3u) << "the header and both rows";
  // One failed row of two fails the run too.
  const CommandResult one =
      vrambench("--isolate --device sim:rtx4090 --preset tiny --sweep seq=64,128 --out " +
                    dir.string() + " --name one",
                "VRAMBENCH_FAULT=abort@seq=128");
  EXPECT_EQ(one.exit_code, 1) << one.err;
  EXPECT_EQ(one.err, "vrambench: 1 of 2 configurations failed (see the note column)\n");
  fs::remove_all(dir);
}

TEST(Cli, AHangingTrialTimesOutIntoARowAndTheSweepGoesOn) {
  const fs::path dir = scratch("hang");
  const CommandResult run = vrambench(
      "--isolate --trial-timeout 0.5 --device sim:rtx4090 "
      "--preset tiny --sweep seq=64,128 --out " +
          dir.string() + " --name h",
      "VRAMBENCH_FAULT=hang");
  ASSERT_EQ(run.exit_code, 1) << run.err;
  const auto rows = table_rows(run.out);
  ASSERT_EQ(rows.size(), 2u) << run.out;
  for (const std::string& row : rows)
    EXPECT_NE(row.find("timeout: the trial at batch 1 ran over 0.5 s"), std::string::npos) << row;
  EXPECT_NE(run.out.find("2 timed out"), std::string::npos) << run.out;
  // stderr is not a terminal: no progress line, only the failure's.
  EXPECT_EQ(run.err,
            "vrambench: 2 of 2 configurations failed, 2 of them timed out (see the note column)\n");
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
  // A measurement: est against meas with the under-estimate flag, the formula against both.
  for (const char* key :
       {"rel_error", "under_estimate", "formula_peak_bytes", "formula_vs_est", "formula_vs_meas"})
    EXPECT_FALSE(csv[1][column(csv[0], key)].empty()) << key;
  EXPECT_NE(run.out.find("; formula vs meas peak: median |err| "), std::string::npos) << run.out;

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

// The committed headline table, as a fresh run writes it.
const std::string kHeadline = "--device sim:h100-80gb --framework lean --sweep seq=512..8192";
const fs::path kCommittedHeadline =
    fs::path(VRAMBENCH_SOURCE_DIR) / "results" / "sim-h100-80gb" / "headline-gpt2.csv";

TEST(Cli, CompareACommittedTableWithAFreshRunThenWithOnePeakMovedFivePercent) {
  const fs::path dir = scratch("compare");
  ASSERT_EQ(vrambench(kHeadline + " --out " + dir.string() + " --name fresh").exit_code, 0);
  const CommandResult same =
      vrambench("compare " + kCommittedHeadline.string() + " " + (dir / "fresh.csv").string());
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("0 of 5 matched rows out of tolerance"), std::string::npos) << same.out;
  // CSV against JSON: the same rows.
  EXPECT_EQ(
      vrambench("compare " + kCommittedHeadline.string() + " " + (dir / "fresh.json").string())
          .exit_code,
      0);

  // The reserved peak of seq=2048 up by 5%.
  std::string text = slurp(dir / "fresh.csv");
  const std::size_t line = text.find("\n2048,80,");
  ASSERT_NE(line, std::string::npos) << text;
  const std::size_t at = text.find(",84779466752,", line);  // the reserved peak
  ASSERT_LT(at, text.find('\n', line + 1)) << text;
  text.replace(at, 13, ",89018440090,");
  std::ofstream(dir / "edited.csv") << text;
  const std::string edited = kCommittedHeadline.string() + " " + (dir / "edited.csv").string();
  const CommandResult moved = vrambench("compare " + edited);
  EXPECT_EQ(moved.exit_code, 1) << moved.out << moved.err;
  const auto rows = table_rows(moved.out);
  ASSERT_EQ(rows.size(), 1u) << moved.out;
  EXPECT_TRUE(rows[0].starts_with("| 2048 ")) << rows[0];
  EXPECT_NE(rows[0].find("reserved peak +5%"), std::string::npos) << rows[0];
  EXPECT_NE(moved.out.find("1 of 5 matched rows out of tolerance"), std::string::npos);
  EXPECT_EQ(vrambench("compare " + edited + " --tolerance 5.1").exit_code, 0);
  EXPECT_EQ(vrambench("compare " + edited + " --tolerance 4.9 --all --quiet").exit_code, 1);
  EXPECT_EQ(table_rows(vrambench("compare " + edited + " --tolerance 5.1 --all").out).size(), 5u);

  // A max batch one lower, and a row gone.
  std::vector<std::string> lines = lines_of(slurp(dir / "fresh.csv"));
  lines[1].replace(0, 7, "512,321");
  lines.pop_back();
  std::ofstream batch(dir / "batch.csv");
  for (const std::string& l : lines) batch << l << "\n";
  batch.close();
  const CommandResult fewer = vrambench("compare " + kCommittedHeadline.string() + " " +
                                        (dir / "batch.csv").string() + " --batch-tolerance 1");
  EXPECT_EQ(fewer.exit_code, 1) << fewer.out;
  EXPECT_TRUE(table_rows(fewer.out).empty()) << fewer.out;  // 322 → 321 is within 1
  EXPECT_NE(fewer.out.find("seq=8192"), std::string::npos) << "the row only in BASE is named";
  fs::remove_all(dir);
}

TEST(Cli, CompareBadInputExitsTwoWithOneLine) {
  const fs::path dir = scratch("compare-bad");
  fs::create_directories(dir);
  std::ofstream(dir / "other.csv") << "preset,est_max_batch\ngpt2,4\n";
  std::ofstream(dir / "broken.json") << "{";
  std::ofstream(dir / "x.txt") << "seq\n";
  const std::string base = kCommittedHeadline.string();
  for (const std::string& args : std::vector<std::string>{
           base + " " + (dir / "missing.csv").string(), base + " " + (dir / "other.csv").string(),
           base + " " + (dir / "broken.json").string(), base + " " + (dir / "x.txt").string(), base,
           base + " " + base + " --tolerance -1", base + " " + base + " --batch-tolerance x"}) {
    const CommandResult run = vrambench("compare " + args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.out;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << args << ": " << run.out;
  }
  fs::remove_all(dir);
}

// Tables of two devices join on seq alone (the key columns are what the sweep varied): compare
// says on its first line that the provenance differs and fails; a figure column one file lacks
// is named and fails too (it was skipped, and the files were "same").
TEST(Cli, CompareSaysWhatDiffersBeyondTheKeyColumns) {
  const fs::path dir = scratch("compare-provenance");
  const std::string sweep = "--preset tiny --sweep seq=512,1024 --quiet --out " + dir.string();
  ASSERT_EQ(vrambench("--device sim:rtx4090 " + sweep + " --name a").exit_code, 0);
  ASSERT_EQ(vrambench("--device sim:h100-80gb " + sweep + " --name b").exit_code, 0);
  const CommandResult devices =
      vrambench("compare " + (dir / "a.json").string() + " " + (dir / "b.json").string());
  EXPECT_EQ(devices.exit_code, 1) << devices.out;
  const std::string first = lines_of(devices.out).at(0);
  EXPECT_NE(first.find("differ in provenance"), std::string::npos) << first;
  EXPECT_NE(first.find("device sim:rtx4090"), std::string::npos) << first;

  // The same table without its reserved peak column.
  std::vector<std::vector<std::string>> csv = csv_of(dir / "a.csv");
  const std::size_t peak = column(csv[0], "reserved_peak_bytes");
  std::ofstream less(dir / "less.csv");
  for (auto& row : csv) {
    row.erase(row.begin() + static_cast<std::ptrdiff_t>(peak));
    for (std::size_t c = 0; c < row.size(); ++c) less << (c ? "," : "") << row[c];
    less << "\n";
  }
  less.close();
  const CommandResult missing =
      vrambench("compare " + (dir / "a.csv").string() + " " + (dir / "less.csv").string());
  EXPECT_EQ(missing.exit_code, 1) << missing.out;
  EXPECT_NE(missing.out.find("reserved_peak_bytes"), std::string::npos) << missing.out;
  EXPECT_EQ(
      vrambench("compare " + (dir / "a.csv").string() + " " + (dir / "a.csv").string()).exit_code,
      0);
  fs::remove_all(dir);
}

TEST(Cli, TwoShardsMergedEqualTheUnshardedRunRowForRow) {
  const fs::path dir = scratch("shards");
  const std::string sweep =
      "--device sim:rtx4090 --preset tiny --sweep seq=32..1024 --sweep dtype=fp32,bf16";
  const std::string out = " --out " + dir.string();
  ASSERT_EQ(vrambench(sweep + out + " --name whole").exit_code, 0);
  const CommandResult first = vrambench(sweep + out + " --name part0 --shard 0/2");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(table_rows(first.out).size(), 6u);  // 12 configurations, every second from the first
  ASSERT_EQ(vrambench(sweep + " --shard 1/2" + out + " --name part1").exit_code, 0);
  const std::string parts = (dir / "part1.json").string() + " " + (dir / "part0.json").string();
  const CommandResult merged = vrambench("merge " + (dir / "merged").string() + " " + parts);
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(table_rows(merged.out).size(), 12u);
  EXPECT_EQ(slurp(dir / "merged.csv"), slurp(dir / "whole.csv"));
  const auto whole = nlohmann::json::parse(slurp(dir / "whole.json"));
  const auto joined = nlohmann::json::parse(slurp(dir / "merged.json"));
  EXPECT_EQ(joined["rows"], whole["rows"]);
  EXPECT_EQ(joined["summary"]["trials"], whole["summary"]["trials"]);
  EXPECT_EQ(joined["summary"]["median_abs_rel_error"], whole["summary"]["median_abs_rel_error"]);
  EXPECT_EQ(joined["summary"]["details"].size(), 12u);

  // Refused: a part of another sweep, one of another version, a missing shard. Nothing written.
  ASSERT_EQ(vrambench("--device sim:rtx4090 --preset tiny --sweep seq=32..512 --sweep "
                      "dtype=fp32,bf16 --shard 1/2" +
                      out + " --name other")
                .exit_code,
            0);
  auto other_version = nlohmann::json::parse(slurp(dir / "part1.json"));
  other_version["provenance"]["tool_version"] = "0.0.1";
  std::ofstream(dir / "old.json") << other_version.dump();
  for (const std::string& bad : std::vector<std::string>{
           (dir / "other.json").string(), (dir / "old.json").string(), std::string()}) {
    const CommandResult run = vrambench("merge " + (dir / "refused").string() + " " +
                                        (dir / "part0.json").string() + " " + bad);
    EXPECT_EQ(run.exit_code, 2) << bad << ": " << run.out;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << run.err;
    EXPECT_FALSE(fs::exists(dir / "refused.csv"));
  }
  EXPECT_EQ(vrambench(sweep + " --shard 2/2" + out).exit_code, 2);

  // The merged table never replaces a part, however OUT names it; the part is left as it was.
  const std::string part0 = slurp(dir / "part0.json");
  const std::string part1 = (dir / "part1.json").string();
  for (const std::string& target : {(dir / "part0").string(), (dir / "part0.json").string(),
                                    (dir / ".." / dir.filename() / "part0").string()}) {
    const CommandResult run =
        vrambench("merge " + target + " " + (dir / "part0.json").string() + " " + part1);
    EXPECT_EQ(run.exit_code, 2) << target << ": " << run.out;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << run.err;
    EXPECT_NE(run.err.find("overwrite"), std::string::npos) << run.err;
    EXPECT_EQ(slurp(dir / "part0.json"), part0) << target;
  }
  fs::create_hard_link(dir / "part0.json", dir / "linked.json");
  EXPECT_EQ(vrambench("merge " + (dir / "linked").string() + " " + (dir / "part0.json").string() +
                      " " + part1)
                .exit_code,
            2);
  EXPECT_EQ(slurp(dir / "part0.json"), part0);
  fs::remove_all(dir);
}

// A sim sweep worked on by several threads writes the tables one thread writes: the same rows in
// the grid's order, with the same details, for the search and the estimate.
TEST(Cli, SeveralJobsWriteTheTablesOneJobWrites) {
  const fs::path dir = scratch("jobs");
  const std::string sweep =
      "--device sim:rtx4090 --framework hf --sweep preset=tiny,tiny-llama --sweep seq=32..1024 "
      "--sweep finetune=full,lora --quiet --out " +
      dir.string();
  for (const std::string command : {"search", "estimate"}) {
    SCOPED_TRACE(command);
    ASSERT_EQ(vrambench(command + " " + sweep + " --name one --jobs 1").exit_code, 0);
    const CommandResult several = vrambench(command + " " + sweep + " --name three --jobs 3");
    ASSERT_EQ(several.exit_code, 0) << several.err;
    EXPECT_EQ(table_rows(several.out).size(), 24u);
    EXPECT_EQ(slurp(dir / "three.csv"), slurp(dir / "one.csv"));
    auto one = nlohmann::json::parse(slurp(dir / "one.json"));
    auto three = nlohmann::json::parse(slurp(dir / "three.json"));
    EXPECT_EQ(three["rows"], one["rows"]);
    // The summary but for the time taken (details and trials included).
    for (auto* j : {&one, &three})
      for (const char* key : {"seconds", "summary"}) (*j)["summary"].erase(key);
    EXPECT_EQ(three["summary"], one["summary"]);
  }
  fs::remove_all(dir);
}

TEST(Cli, ResumeAfterAKillFinishesWithEveryRowExactlyOnce) {
  const fs::path dir = scratch("resume");
  const std::string sweep =
      "--isolate --device sim:rtx4090 --preset tiny --sweep seq=32,64,128,256";
  const std::string out = " --out " + dir.string() + " --name k";
  // The trial of seq=128 hangs: the sweep is killed (SIGKILL) once the rows before it are written.
  const std::string pid_file = (dir.string() + ".pid");
  const std::string start = "VRAMBENCH_FAULT=hang@seq=128 " + std::string(VRAMBENCH_BINARY) + " " +
                            sweep + out + " >/dev/null 2>&1 & echo $! >" + pid_file;
  ASSERT_EQ(std::system(start.c_str()), 0);
  const fs::path partial = dir / "k.csv.partial";
  for (int i = 0; i < 300 && (!fs::exists(partial) || lines_of(slurp(partial)).size() < 3); ++i)
    ::usleep(100 * 1000);
  ASSERT_EQ(std::system(("kill -9 $(cat " + pid_file + ")").c_str()), 0);
  fs::remove(pid_file);
  ASSERT_EQ(lines_of(slurp(partial)).size(), 3u) << "header and the rows of seq=32 and 64";

  // Another sweep under the same name is refused, and the partial is left as it was.
  const CommandResult other = vrambench(
      "--isolate --device sim:rtx4090 --preset tiny --sweep "
      "seq=16,32" +
      out + " --resume");
  EXPECT_EQ(other.exit_code, 2) << other.out;
  EXPECT_EQ(lines_of(slurp(partial)).size(), 3u);

  // The kept rows are not measured again: a crash at seq=64 would show in its row.
  const CommandResult resumed =
      vrambench(sweep + out + " --resume", "VRAMBENCH_FAULT=abort@seq=64");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_FALSE(fs::exists(partial));
  const auto csv = csv_of(dir / "k.csv");
  ASSERT_EQ(csv.size(), 5u);
  const std::size_t seq = column(csv[0], "seq");
  for (std::size_t r = 1; r < csv.size(); ++r)
    EXPECT_EQ(csv[r][seq], std::to_string(16 << r)) << "every row once, in the sweep's order";
  // The same table as a run that was never killed (the figures; trials included).
  ASSERT_EQ(vrambench(sweep + " --out " + dir.string() + " --name whole").exit_code, 0);
  EXPECT_EQ(slurp(dir / "k.csv"), slurp(dir / "whole.csv"));
  EXPECT_NE(resumed.out.find("4 configurations"), std::string::npos) << resumed.out;

  // Resuming a finished run measures nothing and writes the same table.
  const CommandResult again = vrambench(sweep + out + " --resume", "VRAMBENCH_FAULT=abort");
  ASSERT_EQ(again.exit_code, 0);
  EXPECT_EQ(slurp(dir / "k.csv"), slurp(dir / "whole.csv"));
  EXPECT_EQ(vrambench(sweep + " --resume").exit_code, 2) << "--resume needs --name";
  fs::remove_all(dir);
}

// --resume finishes the run it names, never another: a run whose command differs in anything but
// where and how it writes (the rule merge reads) is refused in one line, its files left as they
// were. Before, a bf16 sim:rtx4090 run resumed with --dtype fp32, another device or QLoRA gave the
// old rows, and a cpu run resumed with another --vram mixed both capacities in one table.
TEST(Cli, ResumeRefusesARunOfAnotherCommand) {
  const fs::path dir = scratch("resume-other");
  const std::string out = " --out " + dir.string() + " --quiet";
  const std::string gpu = "--device sim:rtx4090 --preset tiny --sweep seq=32,64";
  ASSERT_EQ(vrambench(gpu + out + " --name gpu").exit_code, 0);
  const std::string cpu = "--device cpu --preset tiny";
  ASSERT_EQ(vrambench(cpu + " --sweep seq=32,64 --vram 128MiB" + out + " --name cpu").exit_code, 0);
  // A partial, as a killed run leaves it: the finished rows and the provenance of the run.
  ASSERT_EQ(vrambench(gpu + out + " --name partial").exit_code, 0);
  const auto doc = nlohmann::json::parse(slurp(dir / "partial.json"));
  {
    std::ofstream partial(dir / "partial.jsonl.partial");
    partial << nlohmann::json{{"provenance", doc["provenance"]}}.dump() << "\n"
            << nlohmann::ordered_json(doc["rows"][0]).dump() << "\n";
  }
  fs::remove(dir / "partial.json");
  fs::remove(dir / "partial.csv");
  const auto snapshot = [&] {
    std::string all;
    for (const auto& entry : fs::directory_iterator(dir))
      all += entry.path().filename().string() + "\n" + slurp(entry.path());
    return all;
  };
  const std::string before = snapshot();
  for (const std::string& args : std::vector<std::string>{
           gpu + " --dtype fp32 --name gpu",
           "--device sim:h100-80gb --preset tiny --sweep "
           "seq=32,64 --name gpu",
           gpu + " --finetune qlora --name gpu", gpu + " --dtype fp32 --name partial",
           cpu + " --sweep seq=32,64 --vram 256MiB --name cpu",
           cpu + " --vram 256MiB --sweep seq=32,64,128 --name cpu"}) {
    const CommandResult run = vrambench(args + out + " --resume");
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.out;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_NE(run.err.find("another run"), std::string::npos) << args << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << args << ": " << run.out;
    EXPECT_EQ(snapshot(), before) << args;
  }
  // Only where and how the run writes may differ: the partial is finished.
  const CommandResult same =
      vrambench(gpu + " --format md,csv,json --out " + dir.string() + " --name partial --resume");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(slurp(dir / "partial.csv"), slurp(dir / "gpu.csv"));
  // A CSV alone does not say which command wrote it: its rows cannot be checked.
  fs::remove(dir / "gpu.json");
  const CommandResult unknown = vrambench(gpu + out + " --name gpu --resume");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("does not say which command"), std::string::npos) << unknown.err;
  fs::remove_all(dir);
}

TEST(Cli, EveryCommandTakesQuiet) {
  const fs::path dir = scratch("quiet");
  const std::string out = " --out " + dir.string();
  for (const std::string& args : std::vector<std::string>{
           "presets --quiet", "devices --quiet", "program --preset tiny --batch 2 --seq 16 --quiet",
           "estimate --preset tiny --quiet" + out,
           "--preset tiny --device sim:rtx4090 --quiet" + out,
           "plan --preset tiny --device sim:rtx4090 --quiet",
           "compare --quiet " + kCommittedHeadline.string() + " " + kCommittedHeadline.string()}) {
    const CommandResult run = vrambench(args);
    EXPECT_EQ(run.exit_code, 0) << args << ": " << run.err;
  }
  EXPECT_NE(vrambench("selftest --quiet").exit_code, 2);  // fails without a GPU, but parses
  const CommandResult help = vrambench("--help");
  for (const char* taught : {"--resume", "--shard 0/2", "vrambench merge", "vrambench compare",
                             "vrambench plan", "--over seq"})
    EXPECT_NE(help.out.find(taught), std::string::npos) << taught;
  // plan's own help: its examples and the micro-batch rule.
  const CommandResult plan_help = vrambench("plan --help");
  EXPECT_EQ(plan_help.exit_code, 0);
  for (const char* taught : {"--target-batch", "--safety-margin", "--emit", "SIZE|auto", "N|max",
                             "grad-accum = target / micro-batch", "--emit hf"})
    EXPECT_NE(plan_help.out.find(taught), std::string::npos) << taught;
  fs::remove_all(dir);
}

TEST(Cli, ProgressOnATerminalOnlyAndNotWithQuiet) {
  if (std::system("command -v script >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no `script` to give the sweep a terminal";
  const fs::path dir = scratch("progress");
  // `script` runs the sweep on a pseudo-terminal; the table goes to a file, stderr to the terminal.
  // One configuration at a time, so that the line after the first one done names the second.
  const auto on_terminal = [&](const std::string& extra) {
    const std::string cmd = "script -qec \"" + std::string(VRAMBENCH_BINARY) +
                            " --device sim:rtx4090 --preset tiny --sweep seq=32,64 --jobs 1" +
                            " --out " + dir.string() + " " + extra + " >/dev/null\" /dev/null";
    CommandResult run;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
      run.out.append(buffer, n);
    run.exit_code = ::pclose(pipe);
    return run;
  };
  const CommandResult shown = on_terminal("");
  EXPECT_EQ(shown.exit_code, 0);
  EXPECT_NE(shown.out.find("1/2 done, "), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find(" elapsed"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("left | seq=64: batch "), std::string::npos) << shown.out;
  EXPECT_EQ(on_terminal("--quiet").out.find("done"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Cli, SelftestWithoutAGpuSaysSoAndFails) {
  if (vrambench("devices").out.find("No GPU") == std::string::npos)
    GTEST_SKIP() << "a GPU is present: selftest runs for real (label gpu)";
  const CommandResult run = vrambench("selftest");
  EXPECT_EQ(lines_of(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("GPU"), std::string::npos) << run.err;
}

// `vrambench plan`: the issue's acceptance commands, on sim.
const std::string kQloraRecipe =
    "plan --preset llama2-7b --finetune qlora --lora-rank 16 --optimizer paged-adamw-8bit "
    "--recompute full --seq 2048 --target-batch 16";
const std::string kQloraOnSixGib = kQloraRecipe + " --vram 6GiB";

// The figures a plan prints: the settings, a budget table whose rows name every component kind,
// and one summary line at the end. The transformers step of a 7B QLoRA does not fit 6 GiB at 2048
// tokens (prepare_model_for_kbit_training's fp32 embeddings, lm head and residual stream, the
// fp32 loss over the vocabulary): the plan says what to change.
TEST(Cli, PlanQloraOnSixGibPrintsTheBudgetAndASummary) {
  const CommandResult run = vrambench(kQloraOnSixGib);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.err.empty()) << run.err;
  for (const char* part :
       {"on sim (6.00 GiB): capacity 6.00 GiB - safety margin 1.00 GiB = 5.00 GiB",
        "framework hf (Hugging Face transformers on PyTorch)", "| weights: quantised",
        "| weights: frozen", "| adapters", "| optimizer state (device)", "| optimizer state (paged",
        "| activations", "| transients and workspace", "| allocator fragmentation",
        "| CUDA context", "| safety margin", "| free", "| capacity", "100.0%",
        "longest sequence at micro-batch 1", "What to change"})
    EXPECT_NE(run.out.find(part), std::string::npos) << part << "\n" << run.out;
  const std::vector<std::string> lines = lines_of(run.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("plan: nothing fits at seq 2048", 0), 0u) << lines.back();
  // A 12 GiB card with no margin fits micro-batch 2: a plan, not alternatives.
  const CommandResult larger = vrambench(kQloraRecipe + " --vram 12GiB --safety-margin 0");
  ASSERT_EQ(larger.exit_code, 0) << larger.err;
  EXPECT_NE(larger.out.find("plan: micro-batch 2 x grad-accum 8 = 16 at seq 2048"),
            std::string::npos)
      << larger.out;
}

// A recipe short of its target gets the ranked alternatives, each with its max micro-batch.
// The plan keeps the batch asked for: gpt2 on 6.5 GiB fits micro-batch 3 in the 5.5 GiB planned,
// and for 16 it planned 3 x 6 = 18 (said only in a comment of --emit hf). Now 2 x 8 = 16, with 3 x
// 5 = 15 listed as a near alternative, never substituted; micro x accum is the target in every
// form.
TEST(Cli, PlanKeepsTheEffectiveBatchAskedFor) {
  const std::string args = "plan --preset gpt2 --vram 7GiB --target-batch 16";
  const CommandResult text = vrambench(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("near alternative (not planned)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("micro-batch 2 x grad-accum 8 = 16"), std::string::npos) << text.out;
  const CommandResult hf = vrambench(args + " --emit hf");
  EXPECT_NE(hf.out.find("per_device_train_batch_size=2,"), std::string::npos) << hf.out;
  EXPECT_NE(hf.out.find("gradient_accumulation_steps=8,"), std::string::npos) << hf.out;
  const CommandResult axolotl = vrambench(args + " --emit axolotl");
  EXPECT_NE(axolotl.out.find("micro_batch_size: 2\n"), std::string::npos) << axolotl.out;
  const auto plan = nlohmann::json::parse(vrambench(args + " --emit json").out).at("plan");
  EXPECT_EQ(plan.at("max_micro_batch"), 3);
  EXPECT_EQ(plan.at("effective_batch"), 16);
  EXPECT_EQ(plan.at("near"),
            (nlohmann::json{{"micro_batch", 3}, {"grad_accum", 5}, {"effective_batch", 15}}));
  // Over a sweep of capacities and targets, micro x accum is the target wherever something fits.
  const auto plans = nlohmann::json::parse(
      vrambench("plan --preset gpt2 --sweep vram=5GiB,6GiB,7GiB,9GiB --target-batch 17 --emit json")
          .out);
  for (const auto& p : plans.at("plans")) {
    const auto& c = p.at("plan");
    if (c.at("max_micro_batch") == 0) continue;
    EXPECT_EQ(c.at("micro_batch").get<int>() * c.at("grad_accum").get<int>(), 17) << c;
  }
}

// The attention the snippet asks transformers for is the one planned: sdpa, flash-attention 2 for
// Gemma 2 (no sdpa path), with a note where sdpa's sliding-window masks were counted.
TEST(Cli, PlanAsksForTheAttentionItPlanned) {
  const auto hf = [](const std::string& args) {
    const CommandResult r = vrambench("plan " + args + " --device sim:h100-80gb --emit hf");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string llama = hf("--preset llama3.2-1b --seq 2048");
  EXPECT_NE(llama.find("attn_implementation=\"sdpa\",  # flash-attention memory"),
            std::string::npos)
      << llama;
  const std::string gemma3 = hf("--preset gemma3-1b --finetune lora --seq 2048");
  EXPECT_NE(gemma3.find("attn_implementation=\"sdpa\",  # planned with sdpa's sliding-window"),
            std::string::npos)
      << gemma3;
  const std::string short_gemma3 = hf("--preset gemma3-1b --finetune lora --seq 256");
  EXPECT_NE(short_gemma3.find("# flash-attention memory"), std::string::npos) << short_gemma3;
  const std::string gemma2 = hf("--preset gemma2-2b --finetune lora --attention flash --seq 1024");
  EXPECT_NE(gemma2.find("attn_implementation=\"flash_attention_2\",\n"), std::string::npos)
      << gemma2;
  const CommandResult axolotl = vrambench(
      "plan --preset gemma3-1b --finetune lora --seq 2048 --device sim:h100-80gb --emit axolotl");
  EXPECT_NE(axolotl.out.find("flash-attention 2 keeps less"), std::string::npos) << axolotl.out;
}

// A preference trainer's plan prints TRL's config with the settings modelled: DPOConfig with the
// batch of pairs and max_length, precompute_ref_log_probs where precomputed, the copy's ref_model;
// axolotl's rl key.
TEST(Cli, PlanEmitsTrlsPreferenceConfig) {
  const std::string args =
      "plan --preset llama3.2-1b --finetune lora --trainer dpo --device sim:rtx4090 --seq 1024";
  const CommandResult dpo = vrambench(args + " --emit hf");
  ASSERT_EQ(dpo.exit_code, 0) << dpo.err;
  for (const char* line :
       {"from trl import DPOConfig, DPOTrainer", "training_args = DPOConfig(", "max_length = 1024",
        "max_length=max_length,", "# pairs", "ref_model=None", "adapters disabled"})
    EXPECT_NE(dpo.out.find(line), std::string::npos) << line << "\n" << dpo.out;
  EXPECT_EQ(dpo.out.find("TrainingArguments"), std::string::npos) << dpo.out;
  EXPECT_EQ(dpo.out.find("precompute_ref_log_probs"), std::string::npos) << dpo.out;
  const CommandResult kto = vrambench(
      "plan --preset llama3.2-1b --trainer kto --reference precomputed --device sim:h100-80gb "
      "--seq 1024 --emit hf");
  ASSERT_EQ(kto.exit_code, 0) << kto.err;
  for (const char* line :
       {"training_args = KTOConfig(", "precompute_ref_log_probs=True,", "# examples"})
    EXPECT_NE(kto.out.find(line), std::string::npos) << line << "\n" << kto.out;
  const CommandResult copy = vrambench(
      "plan --preset llama3.2-1b --trainer dpo --device sim:h100-80gb --seq 1024 --emit hf");
  EXPECT_NE(copy.out.find("# ref_model = AutoModelForCausalLM.from_pretrained"), std::string::npos)
      << copy.out;
  EXPECT_NE(copy.out.find("ref_model=ref_model"), std::string::npos) << copy.out;
  const CommandResult axolotl = vrambench(args + " --emit axolotl");
  EXPECT_NE(axolotl.out.find("rl: dpo\n"), std::string::npos) << axolotl.out;
}

TEST(Cli, PlanShortOfTheTargetShowsRankedAlternatives) {
  const CommandResult run = vrambench(
      "plan --preset qwen2.5-7b --finetune lora --vram 24GiB --seq 2048 --target-batch 16");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("What to change"), std::string::npos) << run.out;
  const CommandResult json = vrambench(
      "plan --preset qwen2.5-7b --finetune lora --vram 24GiB --seq 2048 --target-batch 16 "
      "--emit json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto doc = nlohmann::json::parse(json.out);
  const auto& alternatives = doc.at("alternatives");
  ASSERT_GE(alternatives.size(), 3u) << json.out;
  std::int64_t previous = INT64_MAX;
  bool some_fit = false;
  for (const auto& a : alternatives) {
    const std::int64_t saved = a.at("saved_bytes").get<std::int64_t>();
    EXPECT_GT(saved, 0);
    EXPECT_LE(saved, previous);
    previous = saved;
    some_fit = some_fit || a.at("max_micro_batch").get<std::int64_t>() > 0;
    // Each row of the Markdown table names the change's flags.
    EXPECT_NE(run.out.find(a.at("flags").get<std::string>()), std::string::npos);
  }
  EXPECT_TRUE(some_fit) << json.out;
  EXPECT_LT(doc.at("max_micro_batch").get<std::int64_t>(), 16);
}

TEST(Cli, PlanEmitHfIsPythonThatCompiles) {
  const CommandResult run = vrambench(
      "plan --preset llama3.2-3b --finetune lora --device sim:rtx4090 --target-batch 32 --emit hf");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // The stack that was modelled, no other: a LoRA over the model loaded in bf16, without autocast.
  for (const char* part :
       {"TrainingArguments(", "per_device_train_batch_size=", "gradient_accumulation_steps=",
        "gradient_checkpointing=False", "optim=\"adamw_torch\"", "LoraConfig(",
        "# model = get_peft_model(model, lora_config)", "torch_dtype=torch.bfloat16",
        "# no bf16=True: planned for the model loaded in torch.bfloat16 without autocast"})
    EXPECT_NE(run.out.find(part), std::string::npos) << part << "\n" << run.out;
  EXPECT_EQ(run.out.find("    bf16=True"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("NOTHING FITS"), std::string::npos) << run.out;
  // QLoRA adds the BitsAndBytesConfig, prepare_model_for_kbit_training with the checkpointing
  // modelled, Trainer's autocast; the paged 8-bit optimizer its Hugging Face name.
  const CommandResult qlora = vrambench(kQloraRecipe + " --vram 12GiB --emit hf");
  ASSERT_EQ(qlora.exit_code, 0) << qlora.err;
  for (const char* part :
       {"BitsAndBytesConfig(", "load_in_4bit=True", "bnb_4bit_quant_type=\"nf4\"",
        "bnb_4bit_compute_dtype=torch.bfloat16", "optim=\"paged_adamw_8bit\"",
        "gradient_checkpointing=True", "gradient_checkpointing_kwargs={\"use_reentrant\": False}",
        "# model = prepare_model_for_kbit_training(", "use_gradient_checkpointing=True",
        "    bf16=True,"})
    EXPECT_NE(qlora.out.find(part), std::string::npos) << part << "\n" << qlora.out;
  // A plan of the hand-written trainer's step has no transformers setup to print.
  for (const char* emit : {"hf", "axolotl"}) {
    const CommandResult lean =
        vrambench(std::string("plan --preset gpt2 --framework lean --vram 8GiB --emit ") + emit);
    EXPECT_EQ(lean.exit_code, 2) << lean.out;
    EXPECT_EQ(lines_of(lean.err).size(), 1u) << lean.err;
    EXPECT_NE(lean.err.find("framework lean"), std::string::npos) << lean.err;
    EXPECT_TRUE(lean.out.empty()) << lean.out;
  }
  // LoRA on a mixture of experts' experts: their 3-D weights are PEFT's target_parameters
  // (axolotl's lora_target_parameters), never target_modules.
  const CommandResult experts = vrambench(
      "plan --preset olmoe-1b-7b --finetune lora --lora-targets "
      "q_proj,v_proj,experts.gate_up_proj,experts.down_proj --vram 80GiB --seq 512 --emit hf");
  ASSERT_EQ(experts.exit_code, 0) << experts.err;
  EXPECT_NE(experts.out.find("    target_modules=[\"q_proj\", \"v_proj\"],"), std::string::npos)
      << experts.out;
  EXPECT_NE(experts.out.find("    target_parameters=[\"experts.gate_up_proj\", "
                             "\"experts.down_proj\"],"),
            std::string::npos)
      << experts.out;
  const CommandResult yaml = vrambench(
      "plan --preset olmoe-1b-7b --finetune lora --lora-targets experts.down_proj --vram 80GiB "
      "--seq 512 --emit axolotl");
  ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
  EXPECT_NE(yaml.out.find("lora_target_parameters:\n  - experts.down_proj\n"), std::string::npos)
      << yaml.out;
  EXPECT_EQ(yaml.out.find("lora_target_modules"), std::string::npos) << yaml.out;
  if (std::system("python3 --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 is not installed: the snippets were not compiled";
  for (const CommandResult* snippet : {&run, &qlora, &experts}) {
    const fs::path dir = scratch("hf");
    fs::create_directories(dir);
    const fs::path py = dir / "plan_snippet.py";
    std::ofstream(py) << snippet->out;
    const std::string cmd = "python3 -m py_compile " + py.string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << snippet->out;
    fs::remove_all(dir);
  }
}

TEST(Cli, PlanEmitJsonParsesWithRawIntegersAndUnitsInNames) {
  const CommandResult run = vrambench(
      "plan --preset llama3.2-3b --finetune lora --device sim:rtx4090 --target-batch 32 --emit "
      "json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto doc = nlohmann::json::parse(run.out);
  EXPECT_TRUE(doc.at("capacity_bytes").is_number_integer());
  EXPECT_EQ(doc.at("safety_margin_bytes").get<std::int64_t>(), std::int64_t{1} << 30);
  const auto& plan = doc.at("plan");
  const std::int64_t micro = plan.at("micro_batch").get<std::int64_t>();
  const std::int64_t accum = plan.at("grad_accum").get<std::int64_t>();
  EXPECT_GT(micro, 0);
  EXPECT_EQ(micro * accum, plan.at("effective_batch").get<std::int64_t>());
  EXPECT_GE(micro * accum, 32);
  std::int64_t on_device = 0;
  for (const auto& line : doc.at("budget").at("lines"))
    if (line.at("on_device").get<bool>()) on_device += line.at("bytes").get<std::int64_t>();
  EXPECT_EQ(on_device, doc.at("capacity_bytes").get<std::int64_t>());
  EXPECT_EQ(doc.at("longest_seq").at("max_seq").get<std::int64_t>() % 64, 0);
  EXPECT_EQ(doc.at("config").at("finetune"), "lora");
  // Axolotl's keys for the same plan.
  const CommandResult yaml = vrambench(
      "plan --preset llama3.2-3b --finetune lora --device sim:rtx4090 --target-batch 32 --emit "
      "axolotl");
  ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
  EXPECT_NE(yaml.out.find(fmt_line("micro_batch_size: ", micro)), std::string::npos) << yaml.out;
  EXPECT_NE(yaml.out.find(fmt_line("gradient_accumulation_steps: ", accum)), std::string::npos)
      << yaml.out;
  EXPECT_NE(yaml.out.find("adapter: lora\n"), std::string::npos) << yaml.out;
}

TEST(Cli, PlanVramAutoWithoutAGpuExitsTwoWithOneLine) {
  if (vrambench("devices").out.find("No GPU") == std::string::npos)
    GTEST_SKIP() << "a GPU is present: --vram auto reads its free memory";
  const CommandResult run = vrambench("plan --vram auto");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(lines_of(run.err).size(), 1u) << run.err;
  EXPECT_NE(run.err.find("--vram auto"), std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
  // A sim profile has its own capacity: auto means it.
  const CommandResult sim = vrambench("plan --vram auto --device sim:rtx4090 --emit json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(nlohmann::json::parse(sim.out).at("capacity_bytes").get<std::int64_t>(),
            std::int64_t{24564} << 20);
}

TEST(Cli, PlanMistakesExitTwoWithOneLineAndNoOutput) {
  for (const std::string args :
       {"plan --target-batch 0", "plan --target-batch x", "plan --emit yaml",
        "plan --safety-margin 100%", "plan --safety-margin 7GiB --vram 6GiB",
        "plan --safety-margin 1XB", "plan --seq max --sweep seq=512,1024", "plan --seq -5",
        "plan --batch 4", "plan --target-batch 8 --grad-accum 2", "plan --vram 6XB",
        "plan --emit hf --sweep seq=512,1024", "plan --emit axolotl --sweep preset=gpt2,tiny",
        "plan --vram auto --device cpu", "plan --preset nope", "plan --device sim:nope",
        "--over sideways", "--over seq --seq 512"}) {
    const CommandResult run = vrambench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_NE(run.err.find("error"), std::string::npos) << args << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << args << ": " << run.out;
  }
}

// --model: a config.json (or its folder) as the model, a sweep axis like --preset, refused in one
// line with no output where its type is not modelled, and never together with --preset.
TEST(Cli, ModelFromConfigJsonIsAModelAndASweepAxis) {
  const fs::path dir = scratch("model");
  fs::create_directories(dir / "Qwen2.5-0.5B");
  fs::create_directories(dir / "mamba-130m");
  std::ofstream(dir / "Qwen2.5-0.5B" / "config.json")
      << R"({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
             "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "vocab_size": 151936, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";
  std::ofstream(dir / "mamba-130m" / "config.json")
      << R"({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24})";
  const std::string qwen = (dir / "Qwen2.5-0.5B").string();
  const CommandResult one =
      vrambench("estimate --quiet --model " + qwen + " --out " + dir.string() + " --name one");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("| Qwen2.5-0.5B "), std::string::npos) << one.out;
  const auto doc = nlohmann::json::parse(slurp(dir / "one.json"));
  EXPECT_EQ(doc.at("rows").at(0).at("params"), 494'032'768);
  // As an axis beside a preset's config: each row names its config.json and counts its model.
  const CommandResult sweep =
      vrambench("estimate --quiet --sweep model=" + qwen + "," + (dir / "Qwen2.5-0.5B").string() +
                "/config.json --out " + dir.string() + " --name sweep");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const auto rows = csv_of(dir / "sweep.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0][0], "model");
  EXPECT_EQ(rows[1][0], qwen);
  EXPECT_EQ(rows[1].at(column(rows[0], "params")), "494032768");
  for (const std::string& args : {"estimate --model " + (dir / "mamba-130m").string(),
                                  "estimate --model " + (dir / "nowhere").string(),
                                  "estimate --preset gpt2 --model " + qwen}) {
    const CommandResult run = vrambench(args);
    EXPECT_EQ(run.exit_code, 2) << args << ": " << run.err;
    EXPECT_EQ(lines_of(run.err).size(), 1u) << args << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << args << ": " << run.out;
  }
  EXPECT_NE(vrambench("estimate --model " + (dir / "mamba-130m").string())
                .err.find("unsupported model_type 'mamba'"),
            std::string::npos);
  fs::remove_all(dir);
}

// A mixture of experts from its published config.json: the headline sweep runs, each row says
// the routing it assumed, and the estimate counts every expert and the active ones.
TEST(Cli, MixtralConfigJsonSweepsAndCountsItsExperts) {
  const fs::path dir = scratch("mixtral");
  const std::string model = std::string(VRAMBENCH_SOURCE_DIR) + "/tests/data/models/mixtral-8x7b";
  const CommandResult sweep =
      vrambench("--quiet --model " + model + " --finetune lora --device sim:h100-80gb --sweep " +
                "seq=512..8192 --out " + dir.string() + " --name sweep");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const auto rows = csv_of(dir / "sweep.csv");
  ASSERT_EQ(rows.size(), 6u);  // a header and seq 512, 1024, 2048, 4096, 8192
  const std::size_t routing = column(rows[0], "routing");
  ASSERT_LT(routing, rows[0].size());
  for (std::size_t r = 1; r < rows.size(); ++r) EXPECT_EQ(rows[r][routing], "balanced");
  const CommandResult estimate =
      vrambench("estimate --quiet --model " + model + " --batch 1 --seq 512 --out " + dir.string() +
                " --name estimate");
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  const auto est = csv_of(dir / "estimate.csv");
  ASSERT_EQ(est.size(), 2u);
  EXPECT_EQ(est[1].at(column(est[0], "params")), "46702792704");
  EXPECT_EQ(est[1].at(column(est[0], "active_params")), "12879925248");
  fs::remove_all(dir);
}

// The preference trainers' headline sweep: each row names its trainer and reference (TRL's
// default under LoRA: the adapters disabled), the summary says a batch is of pairs, and a full
// fine-tuning DPO row holds one more model than SFT (its copy) where LoRA's adapters do not.
TEST(Cli, DpoSweepNamesItsTrainerAndReference) {
  const fs::path dir = scratch("dpo");
  const CommandResult sweep = vrambench(
      "--preset llama3.2-3b --finetune lora --trainer dpo --device sim:rtx4090 --sweep "
      "seq=512..4096 --out " +
      dir.string() + " --name sweep");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  EXPECT_NE(sweep.out.find("trainer dpo (a batch of pairs: chosen and rejected, 2 sequences each), "
                           "reference adapters"),
            std::string::npos)
      << sweep.out;
  const auto rows = csv_of(dir / "sweep.csv");
  ASSERT_EQ(rows.size(), 5u);  // a header and seq 512, 1024, 2048, 4096
  for (std::size_t r = 1; r < rows.size(); ++r) {
    EXPECT_EQ(rows[r].at(column(rows[0], "trainer")), "dpo");
    EXPECT_EQ(rows[r].at(column(rows[0], "reference")), "adapters");
  }
  // Each recipe's estimated peak at batch 1.
  auto peak = [&](const std::string& args, const std::string& name) {
    const CommandResult r = vrambench("estimate --quiet --preset llama3.2-1b --batch 1 --seq 512 " +
                                      args + " --out " + dir.string() + " --name " + name);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto est = csv_of(dir / (name + ".csv"));
    return std::stoll(est.at(1).at(column(est[0], "est_peak_bytes")));
  };
  const long long sft = peak("", "sft"), dpo = peak("--trainer dpo", "dpo");
  const long long lora = peak("--finetune lora", "lora"),
                  lora_dpo = peak("--finetune lora --trainer dpo", "lora-dpo");
  // 1B parameters in bf16: the copy is about 2.5 GB more; the adapters' reference adds no weights,
  // only the reference forward's transients and the second sequence of the pair.
  EXPECT_GT(dpo - sft, 2'400'000'000LL);
  EXPECT_LT(lora_dpo - lora, dpo - sft - 2'000'000'000LL);
  fs::remove_all(dir);
}

// A config's torch_dtype is the run's dtype unless --dtype (or a dtype axis) says otherwise; in a
// sweep over models each takes its own.
TEST(Cli, ModelsTorchDtypeIsTheDefaultDtype) {
  const fs::path dir = scratch("model-dtype");
  for (const auto& [name, dtype] : {std::pair{"f32", "float32"}, std::pair{"b16", "bfloat16"}}) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "config.json")
        << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
               "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
               "torch_dtype": ")"
        << dtype << "\"}";
  }
  const std::string f32 = (dir / "f32").string(), b16 = (dir / "b16").string();
  // The summary's recipe names the dtypes; where models differ, a dtype column says whose.
  auto dtypes = [&](const std::string& args) {
    const CommandResult run = vrambench("estimate --quiet --seq 64 " + args + " --out " +
                                        dir.string() + " --name t --format json,csv");
    EXPECT_EQ(run.exit_code, 0) << args << ": " << run.err;
    const auto doc = nlohmann::json::parse(slurp(dir / "t.json"));
    const std::string recipe = doc.at("provenance").at("extra").at("recipe");
    std::string column;
    const auto rows = csv_of(dir / "t.csv");
    const auto at = std::find(rows[0].begin(), rows[0].end(), "dtype") - rows[0].begin();
    for (std::size_t r = 1; r < rows.size() && at < std::ssize(rows[0]); ++r)
      column += (r > 1 ? "," : "") + rows[r][static_cast<std::size_t>(at)];
    return recipe.substr(0, recipe.find(',')) + " | " + column;
  };
  EXPECT_EQ(dtypes("--model " + f32), "dtype fp32 | ");
  EXPECT_EQ(dtypes("--model " + f32 + " --dtype bf16"), "dtype bf16 | ");
  EXPECT_EQ(dtypes("--sweep model=" + f32 + "," + b16), "dtype fp32/bf16 | fp32,bf16");
  EXPECT_EQ(dtypes("--dtype fp16 --sweep model=" + f32 + "," + b16), "dtype fp16 | ");
  EXPECT_EQ(dtypes("--sweep model=" + f32 + "," + b16 + " --sweep dtype=fp16"), "dtype fp16 | ");
  fs::remove_all(dir);
}

// The margin is for planning only: search's rows are the same with any margin, and plan's
// whole-capacity search is search's answer.
TEST(Cli, SafetyMarginNeverChangesSearchResults) {
  const std::string config = "--device sim:rtx4090 --preset gpt2 --sweep seq=512,2048 ";
  const fs::path dir = scratch("margin");
  const CommandResult plain = vrambench("search " + config + "--out " + dir.string() + " --name a");
  const CommandResult margin =
      vrambench("search " + config + "--safety-margin 8GiB --out " + dir.string() + " --name b");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(margin.exit_code, 0) << margin.err;
  const auto a = csv_of(dir / "a.csv");
  const auto b = csv_of(dir / "b.csv");
  EXPECT_EQ(a, b);
  EXPECT_EQ(table_rows(plain.out), table_rows(margin.out));
  const std::size_t max_col = column(a[0], "sim_max_batch");
  const CommandResult plan = vrambench(
      "plan --device sim:rtx4090 --preset gpt2 --seq 2048 --safety-margin 8GiB --emit json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto doc = nlohmann::json::parse(plan.out);
  EXPECT_EQ(doc.at("max_micro_batch_whole_capacity").get<std::int64_t>(),
            std::stoll(a[2][max_col]));
  EXPECT_LT(doc.at("max_micro_batch").get<std::int64_t>(), std::stoll(a[2][max_col]));
  fs::remove_all(dir);
}

TEST(Cli, SearchOverSeqFindsMultiplesOf64ThatShrinkWithTheBatch) {
  const fs::path dir = scratch("over-seq");
  const CommandResult run = vrambench(
      "--device sim:rtx4090 --preset gpt2 --over seq "
      "--sweep batch=1,4 --out " +
      dir.string() + " --name s");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(table_rows(run.out).size(), 2u) << run.out;
  const auto csv = csv_of(dir / "s.csv");
  ASSERT_EQ(csv.size(), 3u);
  const std::size_t max_seq = column(csv[0], "sim_max_seq");
  const std::int64_t at_one = std::stoll(csv[1][max_seq]), at_four = std::stoll(csv[2][max_seq]);
  EXPECT_EQ(at_one % 64, 0);
  EXPECT_EQ(at_four % 64, 0);
  EXPECT_GT(at_one, at_four);
  EXPECT_GT(at_four, 0);
  // The search's answer agrees with the batch search at that sequence: batch 4 fits there.
  const CommandResult check =
      vrambench("--device sim:rtx4090 --preset gpt2 --seq " + std::to_string(at_four) + " --out " +
                dir.string() + " --name c");
  ASSERT_EQ(check.exit_code, 0) << check.err;
  const auto rows = table_rows(check.out);
  ASSERT_EQ(rows.size(), 1u);
  const auto cells = csv_of(dir / "c.csv");
  EXPECT_GE(std::stoll(cells[1][column(cells[0], "sim_max_batch")]), 4);
  fs::remove_all(dir);
}

}  // namespace