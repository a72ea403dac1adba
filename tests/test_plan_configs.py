"""`vrambench plan --emit accelerate` and `--emit deepspeed` write configs the engines accept.

Where accelerate is importable (the interpreter running this file), each accelerate config is
loaded as `accelerate launch --config_file` loads it (load_config_from_file), turned into the launch
arguments and environment (_validate_launch_command, prepare_multi_gpu_env or
prepare_deepspeed_cmd_env) and into the plugin the training process builds
(FullyShardedDataParallelPlugin, ParallelismConfig). Elsewhere (CI has no accelerate) each is held
to accelerate 1.15's documented schema: the top-level keys of ClusterConfig, the fsdp_config and
deepspeed_config keys the launcher exports, the enum values, and the sizes adding up. The DeepSpeed
JSON is held to the keys of DeepSpeed's config and its batch arithmetic (train_batch_size =
micro-batch x accumulation x GPUs), and validated by DeepSpeed's own DeepSpeedZeroConfig where
deepspeed is importable.

usage: test_plan_configs.py VRAMBENCH_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

BINARY = sys.argv[1]

# accelerate 1.15's ClusterConfig fields (accelerate/commands/config/config_args.py).
TOP_LEVEL = {
    "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug",
    "num_processes", "machine_rank", "num_machines", "gpu_ids", "main_process_ip",
    "main_process_port", "rdzv_backend", "same_network", "main_training_function",
    "enable_cpu_affinity", "downcast_bf16", "fp8_config", "deepspeed_config", "fsdp_config",
    "parallelism_config", "megatron_lm_config", "mpirun_config", "dynamo_config", "tpu_name",
    "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm",
    "tpu_env",
}
DISTRIBUTED_TYPES = {"NO", "MULTI_GPU", "DEEPSPEED", "FSDP"}
MIXED_PRECISION = {"no", "fp16", "bf16", "fp8"}
# The fsdp_config keys the launcher exports for FSDP2 (accelerate/commands/launch.py).
FSDP_KEYS = {
    "fsdp_version", "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_reshard_after_forward", "fsdp_offload_params", "fsdp_state_dict_type",
    "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_activation_checkpointing",
    "fsdp_min_num_params",
}
DEEPSPEED_KEYS = {
    "zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_accumulation_steps",
    "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model",
}
PARALLELISM_KEYS = {"parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size"}
ZERO_KEYS = {
    "stage", "offload_optimizer", "offload_param", "contiguous_gradients", "overlap_comm",
    "reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "sub_group_size",
    "stage3_gather_16bit_weights_on_model_save",
}

CASES = [
    # (arguments, distributed_type, GPUs)
    (["--gpus", "4", "--strategy", "fsdp", "--target-batch", "64"], "FSDP", 4),
    (["--gpus", "16", "--strategy", "hsdp", "--target-batch", "64"], "FSDP", 16),
    (["--gpus", "8", "--strategy", "zero3", "--offload", "optimizer", "--target-batch", "64"],
     "DEEPSPEED", 8),
    (["--gpus", "2", "--strategy", "zero2", "--target-batch", "16"], "DEEPSPEED", 2),
    (["--gpus", "2", "--strategy", "ddp", "--target-batch", "16"], "MULTI_GPU", 2),
    (["--strategy", "ddp"], "NO", 1),
]
BASE = ["plan", "--preset", "llama3.2-1b", "--device", "sim:h100-80gb", "--seq", "1024"]


def run(args):
    out = subprocess.run([BINARY] + BASE + args, capture_output=True, text=True)
    assert out.returncode == 0, f"{args}: exit {out.returncode}: {out.stderr}"
    return out.stdout


def parse_yaml(text):
    """The two-level YAML the plan writes: `key: value` and `key:` with indented children."""
    doc, section = {}, None

    def value(v):
        v = v.strip()
        if v in ("true", "false"):
            return v == "true"
        if v.startswith("'") and v.endswith("'"):
            return v[1:-1]
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return v

    for line in text.splitlines():
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped:
            continue
        key, _, rest = stripped.strip().partition(":")
        if line.startswith("  "):
            assert section is not None, f"indented line outside a section: {line!r}"
            doc[section][key] = value(rest)
        elif rest.strip():
            doc[key] = value(rest)
            section = None
        else:
            doc[key] = {}
            section = key
    return doc


def check_schema(doc, distributed_type, gpus):
    assert set(doc) <= TOP_LEVEL, f"unknown top-level keys {set(doc) - TOP_LEVEL}"
    assert doc["distributed_type"] in DISTRIBUTED_TYPES and doc["distributed_type"] == distributed_type
    assert doc["mixed_precision"] in MIXED_PRECISION
    assert doc["num_processes"] == gpus
    assert doc["num_machines"] >= 1 and doc["machine_rank"] == 0
    if distributed_type == "FSDP":
        fsdp = doc["fsdp_config"]
        assert set(fsdp) <= FSDP_KEYS, f"unknown fsdp_config keys {set(fsdp) - FSDP_KEYS}"
        assert fsdp["fsdp_version"] == 2
        assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
        assert isinstance(fsdp["fsdp_reshard_after_forward"], bool)
        assert fsdp["fsdp_state_dict_type"] in ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
        if "parallelism_config" in doc:
            p = doc["parallelism_config"]
            assert set(p) <= PARALLELISM_KEYS
            assert p["parallelism_config_dp_replicate_size"] > 1
            assert p["parallelism_config_dp_shard_size"] > 1
            assert (p["parallelism_config_dp_replicate_size"] *
                    p["parallelism_config_dp_shard_size"]) == gpus
    if distributed_type == "DEEPSPEED":
        ds = doc["deepspeed_config"]
        assert set(ds) <= DEEPSPEED_KEYS, f"unknown deepspeed_config keys {set(ds) - DEEPSPEED_KEYS}"
        assert ds["zero_stage"] in (1, 2, 3)
        assert ds["offload_optimizer_device"] in ("none", "cpu", "nvme")
        assert ds["offload_param_device"] in ("none", "cpu", "nvme")
        assert ds["gradient_accumulation_steps"] >= 1
    for key in ("fsdp_config", "deepspeed_config"):
        if key in doc:
            assert doc["distributed_type"] == ("FSDP" if key == "fsdp_config" else "DEEPSPEED")


def check_with_accelerate(path, distributed_type):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    config = load_config_from_file(path)
    assert str(config.distributed_type).endswith(distributed_type), config.distributed_type
    if distributed_type == "NO":
        return "loaded"
    args = launch_command_parser().parse_args(["--config_file", path, "train.py"])
    args, defaults, mixed = _validate_launch_command(args)
    if distributed_type == "DEEPSPEED":
        args.deepspeed_fields_from_accelerate_config = ",".join(
            list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mixed else []))
        _, env = prepare_deepspeed_cmd_env(args)
        return "loaded, launch environment made"
    env = prepare_multi_gpu_env(args)
    if distributed_type != "FSDP":
        return "loaded, launch environment made"
    saved = dict(os.environ)
    try:
        os.environ.update({k: v for k, v in env.items() if k.startswith(("FSDP_", "PARALLELISM",
                                                                          "ACCELERATE_"))})
        from accelerate.utils import FullyShardedDataParallelPlugin
        plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
        if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
            from accelerate.parallelism_config import ParallelismConfig
            pc = ParallelismConfig()
            assert pc.dp_replicate_size * pc.dp_shard_size == pc.total_size
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return "loaded, launch environment and FSDP plugin made"


def main():
    try:
        import accelerate  # noqa: F401
        have_accelerate = True
    except ImportError:
        have_accelerate = False
    with tempfile.TemporaryDirectory() as tmp:
        for args, distributed_type, gpus in CASES:
            text = run(args + ["--emit", "accelerate"])
            doc = parse_yaml(text)
            check_schema(doc, distributed_type, gpus)
            how = "schema"
            if have_accelerate:
                path = os.path.join(tmp, "accelerate.yaml")
                with open(path, "w") as f:
                    f.write(text)
                how = check_with_accelerate(path, distributed_type)
            print(f"--emit accelerate {' '.join(args)}: {distributed_type}, {how}")
            if distributed_type != "DEEPSPEED":
                continue
            ds = json.loads(run(args + ["--emit", "deepspeed"]))
            zero = ds["zero_optimization"]
            assert set(zero) <= ZERO_KEYS, set(zero) - ZERO_KEYS
            assert zero["stage"] == doc["deepspeed_config"]["zero_stage"]
            assert ds["train_batch_size"] == (ds["train_micro_batch_size_per_gpu"] *
                                              ds["gradient_accumulation_steps"] * gpus)
            assert ds["gradient_accumulation_steps"] == doc["deepspeed_config"][
                "gradient_accumulation_steps"]
            assert ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
            try:
                from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
                DeepSpeedZeroConfig(**zero)
                how = "DeepSpeedZeroConfig"
            except ImportError:
                how = "schema"
            print(f"--emit deepspeed {' '.join(args)}: stage {zero['stage']}, {how}")
    # Refused: a ZeRO config for a strategy that is not ZeRO, a target that the GPUs do not divide.
    for args in (["--gpus", "4", "--strategy", "fsdp", "--emit", "deepspeed"],
                 ["--gpus", "4", "--strategy", "fsdp", "--target-batch", "63"]):
        out = subprocess.run([BINARY] + BASE + args, capture_output=True, text=True)
        assert out.returncode == 2 and not out.stdout, (args, out.returncode, out.stdout)
        assert out.stderr.count("\n") == 1, out.stderr
        print(f"refused {' '.join(args)}: {out.stderr.strip()}")


main()
