// Whole training-step programs on the cpu device: the program's weight gradients against finite
// differences of its loss, recompute modes and attention kinds against each other, and a short
// AdamW run on a copy task that must learn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/math.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "model/families.h"
#include "program/program.h"

namespace vrambench {
namespace {

// The tiny presets shrunk further so that a step takes about a millisecond.
RunConfig tiny(std::string_view preset, Attention attention, Recompute recompute,
               Optimizer optimizer = Optimizer::none) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset(preset).model;
  cfg.model.vocab = 32;
  cfg.model.max_positions = 16;
  cfg.seq = 8;
  cfg.batch = 2;
  cfg.dtype = Precision::fp32;
  cfg.attention = attention;
  cfg.recompute = recompute;
  cfg.optimizer = optimizer;
  // Dropout on for gpt: masks must regenerate identically in replays and in every evaluation.
  cfg.dropout = cfg.model.arch == Arch::gpt ? 0.1 : 0.0;
  cfg.device = parse_device("cpu");
  return cfg;
}

// Copy task: predict the previous token (the first position predicts itself). One fixed batch.
InputFiller copy_task(std::int64_t vocab) {
  return [vocab](const Program&, const Tensor& t, void* data) {
    if (t.name != "tokens" && t.name != "targets") return false;
    const std::int64_t B = t.shape.at(0), S = t.shape.at(1);
    auto* ids = static_cast<std::int32_t*>(data);
    auto token = [vocab](std::int64_t b, std::int64_t s) {
      return static_cast<std::int32_t>(
          kmath::hash64(2024, static_cast<std::uint64_t>(b * 1000 + s)) %
          static_cast<std::uint64_t>(vocab));
    };
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        ids[b * S + s] = t.name == "tokens" ? token(b, s) : token(b, s > 0 ? s - 1 : 0);
    return true;
  };
}

constexpr std::int64_t kWorkspaceBytes = 4096;  // exercises the workspace-role inputs

std::map<std::string, std::vector<float>> gradients(const Program& program, const HostRunner& run) {
  std::map<std::string, std::vector<float>> grads;
  for (const Tensor& t : program.tensors)
    if (t.role == Role::grad) grads[t.name.str()] = run.values(t.id);
  return grads;
}

struct GradCase {
  std::string_view preset;
  Attention attention;
  Recompute recompute;
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.preset << " " << to_string(c.attention) << " " << to_string(c.recompute);
}

std::string case_name(const testing::TestParamInfo<GradCase>& info) {
  std::string name = std::string(info.param.preset) + "_" +
                     std::string(to_string(info.param.attention)) + "_" +
                     std::string(to_string(info.param.recompute));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CpuTrainGrad : public testing::TestWithParam<GradCase> {};

// The mean cross-entropy recomputed in double from the program's logits: the fp32 loss tensor's
// own rounding (2e-7 at a loss of 3.5) would otherwise dominate the finite differences.
double exact_loss(const Program& program, const HostRunner& run) {
  const auto logits = run.values(find_tensor(program, "logits"));
  const auto targets = run.values(find_tensor(program, "targets"));
  const std::size_t M = targets.size(), V = logits.size() / M;
  double total = 0.0;
  for (std::size_t m = 0; m < M; ++m) {
    const float* row = logits.data() + m * V;
    const double row_max = *std::max_element(row, row + V);
    double sum = 0.0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - row_max);
    total += row_max + std::log(sum) - row[static_cast<std::size_t>(targets[m])];
  }
  return total / static_cast<double>(M);
}

// Weights whose gradients come through every op kind of the architecture: tied and untied
// embeddings, positions, norms, biases, attention (q, k and v rows of qkv), the MLP. The check
// along a direction through all weights covers the others.
std::vector<std::string> sampled_weights(const ModelConfig& m) {
  if (m.arch == Arch::gpt)
    return {
        "wte",   "wpe", "layer0.ln1.b", "layer0.attn.qkv.w", "layer0.attn.qkv.b", "layer1.mlp.fc.w",
        "ln_f.w"};
  std::vector<std::string> names{"wte", "layer0.attn_norm.w", "layer0.attn.qkv.w",
                                 "layer1.mlp.down.w"};
  if (m.fused_linears)  // Phi-3's gate|up, read packed
    names.push_back("layer1.mlp.gate_up.w");
  else
    names.insert(names.end(), {"layer1.mlp.gate.w", "layer1.mlp.up.w"});
  if (!m.tied_embeddings) names.push_back("lm_head.w");
  // The other families' pieces: q/k norms, the sandwich norms, Gemma's (1 + w) final norm.
  if (m.qk_norm) names.insert(names.end(), {"layer0.attn.q_norm.w", "layer1.attn.k_norm.w"});
  if (m.sandwich_norms)
    names.insert(names.end(), {"layer0.post_attn_norm.w", "layer1.post_mlp_norm.w"});
  if (m.offset_norms) names.push_back("norm.w");
  return names;
}

// For each sampled weight: the directional derivative of the loss along a random unit direction
// (every element of the gradient takes part) and along the largest gradient element, both
// against central differences; then one random direction through all weights at once.
TEST_P(CpuTrainGrad, WeightGradientsMatchFiniteDifferences) {
  const GradCase c = GetParam();
  Program program = build_program(tiny(c.preset, c.attention, c.recompute), kWorkspaceBytes);
  auto exec = make_cpu_executor(11, copy_task(program.config.model.vocab));
  HostRunner run(program, *exec);
  run.keep_alive(find_tensor(program, "logits"));
  // Larger q/k weights than the initial 0.02 make the attention pattern, and so the gradients
  // through the scores, big enough to measure.
  for (const Tensor& t : program.tensors)
    if (t.role == Role::weight && t.name.ends_with("attn.qkv.w")) {
      auto w = run.values(t.id);
      for (float& x : w) x *= 8.0f;
      run.set_values(t.id, w);
    }
  run.step();
  const auto grads = gradients(program, run);

  // Perturbs the weights `ids` along `direction` (one vector per id) by +-h.
  // Gemma's embeddings enter the blocks times sqrt(hidden) and its norms scale by 1 + w: a step
  // in one element of a weight moves the loss further along its curvature, so single weights
  // take a smaller step there (the step through all weights stays above the loss's rounding).
  const double h_all = 1e-3, h = program.config.model.embed_scale ? 2.5e-4 : h_all;
  auto derivative = [&](const std::vector<int>& ids,
                        const std::vector<std::vector<float>>& direction, double step_size) {
    std::vector<std::vector<float>> saved;
    for (int id : ids) saved.push_back(run.values(id));
    double loss[2];
    for (int side = 0; side < 2; ++side) {
      const double step = side == 0 ? step_size : -step_size;
      for (std::size_t k = 0; k < ids.size(); ++k) {
        std::vector<float> w = saved[k];
        for (std::size_t i = 0; i < w.size(); ++i)
          w[i] = static_cast<float>(saved[k][i] + step * direction[k][i]);
        run.set_values(ids[k], w);
      }
      run.step();
      loss[side] = exact_loss(program, run);
    }
    for (std::size_t k = 0; k < ids.size(); ++k) run.set_values(ids[k], saved[k]);
    return (loss[0] - loss[1]) / (2 * step_size);
  };
  auto random_unit = [](const Tensor& t, std::size_t n, double norm_of_all) {
    std::vector<float> u(n);
    for (std::size_t i = 0; i < n; ++i)
      u[i] = static_cast<float>(
          (kmath::keep(static_cast<std::uint64_t>(t.id), i, 0.5f) ? 1.0 : -1.0) / norm_of_all);
    return u;
  };
  auto expect_match = [](double analytic, double numeric, const std::string& what) {
    EXPECT_NEAR(analytic, numeric, 2e-5 + 0.02 * std::fabs(numeric)) << what;
  };

  for (const std::string& name : sampled_weights(program.config.model)) {
    const int id = find_tensor(program, name);
    const std::vector<float>& g = grads.at(name + ".grad");
    const std::vector<float> u = random_unit(program.tensor(id), g.size(), std::sqrt(g.size()));
    double along_u = 0.0;
    for (std::size_t i = 0; i < g.size(); ++i) along_u += static_cast<double>(g[i]) * u[i];
    expect_match(along_u, derivative({id}, {u}, h), name + " random direction");

    const auto largest = static_cast<std::size_t>(
        std::max_element(g.begin(), g.end(),
                         [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
        g.begin());
    std::vector<float> e(g.size(), 0.0f);
    e[largest] = 1.0f;
    expect_match(g[largest], derivative({id}, {e}, h), name + " largest element");
    // A gradient that is (near) zero everywhere would make these checks vacuous.
    EXPECT_GT(std::fabs(g[largest]), 1e-4f) << name;
  }

  std::vector<int> all;
  std::vector<std::vector<float>> directions;
  std::size_t total = 0;
  for (const Tensor& t : program.tensors)
    if (t.role == Role::weight) total += static_cast<std::size_t>(t.elements());
  double along_all = 0.0;
  for (const Tensor& t : program.tensors) {
    if (t.role != Role::weight) continue;
    const std::vector<float>& g = grads.at((t.name + ".grad").str());
    all.push_back(t.id);
    directions.push_back(random_unit(t, g.size(), std::sqrt(static_cast<double>(total))));
    for (std::size_t i = 0; i < g.size(); ++i)
      along_all += static_cast<double>(g[i]) * directions.back()[i];
  }
  expect_match(along_all, derivative(all, directions, h_all), "all weights, random direction");
}

INSTANTIATE_TEST_SUITE_P(
    CpuTiny, CpuTrainGrad,
    testing::Values(GradCase{"tiny", Attention::eager, Recompute::none},
                    GradCase{"tiny", Attention::eager, Recompute::selective},
                    GradCase{"tiny", Attention::eager, Recompute::full},
                    GradCase{"tiny", Attention::flash, Recompute::none},
                    GradCase{"tiny", Attention::flash, Recompute::selective},
                    GradCase{"tiny", Attention::flash, Recompute::full},
                    GradCase{"tiny-llama", Attention::eager, Recompute::none},
                    GradCase{"tiny-llama", Attention::eager, Recompute::selective},
                    GradCase{"tiny-llama", Attention::eager, Recompute::full},
                    GradCase{"tiny-llama", Attention::flash, Recompute::none},
                    GradCase{"tiny-llama", Attention::flash, Recompute::selective},
                    GradCase{"tiny-llama", Attention::flash, Recompute::full},
                    GradCase{"tiny-qwen3", Attention::eager, Recompute::none},
                    GradCase{"tiny-qwen3", Attention::flash, Recompute::full},
                    GradCase{"tiny-gemma2", Attention::eager, Recompute::none},
                    GradCase{"tiny-gemma2", Attention::eager, Recompute::selective},
                    GradCase{"tiny-gemma2", Attention::flash, Recompute::full},
                    GradCase{"tiny-gemma3", Attention::eager, Recompute::none},
                    GradCase{"tiny-gemma3", Attention::flash, Recompute::full},
                    GradCase{"tiny-phi3", Attention::eager, Recompute::none},
                    GradCase{"tiny-phi3", Attention::flash, Recompute::full}),
    case_name);

std::map<std::string, std::vector<float>> one_step_gradients(std::string_view preset,
                                                             Attention attention,
                                                             Recompute recompute, float* loss) {
  const Program program = build_program(tiny(preset, attention, recompute), kWorkspaceBytes);
  auto exec = make_cpu_executor(12, copy_task(program.config.model.vocab));
  HostRunner run(program, *exec);
  run.step();
  *loss = run.loss();
  return gradients(program, run);
}

// Recompute replays the same ops on the same inputs (dropout masks included): the gradients are
// the same bits. Flash and eager attention differ only in summation order.
TEST(CpuTrainGrad, RecomputeModesAndAttentionKindsAgree) {
  for (std::string_view preset :
       {"tiny", "tiny-llama", "tiny-gemma2", "tiny-gemma3", "tiny-phi3"}) {
    float loss_ref = 0.0f;
    const auto ref = one_step_gradients(preset, Attention::eager, Recompute::none, &loss_ref);
    EXPECT_GT(ref.size(), 10u);
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
        float loss = 0.0f;
        const auto got = one_step_gradients(preset, attention, recompute, &loss);
        const bool same_kind = attention == Attention::eager;
        const std::string label = std::string(preset) + " " + std::string(to_string(attention)) +
                                  " " + std::string(to_string(recompute));
        EXPECT_NEAR(loss, loss_ref, same_kind ? 0.0 : 1e-6) << label;
        ASSERT_EQ(got.size(), ref.size()) << label;
        for (const auto& [name, values] : ref) {
          const auto& other = got.at(name);
          for (std::size_t i = 0; i < values.size(); ++i) {
            if (same_kind)
              ASSERT_EQ(other[i], values[i]) << label << " " << name << "[" << i << "]";
            else
              ASSERT_NEAR(other[i], values[i], 1e-6 + 1e-4 * std::fabs(values[i]))
                  << label << " " << name << "[" << i << "]";
          }
        }
      }
  }
}

// The hf step program runs the same kernels on the same values as the lean one; it only keeps
// more (held tensors, which no kernel touches). In fp32 the gradients agree; under autocast the
// step runs through its casts and its loss stays near the fp32 one.
TEST(CpuTrainGrad, HfProgramRunsAndAgreesWithLean) {
  for (std::string_view preset :
       {"tiny", "tiny-llama", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-phi3"})
    for (Attention attention : {Attention::eager, Attention::flash})
      for (Recompute recompute : {Recompute::none, Recompute::full}) {
        const std::string label = std::string(preset) + " " + std::string(to_string(attention)) +
                                  " " + std::string(to_string(recompute));
        float loss_ref = 0.0f;
        const auto ref = one_step_gradients(preset, attention, recompute, &loss_ref);
        for (Precision dtype : {Precision::fp32, Precision::amp_bf16}) {
          RunConfig cfg = tiny(preset, attention, recompute, Optimizer::adamw);
          cfg.framework = Framework::hf;
          cfg.dtype = dtype;
          validate(cfg);
          const Program program = build_program(cfg, kWorkspaceBytes);
          auto exec = make_cpu_executor(12, copy_task(program.config.model.vocab));
          HostRunner run(program, *exec);
          run.step();
          if (dtype == Precision::amp_bf16) {
            EXPECT_NEAR(run.loss(), loss_ref, 0.05) << label;
            continue;
          }
          EXPECT_NEAR(run.loss(), loss_ref, 1e-6) << label;
          const auto got = gradients(program, run);
          ASSERT_EQ(got.size(), ref.size()) << label;
          for (const auto& [name, values] : ref) {
            const auto& other = got.at(name);
            for (std::size_t i = 0; i < values.size(); ++i)
              ASSERT_NEAR(other[i], values[i], 1e-6 + 1e-4 * std::fabs(values[i]))
                  << label << " " << name << "[" << i << "]";
          }
        }
      }
}

// 200 AdamW steps on one fixed batch of the previous-token copy task.
void check_training(std::string_view preset, Attention attention) {
  Program program = build_program(tiny(preset, attention, Recompute::none, Optimizer::adamw), 0);
  for (Op& op : program.ops)
    if (op.kind == OpKind::adamw_step) op.lr = 1e-2f;
  auto exec = make_cpu_executor(13, copy_task(program.config.model.vocab));
  HostRunner run(program, *exec);
  run.step();
  const float initial = run.loss();
  EXPECT_NEAR(initial, std::log(32.0f), 0.3f);  // near-uniform predictions at initialisation
  float loss = initial;
  for (int step = 1; step < 200; ++step) {
    run.step();
    loss = run.loss();
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
  }
  EXPECT_LT(loss, 0.3f * initial) << preset << " from " << initial;
}

// One model is enough here: the gradient tests above cover the other block; this one is about the
// optimizer, master-free fp32 state across steps, and the driver loop.
TEST(CpuTrain, GptLearnsCopyTask) {
  check_training("tiny", Attention::flash);
}

}  // namespace
}  // namespace vrambench
