// The CPU side of the op table (program/ops.def): one adapter per op kind, which reads its operands
// (op/operands.h) into fp32, runs the reference kernel and stores the results rounded to their
// dtypes, adding into `grad` outputs when the op accumulates. Each is declared here from the
// table's rows and defined beside its kernel, in kernels/cpu/<family>.cpp; cpu_run() is the
// executor's dispatch, an array indexed by OpKind.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "op/operands.h"
#include "program/program.h"

namespace vrambench {

// What the adapters keep from one op to the next: the optimizer steps per weight.
struct CpuContext {
  OptimizerSteps optimizer_steps;
};

// clang-format off
#define VB_OP(kind, ...) void cpu_run_##kind(const Operands& a, CpuContext& context);
#include "program/ops.def"
// clang-format on

using CpuRun = void (*)(const Operands&, CpuContext&);
// The adapter of `kind`.
CpuRun cpu_run(OpKind kind);

// ---- what the adapters share ------------------------------------------------------------------

namespace cpu {

// `o`'s values in fp32, whatever its floating dtype.
std::vector<float> load(const Operand& o);
// `o`'s token ids (i32, checked).
std::vector<std::int32_t> load_ids(const Operands& a, const Operand& o);
// `values` stored into `o` rounded to its dtype, added into what it holds when `accumulate`.
void store(const Operand& o, const std::vector<float>& values, bool accumulate);
// Output k of the op, added into it when the op accumulates into a gradient.
void store_out(const Operands& a, std::size_t k, const std::vector<float>& values);
// As many zeros as `o` has elements.
std::vector<float> zeros_like(const Operand& o);

}  // namespace cpu
}  // namespace vrambench
