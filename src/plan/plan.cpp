// make_plan(): the searches, the micro-batch rule, the budget and the measured alternatives.
#include "plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include "core/error.h"
#include "program/program.h"

namespace vrambench {

Bytes SafetyMargin::of(Bytes capacity) const {
  if (percent > 0.0)
    return static_cast<Bytes>(std::llround(static_cast<double>(capacity) * percent / 100.0));
  return bytes;
}

std::string SafetyMargin::text() const {
  if (percent > 0.0) return fmt::format("{:g}%", percent);
  return format_bytes(bytes);
}

SafetyMargin parse_safety_margin(std::string_view text) {
  SafetyMargin m;
  if (!text.empty() && text.back() == '%') {
    const std::string_view number = text.substr(0, text.size() - 1);
    double p = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), p);
    if (ec != std::errc() || end != number.data() + number.size() || !std::isfinite(p) ||
        !(p >= 0.0 && p < 100.0))
      throw UsageError(fmt::format(
          "invalid --safety-margin '{}': a percentage must be in [0%, 100%), e.g. 10%", text));
    m.percent = p;
    m.bytes = 0;
    return m;
  }
  // parse_bytes takes only positive sizes; a margin may be zero ("0", "0GiB").
  const std::size_t unit = text.find_first_not_of("0123456789.");
  const std::string_view number = text.substr(0, unit);
  const bool zero = !number.empty() && number.find_first_not_of("0.") == std::string_view::npos &&
                    number.find_first_of('0') != std::string_view::npos;
  if (zero) {
    const std::string_view suffix = unit == std::string_view::npos ? "" : text.substr(unit);
    parse_bytes(fmt::format("1{}", suffix), "--safety-margin");  // the unit must be one
    m.bytes = 0;
    return m;
  }
  m.bytes = parse_bytes(text, "--safety-margin");
  return m;
}

MicroBatchChoice choose_micro_batch(std::int64_t max_micro_batch, std::int64_t target) {
  if (target < 1) throw InternalError("choose_micro_batch: target must be at least 1");
  MicroBatchChoice c;
  c.max_micro_batch = std::max<std::int64_t>(max_micro_batch, 0);
  if (c.max_micro_batch == 0) return c;
  const std::int64_t m0 = std::min(c.max_micro_batch, target);
  c.micro_batch = m0;
  while (target % c.micro_batch != 0) --c.micro_batch;  // 1 divides every target
  c.grad_accum = target / c.micro_batch;
  c.effective_batch = target;
  // A micro-batch well below the largest that fits: the nearest effective batch the largest
  // reaches, when it is near, is listed.
  if (4 * c.micro_batch < 3 * m0) {
    const std::int64_t below = target / m0, above = (target + m0 - 1) / m0;
    const std::int64_t accum = target - below * m0 < above * m0 - target ? below : above;
    if (8 * std::llabs(accum * m0 - target) <= target) {
      c.near_micro_batch = m0;
      c.near_grad_accum = accum;
    }
  }
  return c;
}

Bytes Budget::free() const {
  for (const BudgetLine& l : lines)
    if (l.key == "free") return l.bytes;
  return 0;
}

Budget make_budget(const TrialResult& trial, const Breakdown& estimate, std::int64_t batch,
                   Bytes capacity, Bytes margin, Bytes fixed_overhead) {
  const RoleBytes& role = trial.peak_by_role;
  Budget b;
  b.batch = batch;
  b.capacity = capacity;
  b.device_peak = trial.device_peak;
  b.fits = trial.fit && trial.device_peak <= capacity - margin;
  // Weights are live for the whole step, so the estimate's split of them (exact tensor terms)
  // divides the replay's weight bytes; what it does not name is the trainable weights.
  const Bytes quantized = estimate.component(MemoryComponent::quantized_weights);
  const Bytes frozen = estimate.component(MemoryComponent::frozen_weights);
  const Bytes adapters = estimate.component(MemoryComponent::adapters);
  const Bytes reference = estimate.component(MemoryComponent::reference_weights);
  const Bytes trainable =
      std::max<Bytes>(role[Role::weight] - quantized - frozen - adapters - reference, 0);
  const Bytes fragmentation = std::max<Bytes>(trial.reserved_peak - trial.tensor_peak, 0);
  const Bytes context = std::max<Bytes>(trial.device_peak - trial.reserved_peak, fixed_overhead);
  // Off the device: what --offload keeps on the host, and a paged optimizer's managed memory.
  const Bytes host = std::min(trial.paged_bytes, estimate.component(MemoryComponent::host_offload));
  b.lines = {
      {"quantized_weights", "weights: quantised (frozen, with constants)", quantized, true},
      {"frozen_weights", "weights: frozen", frozen, true},
      {"trainable_weights", "weights: trainable", trainable, true},
      {"adapters", "adapters (LoRA A and B)", adapters, true},
      {"reference_weights", "weights: the reference model's copy (frozen)", reference, true},
      {"master_weights", "master weights (fp32)", role[Role::master_weight], true},
      {"gradients", "gradients", role[Role::grad], true},
      {"optimizer_state", "optimizer state (device)", role[Role::optimizer_state], true},
      {"paged_optimizer_state", "optimizer state (paged, managed memory: not on the card)",
       trial.paged_bytes - host, false},
      {"host_offload", "offloaded to host memory (--offload: not on the card)", host, false},
      {"activations", "activations (saved for backward, tokens)",
       role[Role::activation] + role[Role::input], true},
      {"transients_and_workspace", "transients and workspace",
       role[Role::transient] + role[Role::workspace], true},
      {"allocator_fragmentation", "allocator fragmentation (reserved, not in tensors)",
       fragmentation, true},
      {"cuda_context", "CUDA context and libraries", context, true},
      {"safety_margin", "safety margin", margin, true},
  };
  Bytes used = 0;
  for (const BudgetLine& l : b.lines)
    if (l.on_device) used += l.bytes;
  b.lines.push_back({"free", "free", capacity - used, true});
  return b;
}

DeviceInfo with_margin(DeviceInfo info, Bytes margin) {
  info.total -= margin;
  return info;
}

namespace {

std::optional<RunConfig> valid(RunConfig cfg) {
  try {
    validate(cfg);
  } catch (const UsageError&) {
    return std::nullopt;
  }
  return cfg;
}

// A step replayed at `batch` with no capacity limit: what it needs (sizes only).
TrialResult replay_unlimited(const RunConfig& cfg, const DeviceInfo& info, std::int64_t batch) {
  const Bytes unlimited = std::numeric_limits<Bytes>::max() / 4;
  return run_trial(cfg, simulated(info), batch, unlimited, nullptr);
}

// The largest micro-batch of cfg on `device`, up to `limit`. With a target, a micro-batch below it
// needs accumulation, which keeps every gradient live for the whole step (config/run_config.h): the
// search runs without accumulation first, and again with it when the target is not reached. The
// measurement's config says which.
Measurement search_micro_batch(RunConfig cfg, const Device& device,
                               std::optional<std::int64_t> target, std::int64_t limit) {
  if (!target) return measure(cfg, device, SearchLimits{limit});
  cfg.grad_accum = 1;
  Measurement m = measure(cfg, device, SearchLimits{limit});
  if (m.search.max_batch >= *target || *target == 1) return m;
  cfg.grad_accum = *target;  // any accumulation keeps the same bytes
  return measure(cfg, device, SearchLimits{limit});
}

}  // namespace

std::vector<Alternative> candidate_alternatives(const RunConfig& cfg) {
  std::vector<Alternative> out;
  auto add = [&](std::string change, std::string flags, const std::function<void(RunConfig&)>& f) {
    RunConfig changed = cfg;
    f(changed);
    if (changed == cfg) return;
    if (std::optional<RunConfig> ok = valid(changed))
      out.push_back({std::move(change), std::move(flags), *ok, 0, 0, 0, {}});
  };
  if (cfg.recompute != Recompute::full)
    add("full recomputation (gradient checkpointing)", "--recompute full",
        [](RunConfig& c) { c.recompute = Recompute::full; });
  if (cfg.attention != Attention::flash)
    add("flash attention", "--attention flash",
        [](RunConfig& c) { c.attention = Attention::flash; });
  if (cfg.seq >= 128) {
    const std::int64_t half = cfg.seq / 2;
    add(fmt::format("half the sequence ({} tokens)", half), fmt::format("--seq {}", half),
        [half](RunConfig& c) { c.seq = half; });
  }
  if (cfg.optimizer == Optimizer::adamw || cfg.optimizer == Optimizer::paged_adamw) {
    const Optimizer eight =
        cfg.optimizer == Optimizer::adamw ? Optimizer::adamw_8bit : Optimizer::paged_adamw_8bit;
    add(fmt::format("8-bit optimizer state ({})", hf_optim_name(eight)),
        fmt::format("--optimizer {}", to_string(eight)),
        [eight](RunConfig& c) { c.optimizer = eight; });
  }
  if (cfg.optimizer == Optimizer::adamw || cfg.optimizer == Optimizer::adamw_8bit) {
    const Optimizer paged =
        cfg.optimizer == Optimizer::adamw ? Optimizer::paged_adamw : Optimizer::paged_adamw_8bit;
    add(fmt::format("paged optimizer state ({})", hf_optim_name(paged)),
        fmt::format("--optimizer {}", to_string(paged)),
        [paged](RunConfig& c) { c.optimizer = paged; });
  }
  if (cfg.finetune == Finetune::full)
    add(fmt::format("LoRA instead of full training (r{}, {})", cfg.lora_rank,
                    to_string(cfg.lora_targets)),
        "--finetune lora", [](RunConfig& c) { c.finetune = Finetune::lora; });
  if (cfg.finetune != Finetune::qlora)
    add("QLoRA (NF4 base, double quantisation)", "--finetune qlora --quant nf4", [](RunConfig& c) {
      c.finetune = Finetune::qlora;
      c.quant = QuantKind::nf4;
      c.double_quant = Toggle::on;
    });
  if (is_finetune(cfg) && cfg.lora_rank > 1) {
    const std::int64_t half = cfg.lora_rank / 2;
    add(fmt::format("LoRA rank {} instead of {}", half, cfg.lora_rank),
        fmt::format("--lora-rank {}", half), [half](RunConfig& c) { c.lora_rank = half; });
  }
  if (is_finetune(cfg)) {
    const LoraTargets fewer = parse_lora_targets(cfg.model.arch == Arch::gpt ? "c_attn"
                                                 : cfg.model.fused_linears   ? "qkv_proj"
                                                                             : "q_proj,v_proj");
    add(fmt::format("fewer LoRA targets ({})", to_string(fewer)),
        fmt::format("--lora-targets {}", to_string(fewer)),
        [fewer](RunConfig& c) { c.lora_targets = fewer; });
  }
  if (cfg.dtype == Precision::fp32 || cfg.dtype == Precision::tf32)
    add("16-bit mixed precision (bf16)", "--dtype bf16",
        [](RunConfig& c) { c.dtype = Precision::bf16; });
  return out;
}

Plan make_plan(const RunConfig& cfg, const Device& device, const PlanRequest& request) {
  Plan plan;
  plan.config = cfg;
  plan.device = device.info;
  plan.capacity = device.info.total;
  plan.margin = request.margin.of(plan.capacity);
  plan.planning_capacity = plan.capacity - plan.margin;
  plan.target_batch = request.target_batch;
  if (plan.planning_capacity <= device.info.fixed_overhead)
    throw UsageError(
        plan.planning_capacity <= 0
            ? fmt::format("--safety-margin {}: {} is not below the capacity, {}",
                          request.margin.text(), format_bytes(plan.margin),
                          format_bytes(plan.capacity))
            : fmt::format("--safety-margin {}: leaves {} of the {} capacity, not even the CUDA "
                          "context ({})",
                          request.margin.text(), format_bytes(plan.planning_capacity),
                          format_bytes(plan.capacity), format_bytes(device.info.fixed_overhead)));
  const DeviceInfo planning_info = with_margin(device.info, plan.margin);
  const Device planning = simulated(planning_info);
  const Device whole = simulated(device.info);

  // Accumulating gradients keeps every gradient live for the whole step (config/run_config.h), so a
  // micro-batch that needs accumulation is searched with it. With a target the plan chooses the
  // accumulation; without one it is --grad-accum's.
  // Over N GPUs the target is the global batch, micro-batch x accumulation x N: each rank's share
  // is the target / N.
  std::optional<std::int64_t> rank_target = request.target_batch;
  if (rank_target && *rank_target % cfg.gpus != 0)
    throw UsageError(fmt::format(
        "--target-batch {} is the global batch, micro-batch x grad-accum x --gpus {}: give a "
        "multiple of {}",
        *rank_target, cfg.gpus, cfg.gpus));
  if (rank_target) *rank_target /= cfg.gpus;
  const std::int64_t target = rank_target.value_or(0);

  // The longest sequence at micro-batch 1; with --seq max the plan is made there.
  RunConfig at_one = cfg;
  at_one.batch = 1;
  at_one.grad_accum = rank_target ? target : cfg.grad_accum;
  plan.longest_seq = measure_max_seq(at_one, planning, request.seq_limits);
  if (request.seq_max)
    plan.config.seq = std::max(plan.longest_seq.search.max_seq, request.seq_limits.granule);

  // With a target there is no use for a micro-batch above it.
  const std::int64_t limit = rank_target ? std::min(target, request.max_batch) : request.max_batch;
  plan.planned = search_micro_batch(plan.config, planning, rank_target, limit);
  const std::int64_t max_micro = plan.planned.search.max_batch;
  plan.config.grad_accum = plan.planned.config.grad_accum;
  if (rank_target) {
    plan.choice = choose_micro_batch(max_micro, target);
    if (max_micro > 0) plan.config.grad_accum = plan.choice.grad_accum;
  } else {
    plan.choice = {
        max_micro, max_micro, max_micro > 0 ? cfg.grad_accum : 0, max_micro * cfg.grad_accum, 0, 0};
  }
  plan.whole = measure(plan.config, whole, SearchLimits{limit});

  // The budget of the step as it runs within capacity - margin: there the caching allocator
  // releases its cache and retries before it fails, so its peak can be lower than unlimited. When
  // nothing fits, what micro-batch 1 would need.
  const std::int64_t budget_batch = std::max<std::int64_t>(plan.choice.micro_batch, 1);
  TrialResult budget_trial =
      run_trial(plan.config, planning, budget_batch, planning.info.tensor_capacity(), nullptr);
  if (!budget_trial.fit) budget_trial = replay_unlimited(plan.config, device.info, budget_batch);
  plan.budget = make_budget(budget_trial, plan.planned.estimate, budget_batch, plan.capacity,
                            plan.margin, device.info.fixed_overhead);

  // At the longest sequence micro-batch 1 is the plan by construction: changes are asked for only
  // when nothing fits there.
  const bool short_of_target = rank_target && max_micro < target && !request.seq_max;
  if (max_micro == 0 || short_of_target) {
    plan.compared_batch = max_micro + 1;
    plan.compared_peak =
        replay_unlimited(plan.config, device.info, plan.compared_batch).device_peak;
    for (Alternative& alt : candidate_alternatives(plan.config)) {
      alt.peak = replay_unlimited(alt.config, device.info, plan.compared_batch).device_peak;
      alt.saved = plan.compared_peak - alt.peak;
      if (alt.saved <= 0) continue;  // changes nothing at this batch, or costs memory
      alt.max_micro_batch =
          search_micro_batch(alt.config, planning, rank_target, limit).search.max_batch;
      if (rank_target) alt.choice = choose_micro_batch(alt.max_micro_batch, target);
      plan.alternatives.push_back(std::move(alt));
    }
    std::stable_sort(plan.alternatives.begin(), plan.alternatives.end(),
                     [](const Alternative& a, const Alternative& b) {
                       if (a.saved != b.saved) return a.saved > b.saved;
                       return a.max_micro_batch > b.max_micro_batch;
                     });
  }
  return plan;
}

}  // namespace vrambench
