// Counts over a built program the tests read: how many ops of a kind it has, and the bytes of its
// tensors of a role.
#pragma once

#include "core/units.h"
#include "program/program.h"

namespace vrambench {

inline int count_ops(const Program& p, OpKind kind) {
  int n = 0;
  for (const Op& op : p.ops) n += op.kind == kind;
  return n;
}

inline Bytes role_bytes(const Program& p, Role role) {
  Bytes total = 0;
  for (const Tensor& t : p.tensors)
    if (t.role == role) total += t.bytes;
  return total;
}

}  // namespace vrambench
