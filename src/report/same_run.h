// What makes the rows of two result files rows of one run: the same command but for where and how
// it writes, the same tool and the same device. One rule, read by `merge` (the shards of a sweep),
// `--resume` (the run it finishes) and `compare` (which says what differs).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sweep/shard.h"

namespace vrambench {

// A command line without what only says where and how a run writes or works (--out, --name,
// --format, --quiet, --resume, --jobs) and without its --shard, which `shard` receives when given; argv[0] dropped.
std::vector<std::string> command_words(const std::string& command_line, Shard* shard = nullptr);
// Those words as a command line again: "vrambench search --dtype fp32", quoted for a shell.
std::string quoted_command(const std::vector<std::string>& words);

// One way two provenances differ: `what` is "command", "tool_version", "git_commit", "device" or
// "framework", `a` and `b` the two values (a command as command_words quotes it back).
struct RunDifference {
  std::string what, a, b;
  bool operator==(const RunDifference&) const = default;
};
// Everything that makes the rows of provenance `a` (a result JSON's "provenance") rows of another
// run than those of `b`, in the order above; empty when they are rows of one run. A provenance
// without a command line differs in "command" from every other.
std::vector<RunDifference> run_differences(const nlohmann::json& a, const nlohmann::json& b);
// "command `vrambench search --dtype fp32` vs `vrambench search`; device cpu vs sim:rtx4090".
std::string describe(const std::vector<RunDifference>& differences);

}  // namespace vrambench
