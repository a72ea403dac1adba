// The collectives of one rank's step (program/shard.h) on the CPU, rehearsed on one device:
// all_gather repeats the rank's shard through the full tensor, reduce_scatter keeps the rank's
// rows of its own full tensor. Equal dtypes copy bytes (4-bit codes included); a floating shard
// of another dtype (a mixed-precision cast on the way) is read into fp32 and stored rounded.
#include <algorithm>
#include <cstring>

#include "cpu/op_table.h"

namespace vrambench {
namespace {

// `to`'s bytes filled with `from`'s, repeated (or cut short).
void repeat_bytes(const Operand& to, const Operand& from) {
  const auto total = static_cast<std::size_t>(to.tensor->bytes);
  const auto n = static_cast<std::size_t>(from.tensor->bytes);
  auto* out = static_cast<unsigned char*>(to.data);
  for (std::size_t at = 0; at < total; at += n)
    std::memcpy(out + at, from.data, std::min(n, total - at));
}

// A copy of bytes: the same dtype, or a buffer of bytes (u8) on either side (FSDP2's flat
// all-gather and reduce-scatter buffers).
bool bytewise(const Operand& x, const Operand& y) {
  return x.tensor->dtype == y.tensor->dtype || !is_floating(x.tensor->dtype) ||
         !is_floating(y.tensor->dtype);
}

}  // namespace

void cpu_run_all_gather(const Operands& a, CpuContext&) {
  const Operand& shard = a.in[0];
  const Operand& full = a.out[0];
  a.require(shard.tensor->bytes > 0, "all_gather: an empty shard");
  if (bytewise(shard, full)) {
    repeat_bytes(full, shard);
    return;
  }
  const std::vector<float> part = cpu::load(shard);
  std::vector<float> values(static_cast<std::size_t>(full.tensor->elements()));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = part[i % part.size()];
  cpu::store(full, values, false);
}

void cpu_run_reduce_scatter(const Operands& a, CpuContext&) {
  const Operand& full = a.in[0];
  const Operand& shard = a.out[0];
  if (bytewise(full, shard)) {
    repeat_bytes(shard, full);
    return;
  }
  a.require(shard.tensor->elements() <= full.tensor->elements(),
            "reduce_scatter: the shard must be smaller than the full tensor");
  std::vector<float> values = cpu::load(full);
  values.resize(static_cast<std::size_t>(shard.tensor->elements()));
  cpu::store(shard, values, false);
}

}  // namespace vrambench
