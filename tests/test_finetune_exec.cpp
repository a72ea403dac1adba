// The fine-tuning kinds on the cpu executor: LoRA adapter gradients against finite differences
// (over a plain and a quantised frozen base), the starting values of adapters and quantised
// weights, the dequantize op against the CPU quantisation reference, the 8-bit AdamW op against
// cpu::adamw_8bit_step, and the fine-tuning recipes end to end through the binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/math.h"
#include "core/quant_layout.h"
#include "cpu/quant.h"
#include "device/cpu_executor.h"
#include "device/host_runner.h"
#include "device/init_rule.h"
#include "model/families.h"
#include "program/program.h"

namespace vrambench {
namespace {

constexpr std::int64_t kWorkspaceBytes = 4096;
constexpr std::uint64_t kSeed = 21;

RunConfig finetune_config(std::string_view preset, Finetune finetune,
                          Optimizer optimizer = Optimizer::none) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.model.vocab = 32;
  cfg.model.max_positions = 16;
  cfg.seq = 8;
  cfg.batch = 2;
  cfg.dtype = Precision::fp32;
  cfg.attention = Attention::flash;
  cfg.optimizer = optimizer;
  cfg.finetune = finetune;
  cfg.lora_rank = 4;
  cfg.lora_alpha = 8.0;
  cfg.device = parse_device("cpu");
  return cfg;
}

// The mean cross-entropy in double from the program's logits (the fp32 loss rounds too coarsely
// for finite differences).
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

bool is_adapter(const Tensor& t) {
  return t.role == Role::weight && (t.name.ends_with(".lora_A") || t.name.ends_with(".lora_B"));
}

struct LoraCase {
  std::string_view preset;
  Finetune finetune;
  Framework framework = Framework::hf;
  // hf: checkpointing (replayed layers, an embedding output that requires grad), LoRA dropout,
  // and targets that leave the first layer's input without a gradient.
  Recompute recompute = Recompute::none;
  double lora_dropout = 0.0;
  std::string_view targets = "all-linear";
};

RunConfig lora_case_config(const LoraCase& c) {
  RunConfig cfg = finetune_config(c.preset, c.finetune);
  cfg.framework = c.framework;
  cfg.recompute = c.recompute;
  cfg.lora_dropout = c.lora_dropout;
  cfg.lora_targets = parse_lora_targets(c.targets);
  validate(cfg);
  return cfg;
}

class LoraGrad : public testing::TestWithParam<LoraCase> {};

// Every adapter's A and B gradients along a random direction and at their largest element, and
// all adapters at once, against central differences of the loss. B starts at 0 (PEFT); it is set
// non-zero here so that A's gradient (through B) is not zero.
TEST_P(LoraGrad, AdapterGradientsMatchFiniteDifferences) {
  const LoraCase c = GetParam();
  const Program program = build_program(lora_case_config(c), kWorkspaceBytes);
  auto exec = make_cpu_executor(kSeed);
  HostRunner run(program, *exec);
  run.keep_alive(find_tensor(program, "logits"));
  std::vector<int> adapters;
  for (const Tensor& t : program.tensors) {
    if (!is_adapter(t)) continue;
    adapters.push_back(t.id);
    if (t.name.ends_with(".lora_B")) {
      // B starts at zero; A by the weight rule.
      for (float v : run.values(t.id)) ASSERT_EQ(v, 0.0f) << t.name;
      std::vector<float> b(static_cast<std::size_t>(t.elements()));
      for (std::size_t i = 0; i < b.size(); ++i)
        b[i] = 0.3f *
               initial_weight_value(kSeed, t.name + ".nonzero", static_cast<std::int64_t>(i)) /
               0.02f;
      run.set_values(t.id, b);
    } else {
      const auto a = run.values(t.id);
      for (std::size_t i = 0; i < a.size(); i += 37)
        ASSERT_EQ(a[i], initial_weight_value(kSeed, t.name, static_cast<std::int64_t>(i)))
            << t.name;
    }
  }
  ASSERT_FALSE(adapters.empty());
  run.step();
  std::map<int, std::vector<float>> grads;
  for (int id : adapters)
    grads[id] = run.values(find_tensor(program, program.tensor(id).name + ".grad"));

  const double h = 1e-3;
  auto derivative = [&](const std::vector<int>& ids,
                        const std::vector<std::vector<float>>& direction) {
    std::vector<std::vector<float>> saved;
    for (int id : ids) saved.push_back(run.values(id));
    double loss[2];
    for (int side = 0; side < 2; ++side) {
      for (std::size_t k = 0; k < ids.size(); ++k) {
        std::vector<float> w = saved[k];
        for (std::size_t i = 0; i < w.size(); ++i)
          w[i] = static_cast<float>(saved[k][i] + (side == 0 ? h : -h) * direction[k][i]);
        run.set_values(ids[k], w);
      }
      run.step();
      loss[side] = exact_loss(program, run);
    }
    for (std::size_t k = 0; k < ids.size(); ++k) run.set_values(ids[k], saved[k]);
    return (loss[0] - loss[1]) / (2 * h);
  };
  auto random_unit = [](int id, std::size_t n, double norm) {
    std::vector<float> u(n);
    for (std::size_t i = 0; i < n; ++i)
      u[i] = static_cast<float>(
          (kmath::keep(static_cast<std::uint64_t>(id) + 7, i, 0.5f) ? 1.0 : -1.0) / norm);
    return u;
  };
  auto expect_match = [](double analytic, double numeric, std::string_view what) {
    EXPECT_NEAR(analytic, numeric, 2e-5 + 0.02 * std::fabs(numeric)) << what;
  };

  std::vector<std::vector<float>> directions;
  std::size_t total = 0;
  for (int id : adapters) total += grads[id].size();
  double along_all = 0.0;
  for (int id : adapters) {
    const Name& name = program.tensor(id).name;
    const std::vector<float>& g = grads[id];
    const auto u = random_unit(id, g.size(), std::sqrt(static_cast<double>(g.size())));
    double along_u = 0.0;
    for (std::size_t i = 0; i < g.size(); ++i) along_u += static_cast<double>(g[i]) * u[i];
    expect_match(along_u, derivative({id}, {u}), name + " random direction");
    const auto largest = static_cast<std::size_t>(
        std::max_element(g.begin(), g.end(),
                         [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
        g.begin());
    std::vector<float> e(g.size(), 0.0f);
    e[largest] = 1.0f;
    expect_match(g[largest], derivative({id}, {e}), name + " largest element");
    EXPECT_GT(std::fabs(g[largest]), 1e-5f) << name;
    directions.push_back(random_unit(id, g.size(), std::sqrt(static_cast<double>(total))));
    for (std::size_t i = 0; i < g.size(); ++i)
      along_all += static_cast<double>(g[i]) * directions.back()[i];
  }
  expect_match(along_all, derivative(adapters, directions), "all adapters, random direction");
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, LoraGrad,
    testing::Values(LoraCase{"tiny", Finetune::lora, Framework::lean},
                    LoraCase{"tiny-llama", Finetune::lora, Framework::lean},
                    LoraCase{"tiny-llama", Finetune::qlora, Framework::lean},
                    LoraCase{"tiny", Finetune::lora}, LoraCase{"tiny-llama", Finetune::lora},
                    LoraCase{"tiny-llama", Finetune::qlora},
                    LoraCase{"tiny", Finetune::lora, Framework::hf, Recompute::full, 0.1},
                    LoraCase{"tiny-llama", Finetune::qlora, Framework::hf, Recompute::full, 0.1},
                    LoraCase{"tiny", Finetune::lora, Framework::hf, Recompute::none, 0.1, "c_proj"},
                    LoraCase{"tiny-llama", Finetune::lora, Framework::hf, Recompute::none, 0.0,
                             "v_proj,up_proj"},
                    LoraCase{"tiny-llama", Finetune::qlora, Framework::hf, Recompute::none, 0.0,
                             "o_proj"},
                    // PEFT's ParamWrapper on a mixture of experts' 3-D weights, folded into the
                    // experts' effective weights; QLoRA's fp32 experts; the lean form.
                    LoraCase{"tiny-mixtral", Finetune::lora, Framework::hf, Recompute::none, 0.0,
                             "q_proj,experts.gate_up_proj,experts.down_proj"},
                    LoraCase{"tiny-qwen3-moe", Finetune::qlora, Framework::hf, Recompute::full, 0.0,
                             "v_proj,experts.gate_up_proj,experts.down_proj"},
                    LoraCase{"tiny-olmoe", Finetune::lora, Framework::lean, Recompute::none, 0.0,
                             "experts.gate_up_proj,experts.down_proj"}),
    [](const testing::TestParamInfo<LoraCase>& param_info) {
      const LoraCase& c = param_info.param;
      std::string name(to_string(c.framework));
      name.append("_").append(c.preset).append(c.finetune == Finetune::qlora ? "_qlora" : "_lora");
      if (c.recompute == Recompute::full) name.append("_checkpointed");
      if (c.lora_dropout > 0) name.append("_dropout");
      if (c.targets != "all-linear") name.append("_").append(c.targets);
      for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

// The packed q|k|v weight of a qlora step, dequantised by three ops into their rows: equal to
// cpu::dequantize_weight of each module's stored parts, which are the quantisation of the dense
// weight the lora recipe draws (within NF4's error).
TEST(Dequantize, Nf4OpMatchesTheReferenceAndTheDenseWeight) {
  for (const Toggle nested : {Toggle::on, Toggle::off}) {
    RunConfig cfg = finetune_config("tiny-llama", Finetune::qlora);
    cfg.double_quant = nested;
    const Program program = build_program(cfg, kWorkspaceBytes);
    auto exec = make_cpu_executor(kSeed);
    HostRunner run(program, *exec);
    const int dq = find_tensor(program, "layer0.attn.qkv.w.dq");
    run.keep_alive(dq);
    run.step();
    const auto got = run.values(dq);
    const Tensor& w = program.tensor(dq);
    const std::int64_t cols = w.shape.at(1);
    std::int64_t covered = 0;
    for (const char* module : {"q", "k", "v"}) {
      const std::string pre = std::string("layer0.attn.") + module + ".w.";
      const int codes_id = find_tensor(program, pre + "weight");
      const auto part = quantized_part(program, codes_id);
      ASSERT_TRUE(part.has_value()) << pre;
      EXPECT_EQ(part->weight, "layer0.attn.qkv.w");
      EXPECT_EQ(part->double_quant, nested == Toggle::on);
      // The executor's stored parts, dequantised by the reference.
      auto bytes_of = [&](const std::string& name) {
        const Tensor& t = program.tensor(find_tensor(program, name));
        std::vector<std::uint8_t> b(static_cast<std::size_t>(t.bytes));
        fill_quantized_part(program, t.id, *quantized_part(program, t.id), kSeed, b.data());
        return b;
      };
      auto codes = bytes_of(pre + "weight"), absmax = bytes_of(pre + "absmax");
      std::vector<std::uint8_t> absmax2, offset;
      kquant::QuantizedWeightBuffers in;
      in.data = codes.data();
      if (part->double_quant) {
        absmax2 = bytes_of(pre + "nested_absmax");
        offset = bytes_of(pre + "offset");
        in.qabsmax = absmax.data();
        in.absmax2 = reinterpret_cast<float*>(absmax2.data());
        in.offset = reinterpret_cast<float*>(offset.data());
      } else {
        in.absmax = reinterpret_cast<float*>(absmax.data());
      }
      std::vector<float> want(static_cast<std::size_t>(part->rows * cols));
      cpu::dequantize_weight(QuantKind::nf4, part->double_quant, DType::f32, want.data(), in,
                             part->rows, cols);
      for (std::int64_t i = 0; i < part->rows * cols; ++i) {
        const std::int64_t at = part->row_offset * cols + i;
        ASSERT_EQ(got[static_cast<std::size_t>(at)], want[static_cast<std::size_t>(i)])
            << module << " " << i;
        // NF4 levels are at most 0.28 apart on [-1, 1], scaled by the block's absmax (at most
        // 6 sigma = 0.12): an error within 0.02 of the dense weight.
        EXPECT_NEAR(got[static_cast<std::size_t>(at)],
                    initial_weight_value(kSeed, "layer0.attn.qkv.w", at), 0.02)
            << module << " " << i;
      }
      covered += part->rows;
      // The code table is the NF4 one.
      const int map = find_tensor(program, pre + "quant_map");
      const auto table = run.values(map);
      ASSERT_EQ(table.size(), 16u);
      EXPECT_EQ(table[0], -1.0f);
      EXPECT_EQ(table[15], 1.0f);
    }
    EXPECT_EQ(covered, w.shape.at(0));
  }
}

// One adamw8bit_step op, twice, on an fp32 weight and on a bf16 weight with its master: the
// executor's weight, master, codes and absmax equal cpu::adamw_8bit_step's.
TEST(AdamW8bit, OpStepsMatchTheReference) {
  for (const bool master : {false, true}) {
    const std::int64_t n = 2 * kOptimizer8bitBlock * 9 + 100;  // a partial last block
    const std::int64_t blocks = quant_blocks(n, kOptimizer8bitBlock);
    Program program;
    program.config = finetune_config("tiny", Finetune::lora);
    const DType wt = master ? DType::bf16 : DType::f32;
    const int w = program.add_tensor("w", {n}, wt, Role::weight);
    const int g = program.add_tensor("w.grad", {n}, wt, Role::grad);
    const int m = program.add_tensor("w.m", {n}, DType::u8, Role::optimizer_state);
    const int v = program.add_tensor("w.v", {n}, DType::u8, Role::paged_optimizer_state);
    const int am = program.add_tensor("w.m.absmax", {blocks}, DType::f32, Role::optimizer_state);
    const int av = program.add_tensor("w.v.absmax", {blocks}, DType::f32, Role::optimizer_state);
    TensorIds in{w, g, m, v, am, av};
    if (master) in.push_back(program.add_tensor("w.master", {n}, DType::f32, Role::master_weight));
    Op& op = program.add_op(OpKind::adamw8bit_step, "w.step", in, {});
    op.lr = 1e-2f;
    op.weight_decay = 0.01f;
    op.grad_scale = 4.0f;

    std::vector<std::vector<std::uint8_t>> storage(program.tensors.size());
    std::vector<void*> data(program.tensors.size());
    auto exec = make_cpu_executor(kSeed);
    for (const Tensor& t : program.tensors) {
      storage[static_cast<std::size_t>(t.id)].assign(static_cast<std::size_t>(t.bytes), 0xAB);
      data[static_cast<std::size_t>(t.id)] = storage[static_cast<std::size_t>(t.id)].data();
      if (t.id != g) exec->initialize(program, t.id, data[static_cast<std::size_t>(t.id)]);
    }
    // 8-bit state starts at zero codes and zero absmax.
    for (int id : {m, v, am, av})
      for (std::uint8_t b : storage[static_cast<std::size_t>(id)]) ASSERT_EQ(b, 0);

    // The reference on the same starting weight (the master's fp32 value when there is one).
    std::vector<float> param(static_cast<std::size_t>(n));
    const int source = master ? in.back() : w;
    for (std::int64_t i = 0; i < n; ++i)
      param[static_cast<std::size_t>(i)] =
          kmath::load(data[static_cast<std::size_t>(source)], DType::f32, i);
    std::vector<std::uint8_t> rm(static_cast<std::size_t>(n), 0), rv(rm);
    std::vector<float> ram(static_cast<std::size_t>(blocks), 0.0f), rav(ram);
    kquant::AdamW8bitState ref{rm.data(), rv.data(), ram.data(), rav.data(), nullptr, nullptr};
    for (int step = 1; step <= 2; ++step) {
      std::vector<float> grad(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        const float x = 4.0f * kmath::standard_normal(99 + static_cast<std::uint64_t>(step), i) *
                        (i % 5 == 0 ? 3.0f : 0.1f);
        kmath::store(data[static_cast<std::size_t>(g)], wt, i, x);
        grad[static_cast<std::size_t>(i)] = kmath::load(data[static_cast<std::size_t>(g)], wt, i);
      }
      exec->execute(program, 0, data);
      kmath::AdamParams p;
      p.lr = op.lr;
      p.beta1 = op.beta1;
      p.beta2 = op.beta2;
      p.eps = op.adam_eps;
      p.weight_decay = op.weight_decay;
      p.grad_scale = op.grad_scale;
      p.step = step;
      cpu::adamw_8bit_step(param.data(), grad.data(), ref, n, p);
      for (std::int64_t i = 0; i < n; ++i) {
        const float want_w = master ? kmath::round_to(wt, param[static_cast<std::size_t>(i)])
                                    : param[static_cast<std::size_t>(i)];
        ASSERT_EQ(kmath::load(data[static_cast<std::size_t>(w)], wt, i), want_w) << i;
        if (master) {
          ASSERT_EQ(kmath::load(data[static_cast<std::size_t>(source)], DType::f32, i),
                    param[static_cast<std::size_t>(i)]);
        }
      }
      EXPECT_EQ(storage[static_cast<std::size_t>(m)], rm);
      EXPECT_EQ(storage[static_cast<std::size_t>(v)], rv);
      for (std::int64_t b = 0; b < blocks; ++b) {
        EXPECT_EQ(static_cast<const float*>(data[static_cast<std::size_t>(am)])[b],
                  ram[static_cast<std::size_t>(b)]);
        EXPECT_EQ(static_cast<const float*>(data[static_cast<std::size_t>(av)])[b],
                  rav[static_cast<std::size_t>(b)]);
      }
    }
    // The state moved off zero.
    EXPECT_GT(*std::max_element(ram.begin(), ram.end()), 0.0f);
  }
}

// A frozen norm's backward writes dx alone; the step trains (finite loss, adapters move).
TEST(Finetune, QloraTrainsWithAdamW8bitStateOnTheCpu) {
  RunConfig cfg = finetune_config("tiny-llama", Finetune::qlora, Optimizer::adamw_8bit);
  cfg.lora_rank = 64;  // A [64, 64] and B [64, 64]: 4096 elements each, 8-bit state
  const Program program = build_program(cfg, kWorkspaceBytes);
  int eight_bit = 0, frozen_norms = 0;
  for (const Op& op : program.ops) {
    eight_bit += op.kind == OpKind::adamw8bit_step;
    frozen_norms += op.kind == OpKind::rmsnorm_bwd && op.outputs.size() == 1;
  }
  ASSERT_GT(eight_bit, 0);
  ASSERT_GT(frozen_norms, 0);
  auto exec = make_cpu_executor(kSeed);
  HostRunner run(program, *exec);
  const int b = find_tensor(program, "layer0.attn.q.lora_B");
  float first = 0.0f;
  for (int step = 0; step < 3; ++step) {
    run.step();
    ASSERT_TRUE(std::isfinite(run.loss())) << step;
    if (step == 0) first = run.loss();
  }
  EXPECT_LT(run.loss(), first);
  const auto moved = run.values(b);
  float largest = 0.0f;
  for (float x : moved) largest = std::max(largest, std::fabs(x));
  EXPECT_GT(largest, 0.0f) << "B starts at zero and must have moved";
}

// ---- the binary ------------------------------------------------------------------------------

struct Ran {
  int exit_code = -1;
  std::string out;
};
Ran vrambench(const std::string& args) {
  const std::string cmd = std::string(VRAMBENCH_BINARY) + " " + args + " 2>&1 </dev/null";
  Ran run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::vector<std::vector<std::string>> csv_rows(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("#")) continue;  // the provenance header
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// The fine-tuning recipes run end to end on the cpu device and report measured peaks.
TEST(FinetuneCli, RecipesRunOnTheCpuDevice) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("vrambench-finetune-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  for (const std::string recipe :
       {"--finetune lora", "--finetune qlora --optimizer adamw-8bit",
        "--finetune qlora --optimizer paged-adamw-8bit --lora-rank 64"}) {
    const Ran run = vrambench("--device cpu --preset tiny-llama --seq 16 --vram 8MiB " + recipe +
                              " --out " + dir.string() + " --name f");
    ASSERT_EQ(run.exit_code, 0) << recipe << "\n" << run.out;
    const auto csv = csv_rows(dir / "f.csv");
    ASSERT_EQ(csv.size(), 2u) << recipe;
    const auto column = [&](const std::string& name) {
      const auto at = std::find(csv[0].begin(), csv[0].end(), name);
      EXPECT_NE(at, csv[0].end()) << name;
      return static_cast<std::size_t>(at - csv[0].begin());
    };
    EXPECT_GT(std::stoll(csv[1][column("meas_max_batch")]), 0) << recipe;
    EXPECT_GT(std::stoll(csv[1][column("meas_peak_bytes")]), 0) << recipe;
    EXPECT_EQ(csv[1][column("meas_peak_bytes")], csv[1][column("sim_peak_bytes")]) << recipe;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vrambench
