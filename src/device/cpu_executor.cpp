// CpuExecutor: runs each op through its CPU adapter in the op table (kernels/cpu/op_table.h),
// which binds the op's tensors to fp32 copies, runs the reference kernel and stores the outputs
// rounded to their dtypes (adding into `grad` outputs when the op accumulates).
#include "device/cpu_executor.h"

#include <vector>

#include "common/init_values.h"
#include "cpu/op_table.h"
#include "device/init_rule.h"
#include "op/operands.h"

namespace vrambench {
namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(std::uint64_t seed, InputFiller fill) : seed_(seed), fill_(std::move(fill)) {}

  std::string_view name() const override { return "cpu"; }

  void initialize(const Program& program, int tensor_id, void* data) override {
    const Tensor& t = program.tensor(tensor_id);
    if (t.role == Role::input && fill_ && fill_(program, t, data)) return;
    if (const auto part = quantized_part(program, tensor_id)) {
      fill_quantized_part(program, tensor_id, *part, seed_, data);
      return;
    }
    const kmath::InitRule rule = init_rule(program, tensor_id, seed_);
    for (std::int64_t i = 0; i < t.elements(); ++i) kmath::init_element(data, t.dtype, rule, i);
  }

  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    const Operands a = decode_operands(program, op_index, data);
    cpu_run(a.op.kind)(a, context_);
  }

 private:
  std::uint64_t seed_;
  InputFiller fill_;
  CpuContext context_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(std::uint64_t seed) {
  return make_cpu_executor(seed, {});
}

std::unique_ptr<Executor> make_cpu_executor(std::uint64_t seed, InputFiller fill_inputs) {
  return std::make_unique<CpuExecutor>(seed, std::move(fill_inputs));
}

}  // namespace vrambench
