// The preference losses of TRL's DPOTrainer and KTOTrainer over each row's log-ratio (ops.def,
// preference_loss), shared by the CPU reference kernels and the CUDA kernels. Plain functions over
// explicit values, as common/math.h; the rows are few (the batch's sequences), so each sum runs in
// one thread, in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/math.h"

namespace vrambench::kmath {

VB_HD inline double sigmoid(double x) {
  return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}
// -log(sigmoid(x)) without overflow.
VB_HD inline double neg_log_sigmoid(double x) {
  return x >= 0.0 ? log1p(exp(-x)) : -x + log1p(exp(x));
}

// One pair's DPO loss and its derivative in delta = r_chosen - r_rejected.
VB_HD inline double dpo_pair_loss(double delta, double beta) {
  return neg_log_sigmoid(beta * delta);
}
VB_HD inline double dpo_pair_grad(double delta, double beta) {
  return -beta * sigmoid(-beta * delta);
}
// One example's KTO loss and its derivative in r, desirable or not, against the KL estimate z.
VB_HD inline double kto_row_loss(double r, double z, double beta, bool desirable) {
  const double u = beta * (r - z);
  return 1.0 - sigmoid(desirable ? u : -u);
}
VB_HD inline double kto_row_grad(double r, double z, double beta, bool desirable) {
  const double u = beta * (r - z);
  const double s = sigmoid(desirable ? u : -u);
  return desirable ? -beta * s * (1.0 - s) : beta * s * (1.0 - s);
}
// KTO's rows: even rows desirable, odd rows undesirable.
VB_HD inline bool kto_desirable(std::int64_t row) {
  return row % 2 == 0;
}

// The figures the losses read: each row's log-ratio r (the sum of its policy log-probabilities
// less the reference's) over `rows` rows, and KTO's z (the detached KL estimate, 0 without one).
struct PreferenceRows {
  const double* ratio = nullptr;
  std::int64_t rows = 0;
  double z = 0.0;
  double beta = 0.1;
  bool dpo = true;  // else kto
};

// The batch's loss. DPO: rows [0, P) are the chosen completions and [P, 2P) the rejected ones of
// P pairs, loss = mean over the pairs of -logsigmoid(beta (r_chosen - r_rejected)). KTO: loss =
// mean over the rows of 1 - sigmoid(beta (r - z)) (desirable) and 1 - sigmoid(beta (z - r)).
VB_HD inline double preference_loss(const PreferenceRows& p) {
  double sum = 0.0;
  if (p.dpo) {
    const std::int64_t pairs = p.rows / 2;
    for (std::int64_t i = 0; i < pairs; ++i)
      sum += dpo_pair_loss(p.ratio[i] - p.ratio[i + pairs], p.beta);
    return pairs > 0 ? sum / static_cast<double>(pairs) : 0.0;
  }
  for (std::int64_t i = 0; i < p.rows; ++i)
    sum += kto_row_loss(p.ratio[i], p.z, p.beta, kto_desirable(i));
  return p.rows > 0 ? sum / static_cast<double>(p.rows) : 0.0;
}

// d loss / d r_i.
VB_HD inline double preference_grad(const PreferenceRows& p, std::int64_t i) {
  if (p.dpo) {
    const std::int64_t pairs = p.rows / 2;
    const bool chosen = i < pairs;
    const std::int64_t pair = chosen ? i : i - pairs;
    const double g =
        dpo_pair_grad(p.ratio[pair] - p.ratio[pair + pairs], p.beta) / static_cast<double>(pairs);
    return chosen ? g : -g;
  }
  return kto_row_grad(p.ratio[i], p.z, p.beta, kto_desirable(i)) / static_cast<double>(p.rows);
}

}  // namespace vrambench::kmath
