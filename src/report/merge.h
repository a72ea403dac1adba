// `vrambench merge OUT PARTS...`: the tables of the shards of one sweep (--shard K/N) joined back
// into the table the sweep makes in one process, row for row. Parts written by another command,
// another version or on another device are refused.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/read.h"
#include "report/same_run.h"
#include "report/table.h"
#include "sweep/shard.h"

namespace vrambench {

struct MergedResult {
  Table table;              // every row, in the order of the unsharded sweep
  Provenance provenance;    // the parts' (version, commit, device), the unsharded command
  nlohmann::json details;   // the parts' per-row details in the same order; null if one lacks them
  std::int64_t shards = 0;  // N
  double seconds = 0.0;     // the parts' run times added up
  std::int64_t smallest_est_max_batch = 0, largest_est_max_batch = 0;  // estimate tables
};

// The parts must be the JSON of every shard K/N, K = 0..N-1, of one run (run_differences: one
// command, version, commit and device), with the same columns. Throws UsageError naming the part
// and what differs.
MergedResult merge_shards(const std::vector<ResultFile>& parts);

}  // namespace vrambench
