// The CPU dispatch, made of the op table's rows, and the loads and stores every adapter goes
// through.
#include "cpu/op_table.h"

#include <cstring>

#include "common/math.h"
#include "core/error.h"

namespace vrambench {
namespace {

// One adapter per row, in the enum's order (both are made of the rows of program/ops.def).
// clang-format off
constexpr std::array<CpuRun, kOpKindCount> kCpuRuns{
#define VB_OP(kind, ...) &cpu_run_##kind,
#include "program/ops.def"
};
// clang-format on

}  // namespace

CpuRun cpu_run(OpKind kind) {
  return kCpuRuns.at(static_cast<std::size_t>(kind));
}

namespace cpu {

std::vector<float> load(const Operand& o) {
  const std::int64_t n = o.tensor->elements();
  std::vector<float> values(static_cast<std::size_t>(n));
  if (o.tensor->dtype == DType::f32) {
    std::memcpy(values.data(), o.data, static_cast<std::size_t>(n) * sizeof(float));
    return values;
  }
  for (std::int64_t i = 0; i < n; ++i)
    values[static_cast<std::size_t>(i)] = kmath::load(o.data, o.tensor->dtype, i);
  return values;
}

std::vector<std::int32_t> load_ids(const Operands& a, const Operand& o) {
  const std::int32_t* ids = a.i32(o);
  return std::vector<std::int32_t>(ids, ids + o.tensor->elements());
}

void store(const Operand& o, const std::vector<float>& values, bool accumulate) {
  const std::int64_t n = o.tensor->elements();
  if (static_cast<std::int64_t>(values.size()) != n)
    throw InternalError("tensor '" + o.tensor->name + "': kernel produced the wrong size");
  if (o.tensor->dtype == DType::f32 && !accumulate) {
    std::memcpy(o.data, values.data(), values.size() * sizeof(float));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float v = values[static_cast<std::size_t>(i)];
    if (accumulate) v += kmath::load(o.data, o.tensor->dtype, i);
    kmath::store(o.data, o.tensor->dtype, i, v);
  }
}

void store_out(const Operands& a, std::size_t k, const std::vector<float>& values) {
  const Operand& o = a.out.at(k);
  store(o, values, a.accumulates(o));
}

std::vector<float> zeros_like(const Operand& o) {
  return std::vector<float>(static_cast<std::size_t>(o.tensor->elements()), 0.0f);
}

}  // namespace cpu
}  // namespace vrambench
