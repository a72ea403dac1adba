// The result writer: rows written as they finish and not held, the final files in index order
// made from the JSON Lines partial, --resume's rewrite of the partials, one run per FOLDER/NAME.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "report/read.h"
#include "report/writer.h"

namespace vrambench {
namespace {

namespace fs = std::filesystem;

Table header() {
  Table t;
  t.columns = {{"seq", "seq", CellKind::integer},
               {"peak_bytes", "peak", CellKind::bytes},
               {"err", "err", CellKind::percent},
               {"note", "note", CellKind::text}};
  return t;
}

std::vector<Cell> row(std::int64_t seq) {
  return {Cell::of_int(seq), Cell::of_bytes(seq * 1000),
          Cell::of_percent(0.5 / static_cast<double>(seq)),
          Cell::of_text(seq % 2 ? "odd, quoted" : "")};
}

std::string csv_line(std::int64_t seq) {
  return fmt::format("{},{},{:.6g},{}\n", seq, seq * 1000, 0.5 / static_cast<double>(seq),
                     seq % 2 ? "\"odd, quoted\"" : "");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A fresh folder per test under the system temp directory, removed afterwards.
class Writer : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("vrambench-writer-{}-{}", ::getpid(),
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
  fs::path root_;
};

constexpr std::string_view kCsvHeader = "seq,peak_bytes,err,note\n";

// The lock is taken when the writer is made; nothing else is written before the first row, and a
// writer that wrote nothing leaves nothing, the folders it made included.
TEST_F(Writer, OnlyTheLockBeforeTheFirstRowAndNothingAfterAWriterThatWroteNothing) {
  const fs::path folder = root_ / "out" / "nested";
  {
    ResultWriter writer(folder.string(), "sweep", header(), provenance(), true, true);
    EXPECT_TRUE(fs::exists(folder / "sweep.lock"));
    EXPECT_FALSE(fs::exists(folder / "sweep.csv.partial"));
  }
  EXPECT_FALSE(fs::exists(root_ / "out"));
  ResultWriter writer(folder.string(), "sweep", header(), provenance(), true, true);
  writer.append(0, row(1));
  EXPECT_TRUE(fs::exists(folder / "sweep.csv.partial"));
  EXPECT_TRUE(fs::exists(folder / "sweep.jsonl.partial"));
}

// The JSON Lines partial is the run's record: its provenance, then each row with its details, as
// it finishes; the CSV partial has the rows as a CSV.
TEST_F(Writer, PartialsHoldTheProvenanceAndEveryRowWithItsDetails) {
  ResultWriter writer(root_.string(), "sweep", header(), provenance(), true, true);
  writer.append(1, row(2), {{"trials", 3}});
  writer.append(0, row(1));
  EXPECT_EQ(read(root_ / "sweep.csv.partial"), std::string(kCsvHeader) + csv_line(2) + csv_line(1));
  const std::vector<std::string> lines = lines_of(read(root_ / "sweep.jsonl.partial"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["provenance"], nlohmann::json(provenance()));
  // Keys in column order, the details last.
  EXPECT_EQ(lines[1], R"({"seq":2,"peak_bytes":2000,"err":0.25,"note":"","details":{"trials":3}})");
  EXPECT_EQ(lines[2], R"({"seq":1,"peak_bytes":1000,"err":0.5,"note":"odd, quoted"})");
  EXPECT_EQ(writer.size(), 2u);
  std::vector<std::int64_t> order;
  writer.for_each_row([&](const std::vector<Cell>& cells) { order.push_back(cells[0].integer); });
  EXPECT_EQ(order, (std::vector<std::int64_t>{1, 2}));
  EXPECT_FALSE(fs::exists(root_ / "sweep.csv"));
}

// The final files have the rows in index order, whatever order they finished in; the JSON is the
// document dump(2) prints, with every row's details in the summary.
TEST_F(Writer, FinishWritesTheRowsInIndexOrderAndRemovesThePartials) {
  ResultWriter writer(root_.string(), "sweep", header(), provenance(), true, true);
  for (std::int64_t i : {2, 0, 1})
    writer.append(static_cast<std::size_t>(i), row(i + 1), {{"i", i}});
  const nlohmann::json summary = {{"zeta", 1}, {"alpha", {{"b", 2}}}, {"seconds", 0.5}};
  writer.finish(summary, true);
  EXPECT_EQ(writer.written_files(), (std::vector<std::string>{(root_ / "sweep.csv").string(),
                                                              (root_ / "sweep.json").string()}));
  EXPECT_EQ(read(root_ / "sweep.csv"),
            std::string(kCsvHeader) + csv_line(1) + csv_line(2) + csv_line(3));
  for (const char* gone : {"sweep.csv.partial", "sweep.jsonl.partial", "sweep.csv.tmp",
                           "sweep.json.tmp", "sweep.lock"})
    EXPECT_FALSE(fs::exists(root_ / gone)) << gone;

  // What the whole document, held and printed at once, would be.
  nlohmann::ordered_json expected = nlohmann::ordered_json::object();
  expected["provenance"] = nlohmann::json(provenance());
  nlohmann::json full_summary = summary;
  full_summary["details"] = {{{"i", 0}}, {{"i", 1}}, {{"i", 2}}};
  expected["summary"] = full_summary;
  nlohmann::ordered_json columns = nlohmann::ordered_json::array();
  for (const Column& c : header().columns)
    columns.push_back({{"key", c.key}, {"title", c.title}, {"kind", kind_name(c.kind)}});
  expected["columns"] = columns;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::int64_t seq : {1, 2, 3}) {
    nlohmann::ordered_json r = nlohmann::ordered_json::object();
    const nlohmann::json values = json_row(header(), row(seq));
    for (const Column& c : header().columns) r[c.key] = values.at(c.key);
    rows.push_back(r);
  }
  expected["rows"] = rows;
  EXPECT_EQ(read(root_ / "sweep.json"), expected.dump(2) + '\n');
  EXPECT_THROW(writer.append(3, row(4)), InternalError);
}

TEST_F(Writer, FinishWithoutRowsOrSummaryIsTheHeaderAlone) {
  for (const bool details : {false, true}) {
    const fs::path folder = root_ / (details ? "with" : "without");
    ResultWriter writer(folder.string(), "sweep", header(), provenance(), true, true);
    writer.finish(nlohmann::json(), details);
    EXPECT_EQ(read(folder / "sweep.csv"), std::string(kCsvHeader));
    const std::string text = read(folder / "sweep.json");
    const nlohmann::json doc = nlohmann::json::parse(text);
    const nlohmann::json no_rows_details = {{"details", nlohmann::json::array()}};
    EXPECT_EQ(doc["summary"], details ? no_rows_details : nlohmann::json::object());
    EXPECT_EQ(doc["rows"], nlohmann::json::array());
    EXPECT_NE(text.find("\"rows\": []\n}"), std::string::npos) << text;
  }
}

TEST_F(Writer, OnlyTheFormatsAskedForAndNoFileWithNeither) {
  ResultWriter writer(root_.string(), "csv_only", header(), provenance(), true, false);
  writer.append(0, row(1));
  writer.finish({}, false);
  EXPECT_TRUE(fs::exists(root_ / "csv_only.csv"));
  EXPECT_FALSE(fs::exists(root_ / "csv_only.json"));
  EXPECT_FALSE(fs::exists(root_ / "csv_only.jsonl.partial"));
  EXPECT_EQ(writer.written_files().size(), 1u);

  // Markdown alone: no file, no folder, no lock; the rows are held for the table.
  const fs::path unused = root_ / "none";
  ResultWriter silent(unused.string(), "x", header(), provenance(), false, false);
  silent.append(1, row(2));
  silent.append(0, row(1));
  std::vector<std::int64_t> order;
  silent.for_each_row([&](const std::vector<Cell>& cells) { order.push_back(cells[0].integer); });
  EXPECT_EQ(order, (std::vector<std::int64_t>{1, 2}));
  silent.finish({}, false);
  EXPECT_FALSE(fs::exists(unused));
  EXPECT_TRUE(silent.written_files().empty());
}

// --resume: the kept rows start the partials again (read from the very partial that is rewritten),
// each at its index, with their details; a read that fails leaves the partial as it was.
TEST_F(Writer, ResumeRewritesThePartialsWithTheKeptRows) {
  {
    ResultWriter first(root_.string(), "sweep", header(), provenance(), true, true);
    first.append(2, row(3), {{"i", 2}});
    first.append(0, row(1), {{"i", 0}});
  }  // then the run is killed
  const std::string killed = read(root_ / "sweep.jsonl.partial");
  {
    ResultWriter failing(root_.string(), "sweep", header(), provenance(), true, true);
    EXPECT_THROW(failing.resume([](const ResultWriter::Keep& keep) {
      keep(0, row(1), nullptr);
      throw UsageError("a row of another sweep");
    }),
                 UsageError);
  }
  EXPECT_EQ(read(root_ / "sweep.jsonl.partial"), killed);
  EXPECT_FALSE(fs::exists(root_ / "sweep.jsonl.partial.tmp"));

  ResultWriter writer(root_.string(), "sweep", header(), provenance(), true, true);
  writer.resume([&](const ResultWriter::Keep& keep) {
    read_finished_rows((root_ / "sweep").string(), header(),
                       [&](const std::string&, const nlohmann::json& stored) {
                         EXPECT_EQ(stored, nlohmann::json(provenance()));
                       },
                       [&](FinishedRow&& finished) {
                         const auto i = static_cast<std::size_t>(finished.details["i"].get<int>());
                         keep(i, finished.cells, finished.details);
                       });
  });
  EXPECT_EQ(read(root_ / "sweep.jsonl.partial"), killed);
  EXPECT_EQ(read(root_ / "sweep.csv.partial"), std::string(kCsvHeader) + csv_line(3) + csv_line(1));
  writer.append(1, row(2), {{"i", 1}});
  EXPECT_THROW(writer.resume([](const ResultWriter::Keep&) {}), InternalError);
  writer.finish({}, true);
  EXPECT_EQ(read(root_ / "sweep.csv"),
            std::string(kCsvHeader) + csv_line(1) + csv_line(2) + csv_line(3));
  const nlohmann::json doc = nlohmann::json::parse(read(root_ / "sweep.json"));
  EXPECT_EQ(doc["summary"]["details"], (nlohmann::json{{{"i", 0}}, {{"i", 1}}, {{"i", 2}}}));
}

// A kill can cut the last line; a line damaged elsewhere is refused, naming the file and line.
TEST_F(Writer, ACutLastLineIsNotARowAndADamagedLineIsRefused) {
  {
    ResultWriter first(root_.string(), "sweep", header(), provenance(), false, true);
    first.append(0, row(1));
    first.append(1, row(2));
  }
  const fs::path partial = root_ / "sweep.jsonl.partial";
  const std::string whole = read(partial);
  std::ofstream(partial, std::ios::binary) << whole.substr(0, whole.size() - 5);
  std::vector<std::int64_t> seqs;
  const std::string path = read_finished_rows(
      (root_ / "sweep").string(), header(), [](const std::string&, const nlohmann::json&) {},
      [&](FinishedRow&& r) { seqs.push_back(r.cells[0].integer); });
  EXPECT_EQ(path, partial.string());
  EXPECT_EQ(seqs, (std::vector<std::int64_t>{1}));

  std::string damaged = whole;
  damaged[damaged.find("\"seq\":1")] = '#';
  std::ofstream(partial, std::ios::binary) << damaged;
  try {
    read_finished_rows((root_ / "sweep").string(), header(),
                       [](const std::string&, const nlohmann::json&) {}, [](FinishedRow&&) {});
    FAIL() << "a damaged line was read as a row";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(partial.string() + "' line 2"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// One run at a time per FOLDER/NAME: a second writer refuses while the first holds the lock, and
// takes it once the first is gone (or was killed: the lock goes with its process).
TEST_F(Writer, ASecondWriterOfTheSameNameRefusesWhileTheFirstWrites) {
  auto first =
      std::make_unique<ResultWriter>(root_.string(), "sweep", header(), provenance(), true, true);
  // fcntl locks are per process: the second writer must be another process to be refused.
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      ResultWriter second(root_.string(), "sweep", header(), provenance(), true, true);
      ::_exit(0);
    } catch (const UsageError& e) {
      const std::string message = e.what();
      ::_exit(message.find("another run") != std::string::npos &&
                      message.find(std::to_string(::getppid())) != std::string::npos
                  ? 2
                  : 1);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 2) << "the second writer did not refuse, naming the first's pid";
  EXPECT_NO_THROW(
      ResultWriter(root_.string(), "other", header(), provenance(), true, true));  // another name
  first.reset();
  EXPECT_FALSE(fs::exists(root_ / "sweep.lock"));
  EXPECT_NO_THROW(ResultWriter(root_.string(), "sweep", header(), provenance(), true, true));
}

// A write that fails (a full disk: /dev/full) is one line naming the file and the reason, and
// says that the rows before it are kept for --resume.
TEST_F(Writer, AWriteThatFailsSaysSoAndKeepsTheRowsBefore) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  ResultWriter writer(root_.string(), "sweep", header(), provenance(), true, true);
  writer.append(0, row(1));
  fs::remove(root_ / "sweep.csv.partial");
  fs::create_symlink("/dev/full", root_ / "sweep.csv.partial");
  try {
    writer.append(1, row(2));
    FAIL() << "a write to a full disk succeeded";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
    EXPECT_NE(message.find("--resume"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_EQ(lines_of(read(root_ / "sweep.jsonl.partial")).size(), 3u);
}

TEST_F(Writer, AFileInPlaceOfTheFolderIsAUsageError) {
  const fs::path file = root_ / "taken";
  std::ofstream(file) << "not a folder";
  for (const fs::path& folder : {file, file / "sub"}) {
    try {
      ResultWriter writer(folder.string(), "sweep", header(), provenance(), true, true);
      FAIL() << "no UsageError for " << folder;
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(folder.string()), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST_F(Writer, WrongRowWidthIsAnInternalError) {
  ResultWriter writer(root_.string(), "sweep", header(), provenance(), true, true);
  EXPECT_THROW(writer.append(0, {Cell::of_int(1)}), InternalError);
  EXPECT_FALSE(fs::exists(root_ / "sweep.csv.partial"));
}

}  // namespace
}  // namespace vrambench
