// Optimizer steps: the per-element updates of common/math.h over every element. Then the adapters
// of adamw_step and sgd_step (cpu/op_table.h), in place on the weight, its state and its master.
#include "cpu/optimizer.h"

#include <vector>

#include "cpu/op_table.h"

namespace vrambench::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                const kmath::AdamParams& p) {
  const float bc1 = p.bias_correction1(), bc2 = p.bias_correction2();
  for (std::int64_t i = 0; i < n; ++i)
    kmath::adamw_update(&param[i], grad[i], &m[i], &v[i], p, bc1, bc2);
}

void sgd_step(float* param, const float* grad, float* momentum, std::int64_t n,
              const kmath::SgdParams& p) {
  for (std::int64_t i = 0; i < n; ++i) kmath::sgd_update(&param[i], grad[i], &momentum[i], p);
}

}  // namespace vrambench::cpu

namespace vrambench {
namespace {

// The updated parameter stored in place: into the master when there is one, and into the weight,
// rounded to its dtype (weight = round(master)).
void store_parameter(const Operands& a, const std::vector<float>& param) {
  if (const Operand* master = a.input("master")) cpu::store(*master, param, false);
  cpu::store(a.in[0], param, false);
}

// The values the update runs on in fp32: the master when there is one, else the weight's own.
std::vector<float> load_parameter(const Operands& a) {
  const Operand* master = a.input("master");
  return cpu::load(master ? *master : a.in[0]);
}

}  // namespace

// In place on the weight, its state and its master copy; the state is stored rounded to its dtype.
// optimizer_operands checks the operands as the CUDA launcher reads them.
void cpu_run_adamw_step(const Operands& a, CpuContext& context) {
  (void)optimizer_operands(a);
  auto param = load_parameter(a);
  const auto grad = cpu::load(a.in[1]);
  auto m = cpu::load(a.in[2]), v = cpu::load(a.in[3]);
  cpu::adamw_step(param.data(), grad.data(), m.data(), v.data(),
                  static_cast<std::int64_t>(param.size()),
                  adam_params(a.op, context.optimizer_steps.next(a.in[0])));
  cpu::store(a.in[2], m, false);
  cpu::store(a.in[3], v, false);
  store_parameter(a, param);
}

void cpu_run_sgd_step(const Operands& a, CpuContext&) {
  (void)optimizer_operands(a);
  auto param = load_parameter(a);
  const auto grad = cpu::load(a.in[1]);
  auto momentum = cpu::load(a.in[2]);
  cpu::sgd_step(param.data(), grad.data(), momentum.data(), static_cast<std::int64_t>(param.size()),
                sgd_params(a.op));
  cpu::store(a.in[2], momentum, false);
  store_parameter(a, param);
}

}  // namespace vrambench
