// From options to validated configurations.
#include "cli/options.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

#include "config/fields.h"
#include "core/error.h"
#include "model/families.h"
#include "report/result_tables.h"

namespace vrambench {

Formats parse_formats(const std::string& text) {
  Formats f{false, false, false};
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "md" || item == "markdown")
      f.markdown = true;
    else if (item == "csv")
      f.csv = true;
    else if (item == "json")
      f.json = true;
    else
      throw UsageError(
          fmt::format("invalid --format '{}': use a list of md, csv, json (e.g. md,csv)", text));
  }
  if (!f.markdown && !f.csv && !f.json)
    throw UsageError(fmt::format("invalid --format '{}': use a list of md, csv, json", text));
  return f;
}

RunConfig base_config(const CliOptions& options) {
  if (options.fields.count("preset") > 0 && options.fields.count("model") > 0)
    throw UsageError("--preset and --model both name the model: give one of them");
  RunConfig cfg;
  cfg.model = find_preset("gpt2").model;
  // Field table order, preset first, so that e.g. --arch applies before --hidden whatever the argv
  // order.
  for (const FieldInfo& info : fields())
    if (auto it = options.fields.find(std::string(info.name)); it != options.fields.end())
      set_field(cfg, info, it->second);
  return cfg;
}

namespace {

// An option that only a recipe the grid never runs reads would be ignored without a word: the
// LoRA options without LoRA, --double-quant without a 4-bit base. Given (or swept) where no
// configuration uses it, it is refused, naming what it needs.
void check_recipe_options(const CliOptions& options, const Grid& grid) {
  const auto given = [&](std::string_view field) {
    return options.fields.count(std::string(field)) > 0 ||
           std::any_of(grid.axes.begin(), grid.axes.end(),
                       [&](const Axis& a) { return a.field == field; });
  };
  const auto any = [&](bool (*uses)(const RunConfig&)) {
    return std::any_of(grid.configs.begin(), grid.configs.end(), uses);
  };
  for (std::string_view field : {"lora-rank", "lora-alpha", "lora-dropout", "lora-targets"})
    if (given(field) && !any([](const RunConfig& c) { return is_finetune(c); }))
      throw UsageError(fmt::format(
          "--{} sets the LoRA adapters: it needs --finetune lora or qlora (the recipe is full "
          "training, which has none)",
          field));
  if (given("double-quant") && !any([](const RunConfig& c) {
        return base_quant(c) == QuantKind::nf4 || base_quant(c) == QuantKind::fp4;
      }))
    throw UsageError(
        "--double-quant quantises the absmax of a 4-bit base: it needs --quant nf4|fp4 or "
        "--finetune qlora");
}

}  // namespace

Grid make_grid(const CliOptions& options) {
  Grid grid;
  const RunConfig base = base_config(options);
  grid.axes = options.sweeps;
  grid.varying = varying_fields(grid.axes);
  grid.configs = expand(base, grid.axes);
  // A preference trainer's reference is named as TRL resolves it (auto: adapters under PEFT, a
  // copy under full fine-tuning), in the figures and in every row's key.
  for (RunConfig& cfg : grid.configs)
    if (is_preference(cfg)) cfg.reference = reference_of(cfg);
  // Models whose config.json name different dtypes vary the dtype without a dtype axis: a column
  // says which ran in which.
  const auto dtype_differs = [&](const RunConfig& cfg) {
    return cfg.dtype != grid.configs.front().dtype;
  };
  if (std::find(grid.varying.begin(), grid.varying.end(), "dtype") == grid.varying.end() &&
      std::any_of(grid.configs.begin(), grid.configs.end(), dtype_differs))
    grid.varying.emplace_back("dtype");
  // A rank's figures say whose they are: the GPUs, the strategy and any offload.
  const auto keep = [&](std::string_view field, bool wanted) {
    if (!wanted || std::find(grid.varying.begin(), grid.varying.end(), field) != grid.varying.end())
      return;
    if (grid.varying.empty()) grid.varying = key_columns({});
    grid.varying.emplace_back(field);
  };
  const bool distributed = std::any_of(grid.configs.begin(), grid.configs.end(),
                                       [](const RunConfig& c) { return is_distributed(c); });
  keep("gpus", distributed);
  keep("strategy", distributed);
  keep("offload", std::any_of(grid.configs.begin(), grid.configs.end(),
                              [](const RunConfig& c) { return c.offload != Offload::none; }));
  // A mixture of experts' figures say which routing they assume.
  keep("routing", std::any_of(grid.configs.begin(), grid.configs.end(),
                              [](const RunConfig& c) { return is_moe(c.model); }));
  // A preference trainer's figures say which trainer and reference they are of.
  const bool preference = std::any_of(grid.configs.begin(), grid.configs.end(),
                                      [](const RunConfig& c) { return is_preference(c); });
  keep("trainer", preference);
  keep("reference", preference);
  for (const RunConfig& cfg : grid.configs) {
    try {
      validate(cfg);
    } catch (const UsageError& e) {
      if (grid.configs.size() == 1) throw;
      std::string where;
      for (const std::string& f : grid.varying) {
        const FieldInfo& info = find_field(f);
        where += fmt::format(" {}={}", f, field_text(info, get_field(cfg, info)));
      }
      throw UsageError(fmt::format("{} (at grid point{})", e.what(), where));
    }
  }
  check_recipe_options(options, grid);
  std::set<Framework> frameworks;
  for (const RunConfig& cfg : grid.configs) frameworks.insert(framework_of(cfg));
  if (frameworks.empty()) frameworks.insert(framework_of(base));
  grid.framework = frameworks.size() == 1 ? std::string(to_string(*frameworks.begin())) : "per row";
  grid.recipe = recipe_text(grid.configs.empty() ? std::vector<RunConfig>{base} : grid.configs);
  if (options.shard) {
    std::vector<RunConfig> mine;
    for (std::size_t i = 0; i < grid.configs.size(); ++i)
      if (in_shard(*options.shard, i)) mine.push_back(std::move(grid.configs[i]));
    grid.configs = std::move(mine);
  }
  return grid;
}

std::string default_output_name(const std::string& command) {
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  return fmt::format("{}-{:%Y%m%d-%H%M%S}", command, now);
}

}  // namespace vrambench
