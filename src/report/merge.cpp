// Joining the parts of a sharded sweep.
#include "report/merge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace vrambench {
namespace {

std::string text_in(const ResultFile& part, const char* key) {
  const nlohmann::json& value = part.provenance.at(key);
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

MergedResult merge_shards(const std::vector<ResultFile>& parts) {
  if (parts.empty()) throw UsageError("merge: no parts");
  struct Part {
    const ResultFile* file;
    Shard shard;
  };
  std::vector<Part> sorted;
  std::vector<std::string> command;
  for (const ResultFile& file : parts) {
    if (!file.provenance.is_object() || !file.provenance.contains("command_line"))
      throw UsageError(fmt::format(
          "'{}' has no provenance: merge reads the JSON of each part (NAME.json), which says "
          "what wrote it",
          file.path));
    Shard shard{-1, 0};
    const std::vector<std::string> words = command_words(text_in(file, "command_line"), &shard);
    if (shard.count == 0)
      throw UsageError(
          fmt::format("'{}' is not a shard: its command has no --shard K/N", file.path));
    const ResultFile& first = sorted.empty() ? file : *sorted.front().file;
    if (sorted.empty()) command = words;
    if (const auto differences = run_differences(file.provenance, first.provenance);
        !differences.empty())
      throw UsageError(fmt::format("'{}' is not a part of the run of '{}': {}", file.path,
                                   first.path, describe(differences)));
    if (!sorted.empty() && shard.count != sorted.front().shard.count)
      throw UsageError(fmt::format("'{}' is shard {}/{}, '{}' one of {}", file.path, shard.index,
                                   shard.count, first.path, sorted.front().shard.count));
    const auto same_columns = [](const Table& a, const Table& b) {
      return std::equal(
          a.columns.begin(), a.columns.end(), b.columns.begin(), b.columns.end(),
          [](const Column& x, const Column& y) { return x.key == y.key && x.kind == y.kind; });
    };
    if (!same_columns(file.table, first.table))
      throw UsageError(fmt::format("'{}' has other columns than '{}'", file.path, first.path));
    sorted.push_back({&file, shard});
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Part& a, const Part& b) { return a.shard.index < b.shard.index; });
  const std::int64_t n = sorted.front().shard.count;
  for (std::int64_t k = 0; k < n; ++k) {
    const auto has = [k](const Part& p) { return p.shard.index == k; };
    const auto count = std::count_if(sorted.begin(), sorted.end(), has);
    if (count == 0) throw UsageError(fmt::format("merge: shard {}/{} is missing", k, n));
    if (count > 1) throw UsageError(fmt::format("merge: shard {}/{} is given twice", k, n));
  }

  MergedResult merged;
  merged.shards = n;
  std::int64_t total = 0;
  for (const Part& p : sorted) total += static_cast<std::int64_t>(p.file->table.rows.size());
  for (const Part& p : sorted)
    if (static_cast<std::int64_t>(p.file->table.rows.size()) != shard_size(p.shard, total))
      throw UsageError(fmt::format(
          "'{}' has {} rows, shard {}/{} of {} configurations has {}: an unfinished part?",
          p.file->path, p.file->table.rows.size(), p.shard.index, n, total,
          shard_size(p.shard, total)));

  merged.table.columns = sorted.front().file->table.columns;
  merged.table.rows.resize(static_cast<std::size_t>(total));
  bool all_details = true;
  std::vector<nlohmann::json> details(static_cast<std::size_t>(total));
  bool any_estimate = false;
  for (const Part& p : sorted) {
    const nlohmann::json& summary = p.file->summary;
    const nlohmann::json part_details =
        summary.is_object() ? summary.value("details", nlohmann::json()) : nlohmann::json();
    all_details =
        all_details && part_details.is_array() && part_details.size() == p.file->table.rows.size();
    for (std::size_t r = 0; r < p.file->table.rows.size(); ++r) {
      const auto i = static_cast<std::size_t>(grid_index(p.shard, static_cast<std::int64_t>(r)));
      merged.table.rows[i] = p.file->table.rows[r];
      if (all_details) details[i] = part_details[r];
    }
    if (!summary.is_object()) continue;
    merged.seconds += summary.value("seconds", 0.0);
    if (!p.file->table.rows.empty() && summary.contains("min_est_max_batch")) {
      const auto lo = summary.value("min_est_max_batch", std::int64_t{0});
      const auto hi = summary.value("max_est_max_batch", std::int64_t{0});
      merged.smallest_est_max_batch =
          any_estimate ? std::min(merged.smallest_est_max_batch, lo) : lo;
      merged.largest_est_max_batch = any_estimate ? std::max(merged.largest_est_max_batch, hi) : hi;
      any_estimate = true;
    }
  }
  if (all_details) merged.details = details;

  const ResultFile& first = *sorted.front().file;
  merged.provenance = first.provenance.get<Provenance>();
  merged.provenance.command_line = quoted_command(command);
  for (const Part& p : sorted)
    merged.provenance.utc_time = std::max(merged.provenance.utc_time, text_in(*p.file, "utc_time"));
  std::vector<std::string> paths;
  for (const Part& p : sorted) paths.push_back(p.file->path);
  merged.provenance.extra["merged_from"] = fmt::format("{} shards: {}", n, fmt::join(paths, " "));
  return merged;
}

}  // namespace vrambench
