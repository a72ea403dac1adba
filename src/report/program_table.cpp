// The listing of a step program for people (`vrambench program`): a table of typed cells, printed
// as every other table is (report/table.h), and its summary line.
#include "report/program_table.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/units.h"
#include "program/schedule.h"
#include "program/signature.h"
#include "report/table.h"

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

std::string format_program(const Program& program, const Liveness& liveness) {
  const LiveProfile profile = live_profile(program, liveness);
  Table table;
  table.columns = {
      {"op_index", "#", CellKind::integer},      {"op", "op", CellKind::text},
      {"kind", "kind", CellKind::text},          {"alloc_bytes", "alloc", CellKind::bytes},
      {"freed_bytes", "freed", CellKind::bytes}, {"live_bytes", "live", CellKind::bytes},
      {"peak", "peak", CellKind::text}};
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    table.add_row({Cell::of_int(static_cast<std::int64_t>(i)), Cell::of_text(op.name.str()),
                   Cell::of_text(std::string(signature(op.kind).name)),
                   Cell::of_bytes(profile.allocated[i]), Cell::of_bytes(profile.freed[i]),
                   Cell::of_bytes(profile.live_after[i]),
                   Cell::of_text(static_cast<int>(i) == profile.peak_op ? "<- peak" : "")});
  }
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
  return to_markdown(table) + fmt::format("\npeak {} {}; live at the peak: {}\n",
                                          format_bytes(profile.peak), where,
                                          roles.empty() ? std::string("nothing") : roles);
}

}  // namespace vrambench
