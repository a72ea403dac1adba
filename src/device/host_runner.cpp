// HostRunner: std::vector storage per live tensor, bound and unbound at the liveness points.
#include "device/host_runner.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/math.h"
#include "core/error.h"

namespace vrambench {

HostRunner::HostRunner(const Program& program, Executor& executor)
    : program_(program),
      executor_(executor),
      liveness_(compute_liveness(program)),
      schedule_(program, liveness_, kTrialSteps),
      kept_(program.tensors.size(), false),
      storage_(program.tensors.size()),
      data_(program.tensors.size(), nullptr) {
  if (program.loss_tensor >= 0) kept_[static_cast<std::size_t>(program.loss_tensor)] = true;
  // Every persistent tensor, the lazy ones too, so that a test may read or set them before the
  // first step.
  std::vector<int> persistent = liveness_.persistent;
  std::sort(persistent.begin(), persistent.end());
  for (int id : persistent) {
    bind(id, false);
    executor_.initialize(program_, id, data_[static_cast<std::size_t>(id)]);
  }
}

void HostRunner::keep_alive(int tensor_id) {
  kept_.at(static_cast<std::size_t>(tensor_id)) = true;
}

void HostRunner::bind(int tensor_id, bool poison) {
  const Tensor& t = program_.tensor(tensor_id);
  auto& bytes = storage_[static_cast<std::size_t>(tensor_id)];
  bytes.assign(static_cast<std::size_t>(t.bytes > 0 ? t.bytes : 1), 0);
  data_[static_cast<std::size_t>(tensor_id)] = bytes.data();
  const bool floating = t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16;
  if (poison && floating)
    for (std::int64_t i = 0; i < t.elements(); ++i)
      kmath::store(bytes.data(), t.dtype, i, std::numeric_limits<float>::quiet_NaN());
}

void HostRunner::unbind(int tensor_id) {
  storage_[static_cast<std::size_t>(tensor_id)] = {};
  data_[static_cast<std::size_t>(tensor_id)] = nullptr;
}

void HostRunner::step() {
  // What the previous step left bound (gradients, kept tensors) goes now.
  const auto n_tensors = static_cast<int>(program_.tensors.size());
  for (int id = 0; id < n_tensors; ++id)
    if (liveness_.alloc_at[static_cast<std::size_t>(id)] >= 0) unbind(id);
  // The run's first step, then its steady state, as the schedule has them; the persistent
  // tensors are bound already, and what a step keeps to its end stays readable until the next.
  for (const RunEvent& e : schedule_.step(steps_run_ == 0 ? 0 : kTrialSteps - 1)) {
    switch (e.kind) {
      case RunEvent::Kind::alloc:
        if (data_[static_cast<std::size_t>(e.id)] == nullptr) bind(e.id, true);
        break;
      case RunEvent::Kind::run:
        executor_.execute(program_, static_cast<std::size_t>(e.op), data_);
        break;
      case RunEvent::Kind::free:
        if (e.op >= 0 && !kept_[static_cast<std::size_t>(e.id)]) unbind(e.id);
        break;
      case RunEvent::Kind::step_end:
        executor_.synchronize();
        break;
      case RunEvent::Kind::init:   // filled when bound, at construction
      case RunEvent::Kind::ready:  // not in a step
        break;
    }
  }
  ++steps_run_;
}

std::vector<float> HostRunner::values(int tensor_id) const {
  const Tensor& t = program_.tensor(tensor_id);
  const void* p = data_.at(static_cast<std::size_t>(tensor_id));
  if (p == nullptr) throw InternalError("tensor '" + t.name + "' is not bound");
  std::vector<float> out(static_cast<std::size_t>(t.elements()));
  for (std::int64_t i = 0; i < t.elements(); ++i)
    out[static_cast<std::size_t>(i)] = kmath::load(p, t.dtype, i);
  return out;
}

void HostRunner::set_values(int tensor_id, const std::vector<float>& values) {
  const Tensor& t = program_.tensor(tensor_id);
  void* p = data_.at(static_cast<std::size_t>(tensor_id));
  if (p == nullptr) throw InternalError("tensor '" + t.name + "' is not bound");
  if (static_cast<std::int64_t>(values.size()) != t.elements())
    throw InternalError("tensor '" + t.name + "': wrong number of values");
  for (std::int64_t i = 0; i < t.elements(); ++i)
    kmath::store(p, t.dtype, i, values[static_cast<std::size_t>(i)]);
}

float HostRunner::loss() const {
  if (program_.loss_tensor < 0) throw InternalError("the program has no loss tensor");
  return values(program_.loss_tensor).at(0);
}

int find_tensor(const Program& program, std::string_view name) {
  for (const Tensor& t : program.tensors)
    if (t.name == name) return t.id;
  throw InternalError("no tensor named '" + std::string(name) + "'");
}

}  // namespace vrambench
