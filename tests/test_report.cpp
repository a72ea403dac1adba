// Result tables: Markdown alignment, CSV quoting, JSON types and provenance.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "core/version.h"
#include "report/table.h"

namespace vrambench {
namespace {

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

// A table printed a row at a time, from rows that are not held together, is to_markdown's.
TEST(ReportMarkdown, ALayoutWidenedRowByRowPrintsTheSameTable) {
  const Table t = sample_table();
  MarkdownLayout layout(t.columns);
  for (const auto& row : t.rows) layout.widen(row);
  std::string printed = layout.header();
  for (const auto& row : t.rows) printed += layout.line(row);
  EXPECT_EQ(printed, to_markdown(t));
  EXPECT_THROW(layout.widen({Cell::of_int(1)}), InternalError);
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

}  // namespace
}  // namespace vrambench
