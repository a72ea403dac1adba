// Markdown listing of a step program with its liveness: what each op allocates and frees, and
// where the live bytes peak.
#include "program/print.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/units.h"
#include "program/signature.h"

namespace vrambench {

std::vector<Bytes> live_bytes_by_role(const Program& program, const Liveness& liveness,
                                      int op_index) {
  std::vector<Bytes> by_role(kRoleCount, 0);
  for (std::size_t t = 0; t < program.tensors.size(); ++t) {
    if (liveness.alloc_at[t] <= op_index && liveness.free_after[t] >= op_index)
      by_role[static_cast<std::size_t>(program.tensors[t].role)] += program.tensors[t].bytes;
  }
  return by_role;
}

namespace {

constexpr std::size_t kColumns = 7;
using Row = std::array<std::string, kColumns>;
// Numbers are right-aligned so that byte counts line up.
constexpr std::array<bool, kColumns> kRightAligned{true, false, false, true, true, true, false};

Bytes sum_bytes(const Program& program, std::span<const int> ids) {
  Bytes total = 0;
  for (int id : ids) total += program.tensor(id).bytes;
  return total;
}

std::string format_row(const Row& row, const std::array<std::size_t, kColumns>& widths) {
  std::string line = "|";
  for (std::size_t c = 0; c < kColumns; ++c) {
    if (kRightAligned[c])
      line += fmt::format(" {:>{}} |", row[c], widths[c]);
    else
      line += fmt::format(" {:<{}} |", row[c], widths[c]);
  }
  return line + "\n";
}

}  // namespace

std::string format_program(const Program& program, const Liveness& liveness) {
  const LiveProfile profile = live_profile(program, liveness);

  std::vector<Row> rows;
  rows.push_back({"#", "op", "kind", "alloc", "freed", "live", "peak"});
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    const bool peak = static_cast<int>(i) == profile.peak_op;
    rows.push_back({fmt::format("{}", i), op.name.str(), std::string(signature(op.kind).name),
                    format_bytes(sum_bytes(program, liveness.allocs_before[i])),
                    format_bytes(sum_bytes(program, liveness.frees_after[i])),
                    format_bytes(profile.live_after[i]), peak ? "<- peak" : ""});
  }

  std::array<std::size_t, kColumns> widths{};
  for (const Row& row : rows)
    for (std::size_t c = 0; c < kColumns; ++c) widths[c] = std::max(widths[c], row[c].size());
  // A Markdown delimiter cell needs at least three characters.
  for (std::size_t& w : widths) w = std::max<std::size_t>(w, 3);

  std::string out = format_row(rows.front(), widths);
  out += "|";
  for (std::size_t c = 0; c < kColumns; ++c)
    out += kRightAligned[c] ? fmt::format("{:->{}}:|", "", widths[c] + 1)
                            : fmt::format(":{:-<{}}|", "", widths[c] + 1);
  out += "\n";
  for (std::size_t r = 1; r < rows.size(); ++r) out += format_row(rows[r], widths);

  const std::vector<Bytes> by_role = live_bytes_by_role(program, liveness, profile.peak_op);
  std::string roles;
  for (int r = 0; r < kRoleCount; ++r) {
    const Bytes bytes = by_role[static_cast<std::size_t>(r)];
    if (bytes == 0) continue;
    if (!roles.empty()) roles += ", ";
    roles += fmt::format("{} {}", to_string(static_cast<Role>(r)), format_bytes(bytes));
  }
  const std::string where =
      profile.peak_op < 0
          ? std::string("before the first op")
          : fmt::format("at op {} ({})", profile.peak_op,
                        program.ops[static_cast<std::size_t>(profile.peak_op)].name);
  out += fmt::format("\npeak {} {}; live at the peak: {}\n", format_bytes(profile.peak), where,
                     roles.empty() ? std::string("nothing") : roles);
  return out;
}

}  // namespace vrambench
