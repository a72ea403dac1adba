// The cast op on the CPU: y = x stored in y's dtype. Every operand is read into fp32 and stored
// rounded to its dtype anyway, so the adapter is a load and a store.
#include "cpu/op_table.h"

namespace vrambench {

void cpu_run_cast(const Operands& a, CpuContext&) {
  a.require(a.in[0].tensor->elements() == a.out[0].tensor->elements(),
            "cast operands differ in size");
  cpu::store_out(a, 0, cpu::load(a.in[0]));
}

}  // namespace vrambench
