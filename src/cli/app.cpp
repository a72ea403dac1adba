// The command line (app.h): CLI11 wiring for every subcommand. The only file that parses a
// command line.
#include "cli/app.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "config/fields.h"
#include "core/error.h"
#include "core/units.h"
#include "core/version.h"
#include "device/device.h"
#include "model/families.h"
#include "model/model_file.h"
#include "sweep/shard.h"
#include "sweep/sweep.h"

namespace vrambench {
namespace {

constexpr std::string_view kSubcommands[] = {"search", "estimate", "plan",    "program", "compare",
                                             "merge",  "presets",  "devices", "selftest"};

constexpr const char* kExamples = R"(Examples:
  vrambench --sweep seq=512..8192
      the largest batch at each sequence length (gpt2, bf16, flash, AdamW, as Hugging Face
      transformers on PyTorch holds it) on the default device: your GPU, or a simulated H100
      80GB when there is none; --framework lean for a hand-written trainer's step
  vrambench --device sim:rtx4090 --preset llama3-8b --dtype bf16 --recompute full \
            --sweep seq=1024,2048,4096 --sweep attention=eager,flash
  vrambench estimate --preset llama2-7b --dtype bf16 --sweep seq=512..8192 --vram 80GiB
      the model alone, read off the step program (no search), instantly
  vrambench --device sim:rtx4090 --preset llama3.2-1b --finetune lora --over seq
      the longest sequence (a multiple of 64) at batch 1, by the same bracketing and bisection
  vrambench estimate --model ~/models/Qwen2.5-1.5B --finetune qlora --recompute full
      your model from its config.json (or the folder holding it); --sweep model=a,b compares
  vrambench estimate --preset gpt2 --batch 16 --seq 1024 --vram 24GiB
      the estimated peak of one batch, and whether it fits (--sweep batch=1,8,16: each)
  vrambench estimate --preset llama3-8b --gpus 8 --strategy zero3 --batch 1 --seq 2048
      one rank's memory of 8 GPUs under DeepSpeed ZeRO-3, beside DeepSpeed's own estimate
      (--strategy ddp|zero1|zero2|zero3|fsdp|hsdp, --offload optimizer|params)
  vrambench --preset llama3-8b --strategy fsdp --sweep gpus=1,2,4,8 --seq 4096
      the largest per-GPU micro-batch under FSDP2 as the GPUs grow
  vrambench estimate --preset qwen3-30b-a3b --finetune lora --batch 1 --seq 2048 \
            --lora-targets q_proj,v_proj,experts.gate_up_proj,experts.down_proj
      a mixture of experts (mixtral, qwen3_moe, olmoe configs), LoRA on its experts too;
      --routing balanced|skewed says how the tokens spread over the experts
  vrambench --preset llama3.2-3b --finetune lora --trainer dpo --device sim:rtx4090 \
            --sweep seq=512..4096
      the largest batch of DPO pairs (TRL's DPOTrainer; --trainer kto, --reference
      copy|adapters|precomputed)
  vrambench program --preset tiny --batch 2 --seq 64
      every op of the training step with the live memory after it
  vrambench plan --preset llama3.2-3b --finetune lora --device sim:rtx4090 --target-batch 32
      micro-batch and grad-accum for an effective batch of 32, the memory budget, and what to
      change when it needs accumulation (`vrambench plan --help`)
  vrambench presets        the model presets;   vrambench devices   GPUs and simulated cards

Workflows:
  vrambench --sweep seq=512..8192 --out runs --name seq --resume
      finish a sweep that was killed: the rows in runs/seq.* are kept, only the rest runs
  vrambench --sweep seq=512..8192 --shard 0/2 --out parts --name seq-0    (and --shard 1/2 ...)
  vrambench merge results/h100/seq parts/seq-0.json parts/seq-1.json
      split a sweep over processes or GPUs, then join the parts in the sweep's order
  vrambench compare results/sim-h100-80gb/grid-gpt2.csv fresh/grid-gpt2.csv --tolerance 1
      the rows whose peaks moved more than 1% or whose max batch changed; exit 1 if any

Sweeps (--sweep is repeatable; the grid is the Cartesian product):
  seq=512..8192 (doubling)   seq=512..4096:+512   seq=256..8192:*4   seq=512,1024,3000
  dtype=fp16,bf16   preset=gpt2,gpt2-medium   vram=16GiB,24GiB   seq=[512:4096:512]   seq[pow2]=[9:13]
Sizes: 24GiB, 24GB (decimal), 16384MiB, or a bare number of GiB.
Results: an aligned Markdown table on stdout; CSV and JSON under --out (default results/).)";

constexpr const char* kPlanExamples = R"(Examples:
  vrambench plan --preset llama2-7b --finetune qlora --lora-rank 16 --optimizer paged-adamw-8bit \
                 --recompute full --vram 6GiB --seq 2048 --target-batch 16
      QLoRA on a 6 GB card: micro-batch, grad-accum, the budget, and what to change
  vrambench plan --preset qwen2.5-7b --finetune lora --vram 24GiB --seq 2048 --target-batch 16
      a recipe that needs accumulation: the alternatives, each measured, ranked by memory saved
  vrambench plan --preset llama3.2-3b --finetune lora --device sim:rtx4090 --target-batch 32 --emit hf
      a Python snippet: TrainingArguments, LoraConfig (and BitsAndBytesConfig for QLoRA)
  vrambench plan --preset mistral-7b --finetune qlora --vram auto --seq max --emit axolotl
      the longest sequence at micro-batch 1 on this GPU's free memory, as Axolotl keys
  vrambench plan --preset llama3-8b --gpus 4 --strategy fsdp --device sim:h100-80gb \
                 --target-batch 64 --emit accelerate
      four GPUs under FSDP2: the per-GPU micro-batch (micro x accum x 4 = 64), as an accelerate
      config file; --strategy zero3 --emit deepspeed writes the ZeRO JSON

The micro-batch: the largest that fits in capacity - safety margin and divides the target;
grad-accum = target / micro-batch, so micro x accum is the target, always (over --gpus N the
target is the global batch: micro x accum x N). Where the largest that
fits would run much more per step and reaches an effective batch near the target, that is listed
as a near alternative (give its effective batch as --target-batch to plan it), never substituted.
Trials are sim replays of the device; see docs/plan.md.)";

// The value a field has when it is not given, for --help.
std::string default_text(const RunConfig& defaults, const FieldInfo& info) {
  if (info.name == "vram") return "the device's memory";
  return field_text(info, get_field(defaults, info));
}

std::string_view type_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::integer:
      return "N";
    case FieldKind::real:
      return "P";
    case FieldKind::number:
      return "X";
    case FieldKind::size:
      return "SIZE";
    case FieldKind::choice:
      return "NAME";
    case FieldKind::text:
      return "NAME";
  }
  return "VALUE";
}

// A name of enum_names<E>() becomes E: the validator turns the name into the enum's underlying
// value, which CLI11 then converts; anything else fails naming the allowed names.
template <typename E>
CLI::Validator choice_of() {
  std::string allowed;
  for (const auto& [value, name] : enum_names<E>())
    allowed += fmt::format("{}{}", allowed.empty() ? "" : "|", name);
  return CLI::Validator(
      [allowed](std::string& text) -> std::string {
        for (const auto& [value, name] : enum_names<E>())
          if (name == text) {
            text = std::to_string(static_cast<std::underlying_type_t<E>>(value));
            return {};
          }
        for (const auto& [value, name] : enum_aliases<E>())
          if (name == text) {
            text = std::to_string(static_cast<std::underlying_type_t<E>>(value));
            return {};
          }
        return fmt::format("invalid '{}': allowed values are {}", text, allowed);
      },
      allowed);
}

// A size in the units parser's forms ("24GiB", "16GB", "20.5" GiB) becomes its bytes.
CLI::Validator size_in_bytes() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          text = std::to_string(parse_bytes(text));
          return {};
        } catch (const UsageError& e) {
          return e.what();
        }
      },
      "");
}

// A whole number above 0 (counts and sizes of the model, --max-batch).
const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      std::int64_t n = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec == std::errc::result_out_of_range)
        return fmt::format("invalid '{}': overflows 64 bits", text);
      if (ec != std::errc() || end != text.data() + text.size())
        return fmt::format("invalid '{}': expected a whole number", text);
      if (n <= 0) return fmt::format("invalid {}: must be a positive integer", text);
      return {};
    },
    "POSITIVE");

// A number above 0 (or at least 0), its bound said in words: CLI11's own range checks print the
// largest double in full.
CLI::Validator number_at_least_zero(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x) || !std::isfinite(x))
          return fmt::format("invalid '{}': expected a number", text);
        if (zero_allowed ? x < 0.0 : x <= 0.0)
          return fmt::format("invalid {}: must be {}", text,
                             zero_allowed ? "0 or more" : "a positive number");
        return {};
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}
const CLI::Validator kPositiveNumber = number_at_least_zero(false);
const CLI::Validator kNonNegativeNumber = number_at_least_zero(true);

// --name is a file name under --out, never a path: a separator (or "..") would write elsewhere.
const CLI::Validator kFileName(
    [](std::string& text) -> std::string {
      if (text.empty() || text == "." || text == "..")
        return fmt::format("invalid '{}': give a file name, e.g. --name grid", text);
      if (text.find_first_of("/\\") != std::string::npos)
        return fmt::format("invalid '{}': a file name, without '/' or '\\' (the folder is --out)",
                           text);
      return {};
    },
    "NAME");

// [0, 1), for probabilities.
const CLI::Validator kProbability(
    [](std::string& text) -> std::string {
      double p = 0;
      if (!CLI::detail::lexical_cast(text, p) || !(p >= 0.0 && p < 1.0))
        return fmt::format("{} is not in [0, 1)", text);
      return {};
    },
    "in [0, 1)");

// One --FIELD option, typed by the field's value in the default configuration; each stores what
// it parsed in options.fields.
void add_field_option(CLI::App* app, CliOptions& options, const FieldInfo& info,
                      const RunConfig& defaults) {
  const std::string name(info.name);
  const std::string flag = "--" + name;
  const std::string help = fmt::format("{} (default: {})", info.help, default_text(defaults, info));
  auto store = [&options, name](const auto& value) { options.fields[name] = value; };
  CLI::Option* option = std::visit(
      [&](const auto& value) -> CLI::Option* {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_enum_v<T>) {
          return app->add_option_function<T>(flag, store, help)->transform(choice_of<T>());
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          if (info.kind == FieldKind::size)
            return app->add_option_function<T>(flag, store, help)->transform(size_in_bytes());
          return app->add_option_function<T>(flag, store, help)->check(kPositive);
        } else if constexpr (std::is_same_v<T, double>) {
          if (info.kind == FieldKind::number)
            return app->add_option_function<T>(flag, store, help)->check(kPositiveNumber);
          return app->add_option_function<T>(flag, store, help)->check(kProbability);
        } else if constexpr (std::is_same_v<T, LoraTargets>) {
          return app->add_option_function<std::string>(
              flag, [store](const std::string& text) { store(parse_lora_targets(text)); }, help);
        } else if constexpr (std::is_same_v<T, ModelConfig>) {
          if (info.name == "model")
            return app->add_option_function<std::string>(
                flag, [store](const std::string& path) { store(read_model_file(path)); }, help);
          std::vector<std::string> names;
          for (const Preset& p : presets()) names.emplace_back(p.name);
          return app
              ->add_option_function<std::string>(
                  flag, [store](const std::string& preset) { store(find_preset(preset).model); },
                  help)
              ->check(CLI::IsMember(names));
        } else {
          static_assert(std::is_same_v<T, DeviceChoice>);
          return app->add_option_function<std::string>(
              flag, [store](const std::string& text) { store(parse_device(text)); }, help);
        }
      },
      get_field(defaults, info));
  option->type_name(std::string(type_name(info.kind)))->group("Configuration");
}

// plan's --seq N|max and --vram SIZE|auto: the field's value, or the word that asks plan to find
// it.
void add_plan_field_option(CLI::App* app, CliOptions& options, const FieldInfo& info) {
  const bool seq = info.name == "seq";
  const std::string word = seq ? "max" : "auto";
  const std::string help =
      seq ? "sequence length S, or max: the longest (a multiple of 64) that fits at micro-batch 1 "
            "(default: 1024)"
          : "capacity to plan for, e.g. 24GiB (a simulated card of that size without --device), "
            "or auto: the CUDA device's free memory (a sim profile's own capacity with --device "
            "sim:PROFILE) (default: the device's memory)";
  app->add_option_function<std::string>(
         "--" + std::string(info.name),
         [&options, &info, seq, word](const std::string& text) {
           if (text == word) {
             (seq ? options.plan.seq_max : options.plan.vram_auto) = true;
             options.fields.erase(std::string(info.name));
             return;
           }
           (seq ? options.plan.seq_max : options.plan.vram_auto) = false;
           options.fields[std::string(info.name)] = parse_field(info, text);
         },
         help)
      ->type_name(seq ? "N|max" : "SIZE|auto")
      ->group("Configuration");
}

// `plan`: --seq and --vram also take a word (add_plan_field_option).
void add_config_options(CLI::App* app, CliOptions& options, bool plan = false) {
  const RunConfig defaults = base_config(CliOptions{});
  for (const FieldInfo& info : fields()) {
    if (plan && (info.name == "seq" || info.name == "vram"))
      add_plan_field_option(app, options, info);
    else
      add_field_option(app, options, info, defaults);
  }
  app->add_option_function<std::vector<std::string>>(
         "--sweep",
         [&options](const std::vector<std::string>& axes) {
           for (const std::string& axis : axes) options.sweeps.push_back(parse_axis(axis));
         },
         "an axis FIELD=VALUES, e.g. seq=512..8192, dtype=fp16,bf16 (repeatable)")
      ->type_name("AXIS")
      ->group("Sweep");
}

void add_format_option(CLI::App* app, CliOptions& options) {
  app->add_option_function<std::string>(
         "--format", [&options](const std::string& text) { options.formats = parse_formats(text); },
         "any of md,csv,json (default: md,csv,json)")
      ->group("Output");
}

void add_output_options(CLI::App* app, CliOptions& options) {
  app->add_option("--out", options.out, "folder for the CSV and JSON files")
      ->capture_default_str()
      ->group("Output");
  app->add_option("--name", options.name,
                  "base name of the output files under --out, no folder (default: command-time)")
      ->check(kFileName)
      ->group("Output");
  add_format_option(app, options);
}

void add_jobs_option(CLI::App* app, CliOptions& options) {
  app->add_option("--jobs", options.jobs,
                  "configurations worked on at once on the sim device (and by estimate), on as "
                  "many threads; 0: one per core (the default). The tables are the same; a GPU's "
                  "and the cpu device's configurations always run one at a time")
      ->check(CLI::NonNegativeNumber)
      ->type_name("N")
      ->group("Output");
}

void add_shard_option(CLI::App* app, CliOptions& options) {
  app->add_option_function<std::string>(
         "--shard", [&options](const std::string& text) { options.shard = parse_shard(text); },
         "run every N-th configuration of the sweep starting at K (0 <= K < N); join the parts "
         "with `vrambench merge`")
      ->type_name("K/N")
      ->group("Output");
}

// --safety-margin on plan, where it is subtracted from the capacity, and on search, which accepts
// it so that one set of options serves both and never applies it to a measurement.
void add_safety_margin_option(CLI::App* app, CliOptions& options) {
  app->add_option_function<std::string>(
         "--safety-margin",
         [&options](const std::string& text) { options.plan.margin = parse_safety_margin(text); },
         app->get_name() == "plan"
             ? "kept free when planning: a size (512MiB, 1GiB) or a share of the capacity (10%) "
               "(default: 1GiB)"
             : "accepted for symmetry with `vrambench plan`; never changes a measurement")
      ->type_name("SIZE|PCT")
      ->group(app->get_name() == "plan" ? "Plan" : "Search");
}

// `vrambench --sweep ...` means `vrambench search --sweep ...`. `args` starts with the program's
// name.
std::vector<std::string> with_default_command(std::vector<std::string> args) {
  if (args.size() < 2) {
    args.insert(args.begin() + 1, "search");
    return args;
  }
  const std::string& first = args[1];
  for (std::string_view sub : kSubcommands)
    if (first == sub) return args;
  if (first == "-h" || first == "--help" || first == "--version") return args;
  args.insert(args.begin() + 1, "search");
  return args;
}

// `search`, the default command: the batch search and its options.
CLI::App* add_search_command(CLI::App& app, CliOptions& options) {
  CLI::App* search = app.add_subcommand(
      "search", "binary-search the largest batch per configuration on the device (the default)");
  add_config_options(search, options);
  add_output_options(search, options);
  search->add_option("--max-batch", options.max_batch, "never try a batch above this")
      ->check(kPositive)
      ->capture_default_str();
  search->add_flag("--resume", options.resume,
                   "keep the rows a run of the same command, --out and --name finished (final or "
                   "partial files) and run only the rest; a run of another command, device or "
                   "version is refused");
  add_shard_option(search, options);
  add_jobs_option(search, options);
  add_safety_margin_option(search, options);
  search
      ->add_option_function<std::string>(
          "--over", [&options](const std::string& text) { options.over_seq = text == "seq"; },
          "what the search finds: the largest batch (batch; the default), or the longest sequence "
          "at --batch (default 1), a multiple of 64 (seq; sim and cpu devices)")
      ->check(CLI::IsMember({"batch", "seq"}))
      ->type_name("batch|seq")
      ->group("Search");
  search->add_flag("--isolate", options.isolate,
                   "measure each configuration in a child process (always on for cuda)");
  search
      ->add_option("--flash-impl", options.device.flash,
                   "cuda: flash attention through cuDNN's fused attention (cudnn: an op cuDNN "
                   "cannot run fails the row, no fallback), the fused kernels (kernels), or "
                   "cudnn for fp16/bf16 and kernels for fp32/tf32 (auto; the default)")
      ->transform(choice_of<FlashImpl>());
  search
      ->add_option("--cuda-memory", options.device.memory,
                   "cuda: where segments come from: cudaMalloc (malloc; the default) or "
                   "cudaMallocAsync on a pool of their own (async)")
      ->transform(choice_of<CudaMemory>());
  search
      ->add_option("--trial-timeout", options.trial_timeout,
                   "seconds: an isolated trial (cuda, or --isolate) that runs longer is stopped "
                   "and its row says timeout")
      ->check(kPositiveNumber)
      ->capture_default_str();
  search->add_flag_callback(
      "--no-execute", [&options] { options.device.execute = false; },
      "allocate every tensor of the step but run no kernel (cpu, cuda)");
  search->footer(kExamples);
  return search;
}

// `plan`: trainer settings for a capacity.
CLI::App* add_plan_command(CLI::App& app, CliOptions& options) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "trainer settings for a capacity: micro-batch and grad-accum for a target batch, the "
      "longest sequence, where the memory goes, and what to change when it does not fit "
      "(sim replay of the device)");
  add_config_options(plan, options, true);
  add_safety_margin_option(plan, options);
  plan->add_option("--target-batch", options.plan.target_batch,
                   "the effective (global) batch: micro-batch x grad-accum (x --gpus)")
      ->check(kPositive)
      ->type_name("N")
      ->group("Plan");
  plan->add_option_function<std::string>(
          "--emit",
          [&options](const std::string& text) { options.plan.emit = parse_plan_emit(text); },
          "text (Markdown; the default), hf (Python: TrainingArguments, BitsAndBytesConfig, "
          "LoraConfig), axolotl (YAML keys), json (everything), accelerate (an accelerate "
          "config file for --gpus and --strategy) or deepspeed (a ZeRO config JSON)")
      ->type_name("text|hf|axolotl|json|accelerate|deepspeed")
      ->group("Plan");
  plan->add_option("--max-batch", options.max_batch, "never try a micro-batch above this")
      ->check(kPositive)
      ->capture_default_str()
      ->group("Plan");
  plan->footer(kPlanExamples);
  return plan;
}

// `compare`: two result files joined on their configurations.
CLI::App* add_compare_command(CLI::App& app, CliOptions& options) {
  CLI::App* compare = app.add_subcommand(
      "compare",
      "join two result files (CSV or JSON) on their configuration columns and show what moved; "
      "exit 0 when every row is within tolerance, 1 when not (or when a peak or max batch "
      "column is in one file only, or the JSON are of another command, device or framework: "
      "the first line says), 2 on bad input");
  compare->add_option("BASE", options.base, "the reference: NAME.csv or NAME.json")->required();
  compare->add_option("NEW", options.fresh, "the table to check against it")->required();
  compare
      ->add_option("--tolerance", options.compare.tolerance_percent,
                   "percent a peak may move, relative to BASE")
      ->check(kNonNegativeNumber)
      ->type_name("PCT")
      ->capture_default_str();
  compare
      ->add_option("--batch-tolerance", options.compare.batch_tolerance,
                   "how many a max batch may move")
      ->check(kNonNegativeNumber)
      ->type_name("N")
      ->capture_default_str();
  compare->add_flag("--all", options.compare.all,
                    "show every matched row, not only those out of tolerance");
  compare->footer(R"(Examples:
  vrambench compare results/sim-h100-80gb/grid-gpt2.csv fresh/grid-gpt2.csv
      any change at all fails (exit 1): the regression gate for the sim tables
  vrambench compare results/h100/headline.json today/headline.json --tolerance 1 --batch-tolerance 1
      a GPU run against its reference: peaks within 1%, max batches within 1
  vrambench compare old.csv new.csv --all
      every row with its changes, not only those out of tolerance)");
  return compare;
}

// `merge`: the shards of one sweep joined.
CLI::App* add_merge_command(CLI::App& app, CliOptions& options) {
  CLI::App* merge = app.add_subcommand(
      "merge",
      "join the JSON of the shards of one sweep (--shard K/N) into one table, in the sweep's "
      "order; refuses parts of another command, version or device");
  merge->add_option("OUT", options.merge_out, "FOLDER/NAME of the merged files")->required();
  merge->add_option("PARTS", options.parts, "the NAME.json of every shard")->required();
  add_format_option(merge, options);
  merge->footer(R"(Examples:
  vrambench merge results/h100/grid parts/grid-0.json parts/grid-1.json parts/grid-2.json
      writes results/h100/grid.csv and .json, prints the table
  vrambench merge results/h100/grid parts/grid-*.json --format csv,json
      (see docs/cluster.md for Slurm job arrays and one process per GPU))");
  return merge;
}

int run_app(const std::vector<std::string>& command_line, const CliStreams& streams) {
  CliOptions options;
  options.streams = streams;
  CLI::App app{
      "vrambench: the largest training batch that fits on a GPU, measured, next to the "
      "estimate read off the same step program, and the formula calculators use."};
  app.name("vrambench");
  app.set_version_flag("--version", fmt::format("vrambench {} ({})", kVersion, kGitCommit));
  app.footer(kExamples);
  app.require_subcommand(1, 1);

  CLI::App* search = add_search_command(app, options);

  CLI::App* estimate = app.add_subcommand(
      "estimate", "the memory model over a sweep, read off the step program (no search)");
  add_config_options(estimate, options);
  add_output_options(estimate, options);
  add_shard_option(estimate, options);
  add_jobs_option(estimate, options);
  estimate->footer(kExamples);

  CLI::App* plan = add_plan_command(app, options);

  CLI::App* program = app.add_subcommand(
      "program", "print the op list of one training step with the live bytes after each op");
  add_config_options(program, options);

  CLI::App* compare = add_compare_command(app, options);

  CLI::App* merge = add_merge_command(app, options);

  CLI::App* presets =
      app.add_subcommand("presets", "list the model presets with their parameter counts");
  CLI::App* devices =
      app.add_subcommand("devices", "list detected GPUs and the simulated GPU profiles");
  CLI::App* selftest =
      app.add_subcommand("selftest", "run every CUDA op against the CPU reference (needs a GPU)");
  // Every command takes --quiet, so that scripts can pass it to any of them.
  for (CLI::App* command :
       {search, estimate, plan, program, compare, merge, presets, devices, selftest})
    command->add_flag("--quiet", options.quiet, "no progress line on stderr");

  std::vector<std::string> args = with_default_command(command_line);
  std::vector<const char*> cargs;
  for (const std::string& a : args) cargs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version are CLI11's ParseErrors of exit code 0: printed as CLI11 prints them.
    if (e.get_exit_code() != 0) throw CommandLineError(e.what());
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    fmt::print(streams.out, "{}", out.str());
    fmt::print(streams.err, "{}", err.str());
    return code;
  }

  const int n = static_cast<int>(cargs.size());
  const char* const* a = cargs.data();
  if (search->parsed()) return run_search_command(options, n, a);
  if (estimate->parsed()) return run_estimate_command(options, n, a);
  if (plan->parsed()) return run_plan_command(options);
  if (program->parsed()) return run_program_command(options);
  if (compare->parsed()) return run_compare_command(options);
  if (merge->parsed()) return run_merge_command(options);
  if (presets->parsed()) return run_presets_command(streams);
  if (devices->parsed()) return run_devices_command(streams);
  if (selftest->parsed()) return run_selftest_command(streams);
  return 2;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, const CliStreams& streams) {
  std::vector<std::string> command_line{"vrambench"};
  command_line.insert(command_line.end(), args.begin(), args.end());
  return run_app(command_line, streams);
}

int cli_main(const std::vector<std::string>& args) {
  try {
    return run_cli(args);
  } catch (const CommandLineError& e) {
    fmt::print(stderr, "vrambench: error: {} (see vrambench --help)\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    fmt::print(stderr, "vrambench: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "vrambench: internal error: {}\n", e.what());
    return 1;
  }
}

}  // namespace vrambench
