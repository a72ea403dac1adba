// A step's gradient against central differences of its loss, on the CPU: the directional
// derivative along a fixed +-1 direction through one weight, from the step's own gradient and from
// the loss at w + h u and w - h u.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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

}  // namespace vrambench
