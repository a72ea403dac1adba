// A step's gradient against central differences of its loss, on the CPU: the directional
// derivative along a fixed +-1 direction through one weight, from the step's own gradient and from
// the loss at w + h u and w - h u.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "program/program.h"

namespace vrambench {

struct Directional {
  double along = 0.0;    // the step's gradient of `name` dotted with the direction
  double numeric = 0.0;  // (loss(w + h u) - loss(w - h u)) / 2h
};

// `grad` is the step's gradient of weight `name` (run's values after a step); `run` is left with
// the weight as it was.
inline Directional directional_check(HostRunner& run, const Program& p, const std::string& name,
                                     const std::vector<float>& grad, double h) {
  const int id = find_tensor(p, name);
  std::vector<float> u(grad.size());
  Directional d;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    u[i] = ((i * 2654435761u) >> 7) % 2 ? 1.0f : -1.0f;
    d.along += static_cast<double>(grad[i]) * u[i];
  }
  const std::vector<float> saved = run.values(id);
  double loss[2];
  for (int side = 0; side < 2; ++side) {
    std::vector<float> w = saved;
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(saved[i] + (side == 0 ? h : -h) * u[i]);
    run.set_values(id, w);
    run.step();
    loss[side] = run.loss();
  }
  run.set_values(id, saved);
  d.numeric = (loss[0] - loss[1]) / (2 * h);
  return d;
}

// One step of `cfg` made small enough for central differences (a vocabulary of 32, 8 tokens, no
// optimizer, on the CPU executor seeded with `seed`), run once: its program, the runner that ran
// it (left bound, for directional_check) and each gradient's values by the gradient's name.
struct GradientStep {
  GradientStep(RunConfig cfg, std::uint64_t seed)
      : program(build(std::move(cfg))), exec(make_cpu_executor(seed)), run(program, *exec) {
    run.step();
    for (const Tensor& t : program.tensors)
      if (t.role == Role::grad) grads[t.name.str()] = run.values(t.id);
  }
  static Program build(RunConfig cfg) {
    cfg.model.vocab = 32;
    cfg.seq = 8;
    cfg.optimizer = Optimizer::none;
    cfg.device = parse_device("cpu");
    validate(cfg);
    return build_program(cfg, 0);
  }

  Program program;
  std::unique_ptr<Executor> exec;
  HostRunner run;
  std::map<std::string, std::vector<float>> grads;
};

}  // namespace vrambench
