// The listing of a step program for people (`vrambench program`): one Markdown row per op with the
// bytes allocated before it, freed after it and live after it, the peak op marked, a summary line.
#pragma once

#include <string>
#include <vector>

#include "program/program.h"

namespace vrambench {

// An aligned Markdown table (op index, name, kind, allocated before, freed after, live after, a
// `<- peak` marker) followed by one line: the peak bytes, the op it is reached at, and the bytes
// live at the peak by role.
std::string format_program(const Program& program, const Liveness& liveness);

// Bytes by role of the tensors live while op `op_index` runs (its inputs and outputs included);
// op_index -1 means before the first op (persistent tensors only). Indexed by Role.
std::vector<Bytes> live_bytes_by_role(const Program& program, const Liveness& liveness,
                                      int op_index);

}  // namespace vrambench
