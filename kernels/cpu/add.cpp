// Element-wise add, and the adapter of the add op (cpu/op_table.h).
#include "cpu/add.h"

#include <vector>

#include "cpu/op_table.h"

namespace vrambench::cpu {

void add(float* c, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

}  // namespace vrambench::cpu

namespace vrambench {

void cpu_run_add(const Operands& a, CpuContext&) {
  const auto x = cpu::load(a.in[0]), y = cpu::load(a.in[1]);
  a.require(x.size() == y.size(), "add operands differ in size");
  auto c = cpu::zeros_like(a.out[0]);
  cpu::add(c.data(), x.data(), y.data(), static_cast<std::int64_t>(c.size()));
  cpu::store_out(a, 0, c);
}

}  // namespace vrambench
