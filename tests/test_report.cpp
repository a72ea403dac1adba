// Result tables: Markdown alignment, CSV quoting, JSON types, provenance and the result writer.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "core/version.h"
#include "report/table.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

// Five columns, one of each kind, and two rows that exercise every printed form.
Table sample_table() {
  Table t;
  t.columns = {{"model", "model", CellKind::text},
               {"seq", "seq", CellKind::integer},
               {"peak_bytes", "peak", CellKind::bytes},
               {"err", "err", CellKind::percent},
               {"under", "under", CellKind::flag}};
  t.add_row({Cell::of_text("gpt2"), Cell::of_int(1024), Cell::of_bytes(1536 * KiB),
             Cell::of_percent(0.031), Cell::of_flag(true)});
  t.add_row({Cell::of_text("llama2-7b"), Cell::none(CellKind::integer), Cell::of_bytes(80 * GiB),
             Cell::of_percent(-0.12), Cell::of_flag(false)});
  return t;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ReportCell, ConstructorsSetKindAndValue) {
  EXPECT_EQ(Cell::of_text("a").kind, CellKind::text);
  EXPECT_EQ(Cell::of_text("a").text, "a");
  EXPECT_EQ(Cell::of_int(-5).integer, -5);
  EXPECT_EQ(Cell::of_bytes(4096).kind, CellKind::bytes);
  EXPECT_EQ(Cell::of_bytes(4096).integer, 4096);
  EXPECT_DOUBLE_EQ(Cell::of_percent(0.25).real, 0.25);
  EXPECT_EQ(Cell::of_flag(true).kind, CellKind::flag);
  EXPECT_TRUE(Cell::none(CellKind::bytes).empty);
  EXPECT_EQ(Cell::none(CellKind::bytes).kind, CellKind::bytes);
  EXPECT_FALSE(Cell::of_int(0).empty);
}

TEST(ReportTable, AddRowChecksTheWidth) {
  Table t = sample_table();
  EXPECT_THROW(t.add_row({Cell::of_int(1)}), InternalError);
  EXPECT_EQ(t.rows.size(), 2u);
  EXPECT_THROW(csv_row(t, {Cell::of_int(1)}), InternalError);
  EXPECT_THROW(json_row(t, {Cell::of_int(1)}), InternalError);
}

TEST(ReportMarkdown, ExactAlignedTable) {
  // Widths: model 9 ("llama2-7b"), seq 4, peak 9 ("80.00 GiB"), err 6 ("-12.0%"), under 5.
  const std::string expected =
      "| model     |  seq |      peak |    err | under |\n"
      "| --------- | ---: | --------: | -----: | ----- |\n"
      "| gpt2      | 1024 |   1.5 MiB |  +3.1% | yes   |\n"
      "| llama2-7b |    - | 80.00 GiB | -12.0% |       |\n";
  EXPECT_EQ(to_markdown(sample_table()), expected);
}

TEST(ReportMarkdown, EveryLineHasTheSameLength) {
  Table t = sample_table();
  t.add_row({Cell::of_text("a much longer model name"), Cell::of_int(123456789), Cell::of_bytes(12),
             Cell::of_percent(1.5), Cell::none(CellKind::flag)});
  const std::vector<std::string> lines = lines_of(to_markdown(t));
  ASSERT_EQ(lines.size(), 5u);
  for (const std::string& line : lines) EXPECT_EQ(line.size(), lines[0].size()) << line;
  EXPECT_EQ(lines[4], "| a much longer model name | 123456789 |      12 B | +150.0% | -     |");
}

TEST(ReportMarkdown, HeaderOnlyAndEscapes) {
  Table t;
  t.columns = {{"k", "k", CellKind::text}, {"n", "n", CellKind::integer}};
  EXPECT_EQ(to_markdown(t), "| k   |    n |\n| --- | ---: |\n");
  t.add_row({Cell::of_text("a|b"), Cell::of_int(7)});
  EXPECT_EQ(lines_of(to_markdown(t))[2], "| a\\|b |    7 |");
}

TEST(ReportMarkdown, WidthCountsCharactersNotBytes) {
  Table t;
  t.columns = {{"shape", "shape", CellKind::text}};
  t.add_row({Cell::of_text("2×4")});  // 3 characters, 4 bytes
  EXPECT_EQ(to_markdown(t), "| shape |\n| ----- |\n| 2×4   |\n");
}

TEST(ReportCsv, RawValues) {
  const Table t = sample_table();
  EXPECT_EQ(csv_header(t), "model,seq,peak_bytes,err,under");
  EXPECT_EQ(csv_row(t, t.rows[0]), "gpt2,1024,1572864,0.031,1");
  EXPECT_EQ(csv_row(t, t.rows[1]), "llama2-7b,,85899345920,-0.12,0");
}

TEST(ReportCsv, PercentKeepsSixSignificantDigits) {
  Table t;
  t.columns = {{"err", "err", CellKind::percent}};
  EXPECT_EQ(csv_row(t, {Cell::of_percent(1.0 / 3.0)}), "0.333333");
  EXPECT_EQ(csv_row(t, {Cell::of_percent(-0.0123456789)}), "-0.0123457");
  EXPECT_EQ(csv_row(t, {Cell::none(CellKind::percent)}), "");
}

TEST(ReportCells, ReadBackFromCsvTextAndJsonTheyPrintTheSame) {
  const Table t = sample_table();
  for (const auto& row : t.rows) {
    std::vector<Cell> from_text, from_json;
    const nlohmann::json json = json_row(t, row);
    for (std::size_t c = 0; c < row.size(); ++c) {
      from_text.push_back(cell_from_text(t.columns[c].kind, cell_text(row[c])));
      from_json.push_back(cell_from_json(t.columns[c].kind, json.at(t.columns[c].key)));
    }
    EXPECT_EQ(csv_row(t, from_text), csv_row(t, row));
    EXPECT_EQ(json_row(t, from_json), json);
  }
  EXPECT_THROW(cell_from_text(CellKind::integer, "12a"), UsageError);
  EXPECT_THROW(cell_from_text(CellKind::flag, "2"), UsageError);
  EXPECT_THROW(cell_from_json(CellKind::bytes, "12"), UsageError);
  for (const CellKind kind :
       {CellKind::text, CellKind::integer, CellKind::bytes, CellKind::percent, CellKind::flag})
    EXPECT_EQ(kind_from_name(kind_name(kind)), kind);
  EXPECT_THROW(kind_from_name("float"), UsageError);
}

TEST(ReportCsv, QuotesTextThatNeedsIt) {
  Table t;
  t.columns = {{"a", "a", CellKind::text}, {"b", "b", CellKind::text}};
  EXPECT_EQ(csv_row(t, {Cell::of_text("plain"), Cell::of_text("x,y")}), "plain,\"x,y\"");
  EXPECT_EQ(csv_row(t, {Cell::of_text("say \"hi\""), Cell::of_text("two\nlines")}),
            "\"say \"\"hi\"\"\",\"two\nlines\"");
  EXPECT_EQ(csv_row(t, {Cell::of_text(""), Cell::none(CellKind::text)}), ",");
  t.columns[1].key = "b,c";
  EXPECT_EQ(csv_header(t), "a,\"b,c\"");
}

TEST(ReportTable, APercentWithoutAFiniteValuePrintsAsEmpty) {
  Table t;
  t.columns = {{"err", "err", CellKind::percent}};
  t.add_row({Cell::of_percent(std::nan(""))});
  EXPECT_EQ(to_markdown(t), "|  err |\n| ---: |\n|    - |\n");
  EXPECT_EQ(csv_row(t, t.rows[0]), "");
  EXPECT_TRUE(json_row(t, t.rows[0])["err"].is_null());
}

TEST(ReportJson, TypesPerKind) {
  const Table t = sample_table();
  const nlohmann::json first = json_row(t, t.rows[0]);
  ASSERT_TRUE(first.is_object());
  EXPECT_EQ(first.size(), 5u);
  EXPECT_TRUE(first["model"].is_string());
  EXPECT_EQ(first["model"], "gpt2");
  EXPECT_TRUE(first["seq"].is_number_integer());
  EXPECT_EQ(first["seq"], 1024);
  EXPECT_TRUE(first["peak_bytes"].is_number_integer());
  EXPECT_EQ(first["peak_bytes"], 1572864);
  EXPECT_TRUE(first["err"].is_number_float());
  EXPECT_DOUBLE_EQ(first["err"].get<double>(), 0.031);
  EXPECT_TRUE(first["under"].is_boolean());
  EXPECT_EQ(first["under"], true);

  const nlohmann::json second = json_row(t, t.rows[1]);
  EXPECT_TRUE(second["seq"].is_null());
  EXPECT_EQ(second["under"], false);
  EXPECT_EQ(second["peak_bytes"], 85899345920);
}

TEST(ReportProvenance, QuotesTheCommandLineForAShell) {
  const char* argv[] = {"vrambench", "run",       "--sweep", "seq=[512:4096:512]",
                        "--note",    "it's here", "",        "--out=results/h100",
                        "a;b"};
  const Provenance p = make_provenance(9, argv, "sim:h100-80gb");
  EXPECT_EQ(p.command_line,
            "vrambench run --sweep 'seq=[512:4096:512]' --note 'it'\\''s here' '' "
            "--out=results/h100 'a;b'");
  EXPECT_EQ(p.device, "sim:h100-80gb");
  EXPECT_EQ(p.tool_version, kVersion);
  EXPECT_EQ(p.git_commit, kGitCommit);
  EXPECT_TRUE(std::regex_match(p.utc_time, std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)")))
      << p.utc_time;
  // The quoting reads back into the same words.
  EXPECT_EQ(shell_words(p.command_line), std::vector<std::string>(argv, argv + 9));
}

TEST(ReportProvenance, ToJsonHoldsEveryField) {
  Provenance p{"1.2.3", "abc123", "cpu", "2026-11-22T10:00:00Z", "vrambench run", {}};
  p.extra = {{"cuda", "12.4"}, {"driver", "550.54"}};
  const nlohmann::json j = p;
  EXPECT_EQ(j["tool_version"], "1.2.3");
  EXPECT_EQ(j["git_commit"], "abc123");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["utc_time"], "2026-11-22T10:00:00Z");
  EXPECT_EQ(j["command_line"], "vrambench run");
  EXPECT_EQ(j["extra"]["cuda"], "12.4");
  EXPECT_EQ(j["extra"]["driver"], "550.54");
}

// A fresh folder per test under the system temp directory, removed afterwards.
class ReportWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("vrambench-report-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static Provenance provenance() {
    return {"1.2.3",           "abc123", "sim:test", "2026-11-22T10:00:00Z", "vrambench run 'a b'",
            {{"cuda", "12.4"}}};
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static Table header_only() {
    Table t = sample_table();
    t.rows.clear();
    return t;
  }

  fs::path root_;
};

// The CSV is the header and the rows, nothing else: provenance lives in the JSON.
constexpr std::string_view kCsvHeader = "model,seq,peak_bytes,err,under\n";

TEST_F(ReportWriter, NothingIsCreatedBeforeTheFirstRow) {
  const fs::path folder = root_ / "out" / "nested";
  ResultWriter writer(folder.string(), "sweep", header_only(), provenance(), true, true);
  EXPECT_FALSE(fs::exists(root_ / "out"));
  writer.append(sample_table().rows[0]);
  EXPECT_TRUE(fs::exists(folder / "sweep.csv.partial"));
  EXPECT_TRUE(fs::exists(folder / "sweep.jsonl.partial"));
}

TEST_F(ReportWriter, PartialFilesHoldEveryAppendedRow) {
  const Table rows = sample_table();
  ResultWriter writer(root_.string(), "sweep", header_only(), provenance(), true, true);
  writer.append(rows.rows[0]);
  EXPECT_EQ(read(root_ / "sweep.csv.partial"),
            std::string(kCsvHeader) + "gpt2,1024,1572864,0.031,1\n");
  writer.append(rows.rows[1]);
  EXPECT_EQ(read(root_ / "sweep.csv.partial"), std::string(kCsvHeader) +
                                                   "gpt2,1024,1572864,0.031,1\n"
                                                   "llama2-7b,,85899345920,-0.12,0\n");
  const std::vector<std::string> json_lines = lines_of(read(root_ / "sweep.jsonl.partial"));
  ASSERT_EQ(json_lines.size(), 2u);
  // Keys in column order, one object per line.
  EXPECT_EQ(json_lines[0],
            R"({"model":"gpt2","seq":1024,"peak_bytes":1572864,"err":0.031,"under":true})");
  const nlohmann::json second = nlohmann::json::parse(json_lines[1]);
  EXPECT_EQ(second["model"], "llama2-7b");
  EXPECT_TRUE(second["seq"].is_null());
  EXPECT_FALSE(fs::exists(root_ / "sweep.csv"));
  EXPECT_FALSE(fs::exists(root_ / "sweep.json"));
}

TEST_F(ReportWriter, FinishWritesFinalFilesAndRemovesPartials) {
  const Table rows = sample_table();
  ResultWriter writer(root_.string(), "sweep", header_only(), provenance(), true, true);
  writer.append(rows.rows[0]);
  writer.append(rows.rows[1]);
  const std::string partial_csv = read(root_ / "sweep.csv.partial");
  writer.finish(rows, {{"capacity_bytes", 1024}});

  EXPECT_EQ(writer.written_files(), (std::vector<std::string>{(root_ / "sweep.csv").string(),
                                                              (root_ / "sweep.json").string()}));
  EXPECT_EQ(read(root_ / "sweep.csv"), partial_csv);
  for (const char* gone :
       {"sweep.csv.partial", "sweep.jsonl.partial", "sweep.csv.tmp", "sweep.json.tmp"})
    EXPECT_FALSE(fs::exists(root_ / gone)) << gone;

  const nlohmann::json doc = nlohmann::json::parse(read(root_ / "sweep.json"));
  EXPECT_EQ(doc["provenance"]["tool_version"], "1.2.3");
  EXPECT_EQ(doc["provenance"]["extra"]["cuda"], "12.4");
  EXPECT_EQ(doc["summary"]["capacity_bytes"], 1024);
  ASSERT_EQ(doc["columns"].size(), 5u);
  EXPECT_EQ(doc["columns"][2],
            (nlohmann::json{{"key", "peak_bytes"}, {"title", "peak"}, {"kind", "bytes"}}));
  EXPECT_EQ(doc["columns"][3]["kind"], "percent");
  ASSERT_EQ(doc["rows"].size(), 2u);
  EXPECT_EQ(doc["rows"][0], json_row(rows, rows.rows[0]));
  EXPECT_EQ(doc["rows"][1], json_row(rows, rows.rows[1]));
  EXPECT_THROW(writer.append(rows.rows[0]), InternalError);
}

TEST_F(ReportWriter, OnlyTheFormatsAskedFor) {
  ResultWriter writer(root_.string(), "csv_only", header_only(), provenance(), true, false);
  writer.append(sample_table().rows[0]);
  EXPECT_FALSE(fs::exists(root_ / "csv_only.jsonl.partial"));
  writer.finish(sample_table(), {});
  EXPECT_TRUE(fs::exists(root_ / "csv_only.csv"));
  EXPECT_FALSE(fs::exists(root_ / "csv_only.json"));
  EXPECT_EQ(writer.written_files().size(), 1u);

  const fs::path unused = root_ / "none";
  ResultWriter silent(unused.string(), "x", header_only(), provenance(), false, false);
  silent.append(sample_table().rows[0]);
  silent.finish(sample_table(), {});
  EXPECT_FALSE(fs::exists(unused));
  EXPECT_TRUE(silent.written_files().empty());
}

TEST_F(ReportWriter, FinishWithoutRowsWritesTheHeader) {
  const fs::path folder = root_ / "empty";
  ResultWriter writer(folder.string(), "sweep", header_only(), provenance(), true, true);
  writer.finish(header_only(), nlohmann::json());
  EXPECT_EQ(read(folder / "sweep.csv"), std::string(kCsvHeader));
  const nlohmann::json doc = nlohmann::json::parse(read(folder / "sweep.json"));
  EXPECT_EQ(doc["summary"], nlohmann::json::object());
  EXPECT_TRUE(doc["rows"].is_array());
  EXPECT_TRUE(doc["rows"].empty());
  EXPECT_FALSE(fs::exists(folder / "sweep.csv.partial"));
}

TEST_F(ReportWriter, ResumeStartsThePartialsWithTheKeptRowsAndFinishTakesTheFinalOrder) {
  const Table rows = sample_table();
  {
    ResultWriter first(root_.string(), "sweep", header_only(), provenance(), true, true);
    first.append(rows.rows[1]);  // then the run is killed
  }
  ResultWriter writer(root_.string(), "sweep", header_only(), provenance(), true, true);
  writer.resume({rows.rows[1]});
  EXPECT_EQ(read(root_ / "sweep.csv.partial"),
            std::string(kCsvHeader) + "llama2-7b,,85899345920,-0.12,0\n");
  EXPECT_EQ(lines_of(read(root_ / "sweep.jsonl.partial")).size(), 1u);
  writer.append(rows.rows[0]);
  EXPECT_EQ(lines_of(read(root_ / "sweep.csv.partial")).size(), 3u);
  EXPECT_THROW(writer.resume({}), InternalError);
  writer.finish(rows, {});
  // The final file has the rows in the order of the table given, not in the order they finished.
  EXPECT_EQ(read(root_ / "sweep.csv"), std::string(kCsvHeader) +
                                           "gpt2,1024,1572864,0.031,1\n"
                                           "llama2-7b,,85899345920,-0.12,0\n");
  EXPECT_FALSE(fs::exists(root_ / "sweep.csv.partial"));
}

TEST_F(ReportWriter, AFileInPlaceOfTheFolderIsAUsageError) {
  const fs::path file = root_ / "taken";
  std::ofstream(file) << "not a folder";
  for (const fs::path& folder : {file, file / "sub"}) {
    ResultWriter writer(folder.string(), "sweep", header_only(), provenance(), true, true);
    try {
      writer.append(sample_table().rows[0]);
      FAIL() << "no UsageError for " << folder;
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(folder.string()), std::string::npos) << message;
      EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST_F(ReportWriter, WrongRowWidthIsAnInternalError) {
  ResultWriter writer(root_.string(), "sweep", header_only(), provenance(), true, true);
  EXPECT_THROW(writer.append({Cell::of_int(1)}), InternalError);
  EXPECT_FALSE(fs::exists(root_ / "sweep.csv.partial"));
}

}  // namespace
}  // namespace vrambench
