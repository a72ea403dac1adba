// The CSV reader against hand-written documents, and against what the table writer writes.
#include <gtest/gtest.h>

#include "core/error.h"
#include "report/csv.h"
#include "report/table.h"

namespace vrambench {
namespace {

using Records = std::vector<std::vector<std::string>>;

TEST(Csv, SplitsPlainFieldsAndRecords) {
  EXPECT_EQ(parse_csv_records("a,b\n1,2\n"), (Records{{"a", "b"}, {"1", "2"}}));
  EXPECT_EQ(parse_csv_records("a,b\r\n1,\r\n"), (Records{{"a", "b"}, {"1", ""}}));
  EXPECT_EQ(parse_csv_records("a,b\n1,2"), (Records{{"a", "b"}, {"1", "2"}}));  // no final LF
  EXPECT_EQ(parse_csv_records("x,"), (Records{{"x", ""}}));
}

TEST(Csv, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  EXPECT_EQ(parse_csv_records("note,n\n\"a, \"\"b\"\"\nc\",3\n"),
            (Records{{"note", "n"}, {"a, \"b\"\nc", "3"}}));
}

TEST(Csv, RejectsBrokenQuoting) {
  EXPECT_THROW(parse_csv_records("\"open,1\n"), UsageError);
  EXPECT_THROW(parse_csv_records("\"a\"b,1\n"), UsageError);
}

TEST(Csv, DocumentSkipsLeadingCommentsAndChecksWidths) {
  const CsvDocument doc = parse_csv("# tool 1.0\n# device cpu\nseq,max\n512,3\n1024,1\n", "t.csv");
  EXPECT_EQ(doc.header, (std::vector<std::string>{"seq", "max"}));
  ASSERT_EQ(doc.rows.size(), 2u);
  EXPECT_EQ(doc.rows[1][doc.column("max")], "1");
  EXPECT_THROW(doc.column("min"), UsageError);
  EXPECT_THROW(parse_csv("a,b\n1\n", "t.csv"), UsageError);
  EXPECT_THROW(parse_csv("", "t.csv"), UsageError);
}

TEST(Csv, ReadsBackWhatTheTableWriterWrites) {
  Table t;
  t.columns = {{"name", "name", CellKind::text}, {"bytes", "bytes", CellKind::bytes}};
  const std::string tricky = "crashed: \"x\", then\nmore";
  const std::string text =
      csv_header(t) + "\n" + csv_row(t, {Cell::of_text(tricky), Cell::of_bytes(12345)}) + "\n";
  const CsvDocument doc = parse_csv(text, "t.csv");
  ASSERT_EQ(doc.rows.size(), 1u);
  EXPECT_EQ(doc.rows[0][0], tricky);
  EXPECT_EQ(doc.rows[0][1], "12345");
}

}  // namespace
}  // namespace vrambench
