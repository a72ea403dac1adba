// `vrambench plan`: checks the request, resolves the capacity to plan for (--vram SIZE|auto, a sim
// profile, the GPU), makes one plan per configuration (src/plan/) and prints it in the form asked.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "config/gpu_profiles.h"
#include "core/error.h"
#include "device/device.h"
#include "device/gpu.h"
#include "plan/emit.h"
#include "plan/plan.h"

namespace vrambench {
namespace {

bool swept(const Grid& grid, std::string_view field) {
  return std::any_of(grid.axes.begin(), grid.axes.end(),
                     [&](const Axis& a) { return a.field == field; });
}

// Mistakes that need the grid: one line each, before anything runs.
void check_request(const CliOptions& options, const Grid& grid) {
  const PlanCliOptions& p = options.plan;
  if (options.fields.count("batch") > 0 || swept(grid, "batch"))
    throw UsageError(
        "--batch: plan finds the micro-batch; give the effective batch with --target-batch N");
  if (p.target_batch && (options.fields.count("grad-accum") > 0 || swept(grid, "grad-accum")))
    throw UsageError(
        "--grad-accum: plan chooses the accumulation for --target-batch; give one of them");
  if (p.seq_max && swept(grid, "seq"))
    throw UsageError("--seq max: the sequence is what plan finds; drop the seq sweep");
  if (p.vram_auto && swept(grid, "vram"))
    throw UsageError("--vram auto: the capacity is the GPU's free memory; drop the vram sweep");
  const bool one_only = p.emit != PlanEmit::text && p.emit != PlanEmit::json;
  if (grid.configs.size() != 1 && one_only)
    throw UsageError(fmt::format(
        "--emit {}: settings for one configuration, the sweep has {}; drop --sweep or use --emit "
        "text|json",
        to_string(p.emit), grid.configs.size()));
  if (p.emit == PlanEmit::deepspeed && grid.configs.size() == 1)
    require_zero_strategy(grid.configs.front());
  // Both print a transformers setup: only a plan of the transformers step has one.
  if ((p.emit == PlanEmit::hf || p.emit == PlanEmit::axolotl) && grid.configs.size() == 1 &&
      framework_of(grid.configs.front()) != Framework::hf) {
    const RunConfig& cfg = grid.configs.front();
    throw UsageError(fmt::format(
        "--emit {} prints the transformers setup a plan modelled, and this plan is for framework "
        "lean (a hand-written trainer{}); plan the transformers step with --framework hf or "
        "auto, or use --emit text|json",
        p.emit == PlanEmit::hf ? "hf" : "axolotl",
        cfg.framework == Framework::automatic ? fmt::format(": {}", hf_gap(cfg)) : ""));
  }
}

// The device a configuration is planned on (only its figures are used: every trial is a sim
// replay). --vram SIZE with no --device: a simulated card of that size (the default profile's
// context and GEMM workspace). --vram auto: a sim profile's own capacity, or the GPU's memory as it
// is now (what other processes hold counts as used, with the context). A device's note goes to
// `notes`.
Device planning_device(RunConfig cfg, bool vram_auto, std::FILE* notes) {
  using Kind = DeviceChoice::Kind;
  if (vram_auto) {
    if (cfg.device.kind == Kind::cpu)
      throw UsageError(
          "--vram auto reads a CUDA device's free memory; with --device cpu give --vram SIZE");
    cfg.vram = 0;
    if (cfg.device.kind == Kind::sim) return make_device(cfg);
    const GpuPresence gpu = probe_gpu();
    if (!gpu.available)
      throw UsageError(fmt::format(
          "--vram auto: no GPU to read free memory from ({}); give --vram SIZE, or --device "
          "sim:PROFILE to plan for a card",
          gpu.why));
    cfg.device.kind = Kind::cuda;
    Device d = make_device(cfg);
    d.info.label += fmt::format(", {} free now", format_bytes(d.info.tensor_capacity()));
    return d;
  }
  if (cfg.device.kind == Kind::automatic && cfg.vram > 0) {
    Device d = sim_device(find_gpu_profile(kDefaultProfile), cfg.vram);
    d.info.label = fmt::format("sim ({})", format_bytes(cfg.vram));
    return d;
  }
  std::string note;
  Device d = make_device(cfg, {}, &note);
  if (!note.empty()) fmt::print(notes, "{}\n", note);
  return d;
}

}  // namespace

int run_plan_command(const CliOptions& options) {
  const PlanCliOptions& p = options.plan;
  const Grid grid = make_grid(options);
  check_request(options, grid);
  PlanRequest request;
  request.margin = p.margin;
  request.target_batch = p.target_batch;
  request.seq_max = p.seq_max;
  request.max_batch = options.max_batch;

  // Every device first, so that a bad one stops the command before any trial.
  std::map<std::pair<DeviceChoice, Bytes>, Device> devices;
  for (const RunConfig& cfg : grid.configs)
    if (!devices.count({cfg.device, cfg.vram}))
      devices.emplace(std::pair{cfg.device, cfg.vram},
                      planning_device(cfg, p.vram_auto, options.streams.err));
  std::vector<Plan> plans;
  for (const RunConfig& cfg : grid.configs)
    plans.push_back(make_plan(cfg, devices.at({cfg.device, cfg.vram}), request));

  const bool one = plans.size() == 1;
  switch (p.emit) {
    case PlanEmit::text:
      fmt::print(options.streams.out, "{}",
                 one ? plan_markdown(plans.front()) : plans_markdown(plans, grid.varying));
      break;
    case PlanEmit::json:
      fmt::print(options.streams.out, "{}\n",
                 (one ? plan_json(plans.front()) : plans_json(plans, grid.varying)).dump(2));
      break;
    case PlanEmit::hf:
      fmt::print(options.streams.out, "{}", plan_hf_snippet(plans.front()));
      break;
    case PlanEmit::axolotl:
      fmt::print(options.streams.out, "{}", plan_axolotl_yaml(plans.front()));
      break;
    case PlanEmit::accelerate:
      fmt::print(options.streams.out, "{}", plan_accelerate_yaml(plans.front()));
      break;
    case PlanEmit::deepspeed:
      fmt::print(options.streams.out, "{}\n", plan_deepspeed_json(plans.front()).dump(2));
      break;
  }
  return 0;
}

}  // namespace vrambench
