// Runs a whole Program on plain host memory, op by op, allocating and freeing tensors by liveness:
// the small driver the CPU tests and benchmarks use (the trial runner in src/measure/ is the one the
// tool measures with; this one has no allocator and no capacity).
//
// Persistent tensors (weights, master weights, optimizer state, inputs) are allocated and
// initialised once and keep their values across steps, so repeated step() calls train. Other
// tensors are allocated before their first op with NaN contents (so a read before a write shows),
// and unbound (nullptr to the executor) after their last op; those that live to the end of the step
// (gradients), and those named in keep_alive(), stay readable until the next step begins.
#pragma once

#include <cstdint>
#include <vector>

#include "device/executor.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {

class HostRunner {
 public:
  HostRunner(const Program& program, Executor& executor);

  // Keeps a tensor bound from its first op to the end of the step (e.g. the loss).
  void keep_alive(int tensor_id);
  // Runs every op once.
  void step();

  // The tensor's elements as fp32; throws when it is not bound now.
  std::vector<float> values(int tensor_id) const;
  // Overwrites a bound tensor's elements (rounded to its dtype).
  void set_values(int tensor_id, const std::vector<float>& values);
  // The loss after step(); requires program.loss_tensor.
  float loss() const;

 private:
  void bind(int tensor_id, bool poison);
  void unbind(int tensor_id);

  const Program& program_;
  Executor& executor_;
  Liveness liveness_;
  Schedule schedule_;
  int steps_run_ = 0;
  std::vector<bool> kept_;
  std::vector<std::vector<std::uint8_t>> storage_;  // per tensor; empty while unbound
  std::vector<void*> data_;
};

// Looks up a tensor id by name; throws when there is none.
int find_tensor(const Program& program, std::string_view name);

}  // namespace vrambench
