"""estimate, search and plan: the program's commands, taking its options as keyword arguments.

Each call builds the command line the program would be given and runs it in the engine (the same
C++ code as the ``vrambench`` program), so an answer here is the program's answer: a keyword is
the option of that name (``lora_rank=16`` is ``--lora-rank 16``), a value is what the option takes,
and a mistake raises ValueError with the program's one line.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _engine
from .results import Plan, PlanTable, Table, plan_from_json

__all__ = ["estimate", "search", "plan", "command_line", "run"]

# Options that take no value: True gives the flag, False or None leaves it out.
_FLAGS = {"isolate", "no_execute", "resume"}
# Options the API sets itself.
_RESERVED = {"format", "quiet", "emit", "help", "version"}

ModelLike = Union[str, os.PathLike, Mapping[str, Any], Any]


def run(args: Sequence[str]) -> Tuple[int, str, str]:
    """Runs a command line in the engine with its output kept: (exit code, stdout, stderr). A
    mistake raises ValueError with the program's line; ``vrambench.main`` prints as the program."""
    return _engine.run([str(a) for a in args])


def _text(value: Any, join: str = ",") -> str:
    """A keyword's value as the option's text: lists joined with commas (inside a sweep's list of
    values, with '+', as the program joins LoRA targets there), numbers as written."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple, set, frozenset, range)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        return join.join(_text(v, "+") for v in items)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _sweep_args(sweep: Any) -> List[str]:
    """``sweep``: {"seq": "512..8192", "dtype": ["fp16", "bf16"]}, or the program's axes as text
    ("seq=512..8192", or a list of them)."""
    if sweep is None:
        return []
    if isinstance(sweep, str):
        sweep = [sweep]
    axes = (
        [f"{field.replace('_', '-')}={_text(values)}" for field, values in sweep.items()]
        if isinstance(sweep, Mapping)
        else [str(axis) for axis in sweep]
    )
    args: List[str] = []
    for axis in axes:
        args += ["--sweep", axis]
    return args


class _ModelFiles:
    """The config.json files a model given as a dict or a transformers config is written to, for
    --model; removed when the command is done."""

    def __init__(self) -> None:
        self._dir: Optional[tempfile.TemporaryDirectory] = None
        self.names: Dict[str, str] = {}  # the path written: the model's name

    def write(self, config: Mapping[str, Any]) -> str:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="vrambench-model-")
        # The program names a model after _name_or_path, else its folder.
        name = str(config.get("_name_or_path") or config.get("model_type") or "model")
        folder = Path(self._dir.name) / f"{len(self.names)}" / _safe(name)
        folder.mkdir(parents=True)
        path = str(folder / "config.json")
        Path(path).write_text(json.dumps(dict(config), default=_json_default))
        self.names[path] = name
        return path

    def close(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(name.rstrip("/"))) or "model"


def _json_default(value: Any) -> Any:
    # torch dtypes and other values a config holds that JSON has no word for.
    text = str(value)
    return text[len("torch.") :] if text.startswith("torch.") else text


def config_dict(model: Any) -> Optional[Dict[str, Any]]:
    """The config.json of a transformers config, or of a model holding one (``model.config``);
    None for anything else."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict") and not hasattr(model, "to_dict"):
        model = config
    if hasattr(model, "to_dict") and hasattr(model, "model_type"):
        d = dict(model.to_dict())
        d.setdefault("model_type", model.model_type)
        return d
    return None


def _model_args(model: ModelLike, files: _ModelFiles) -> List[str]:
    """--preset NAME or --model PATH for a preset's name, a config.json (or the folder holding
    one), a dict of config.json's fields, a transformers config, or a model holding one."""
    if model is None:
        return []
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if os.path.exists(text) or text.endswith(".json") or os.sep in text:
            return ["--model", text]
        return ["--preset", text]
    if isinstance(model, Mapping):
        return ["--model", files.write(model)]
    config = config_dict(model)
    if config is not None:
        return ["--model", files.write(config)]
    raise ValueError(
        f"model: expected a preset name, a config.json path, a dict or a transformers config, "
        f"got {type(model).__name__}"
    )


def lora_options(peft_config: Any) -> Dict[str, Any]:
    """The LoRA options of a PEFT ``LoraConfig`` (or a dict of its fields): rank, alpha, dropout,
    target modules and, for a mixture of experts, target parameters. What the model does not hold (DoRA, modules_to_save, a subset of layers,
    per-module ranks) is refused rather than planned without."""
    if peft_config is None:
        return {}
    get = (
        peft_config.get
        if isinstance(peft_config, Mapping)
        else lambda key, default=None: getattr(peft_config, key, default)
    )
    peft_type = get("peft_type")
    if peft_type is not None and str(getattr(peft_type, "value", peft_type)).upper() != "LORA":
        raise ValueError(f"peft_config: a {peft_type} adapter; vrambench models LoRA")
    for key, what in (
        ("use_dora", "DoRA"),
        ("modules_to_save", "modules_to_save (whole modules trained beside the adapters)"),
        ("layers_to_transform", "layers_to_transform (adapters on some layers only)"),
        ("rank_pattern", "rank_pattern (per-module ranks)"),
    ):
        if get(key):
            raise ValueError(f"peft_config: {what} is not modelled; plan without it")
    targets = get("target_modules")
    # target_parameters: a mixture of experts' 3-D expert weights, by the names PEFT matches at
    # the end of a parameter's ("experts.gate_up_proj", "mlp.experts.down_proj").
    parameters = []
    for name in get("target_parameters") or []:
        short = next((p for p in ("experts.gate_up_proj", "experts.down_proj") if name.endswith(p)),
                     None)
        if short is None:
            raise ValueError(f"peft_config: target_parameters {name!r} is not modelled; the "
                             "experts' experts.gate_up_proj and experts.down_proj are")
        parameters.append(short)
    if targets is None and not parameters:
        target_text = "peft-default"
    elif isinstance(targets, str) and not parameters:
        target_text = targets  # "all-linear", or a module name
    elif isinstance(targets, str) and targets != "all-linear" or targets is None:
        target_text = _text(([targets] if targets else []) + parameters)
    elif isinstance(targets, str):
        raise ValueError("peft_config: target_modules 'all-linear' with target_parameters: name "
                         "the modules (q_proj, ...) to plan both")
    else:
        modules = sorted(targets) if isinstance(targets, (set, frozenset)) else list(targets)
        target_text = _text(modules + parameters)
    options = {"lora_rank": get("r"), "lora_alpha": get("lora_alpha"), "lora_targets": target_text}
    if get("lora_dropout") is not None:
        options["lora_dropout"] = get("lora_dropout")
    return {k: v for k, v in options.items() if v is not None}


def quant_options(bnb_config: Any) -> Dict[str, Any]:
    """--quant and --double-quant of a transformers ``BitsAndBytesConfig`` (or a dict of its
    fields): nf4 or fp4 with or without double quantisation, or int8."""
    if bnb_config is None:
        return {}
    get = (
        bnb_config.get
        if isinstance(bnb_config, Mapping)
        else lambda key, default=None: getattr(bnb_config, key, default)
    )
    if get("load_in_4bit"):
        return {
            "quant": str(get("bnb_4bit_quant_type") or "fp4"),
            "double_quant": bool(get("bnb_4bit_use_double_quant")),
        }
    if get("load_in_8bit"):
        return {"quant": "int8"}
    return {}


def _recipe_options(peft_config: Any, bnb_config: Any, options: Dict[str, Any]) -> Dict[str, Any]:
    """The options a LoraConfig and a BitsAndBytesConfig stand for, merged with those given by
    name; the same option from both is refused."""
    derived = dict(quant_options(bnb_config))
    lora = lora_options(peft_config)
    if lora:
        derived.update(lora)
        four_bit = derived.get("quant") in ("nf4", "fp4")
        derived["finetune"] = "qlora" if four_bit else "lora"
    for key in derived:
        if key in options and options[key] is not None:
            raise ValueError(
                f"{key}: given both by name and by "
                f"{'bnb_config' if key in ('quant', 'double_quant') else 'peft_config'}; give one"
            )
    return {**derived, **options}


def command_line(
    command: str,
    model: ModelLike = None,
    *,
    sweep: Any = None,
    peft_config: Any = None,
    bnb_config: Any = None,
    _files: Optional[_ModelFiles] = None,
    **options: Any,
) -> List[str]:
    """The program's command line for a call: ``command_line("plan", "gpt2", vram="24GiB")`` is
    ``["plan", "--preset", "gpt2", "--vram", "24GiB"]``. A model given as a dict or a config is
    written to a config.json that lives as long as ``_files``."""
    files = _files if _files is not None else _ModelFiles()
    args = [command] + _model_args(model, files)
    for key, value in _recipe_options(peft_config, bnb_config, options).items():
        if value is None:
            continue
        name = key.replace("_", "-")
        if key in _RESERVED:
            raise ValueError(f"{key}: set by the API itself; run vrambench.main for the program")
        if key in _FLAGS:
            if value:
                args.append(f"--{name}")
            continue
        args += [f"--{name}", _text(value)]
    return args + _sweep_args(sweep)


def estimate(
    model: ModelLike = None,
    *,
    sweep: Any = None,
    peft_config: Any = None,
    bnb_config: Any = None,
    out: Optional[Union[str, os.PathLike]] = None,
    name: Optional[str] = None,
    **options: Any,
) -> Table:
    """``vrambench estimate``: the model read off the step program, per configuration (no search).

    ``estimate("llama2-7b", seq=4096, batch=1)`` gives the peak at batch 1; without a batch, the
    largest that fits (``vram="24GiB"`` or ``device="sim:rtx4090"``). Returns a ``Table``; with
    ``out`` the CSV and JSON stay there as the program writes them.
    """
    return _table("estimate", model, sweep, peft_config, bnb_config, out, name, options)


def search(
    model: ModelLike = None,
    *,
    sweep: Any = None,
    peft_config: Any = None,
    bnb_config: Any = None,
    out: Optional[Union[str, os.PathLike]] = None,
    name: Optional[str] = None,
    **options: Any,
) -> Table:
    """``vrambench search``: the largest batch per configuration, binary-searched on the device
    (``over="seq"``: the longest sequence at ``batch``). Returns a ``Table``. Rows that failed are
    rows (their ``note`` says why), as in the program's file."""
    return _table("search", model, sweep, peft_config, bnb_config, out, name, options)


def _table(command, model, sweep, peft_config, bnb_config, out, name, options) -> Table:
    files = _ModelFiles()
    try:
        args = command_line(
            command, model, sweep=sweep, peft_config=peft_config, bnb_config=bnb_config,
            _files=files, **options,
        )
        with tempfile.TemporaryDirectory(prefix="vrambench-") as scratch:
            folder = os.fspath(out) if out is not None else scratch
            base = name or "result"
            formats = "md,csv,json" if out is not None else "md,json"
            args += ["--out", folder, "--name", base, "--format", formats, "--quiet"]
            code, stdout, stderr = run(args)
            path = Path(folder) / f"{base}.json"
            if not path.exists():
                raise RuntimeError(f"vrambench {command} wrote no {path} (exit {code}): {stderr}")
            result = json.loads(path.read_text())
    finally:
        files.close()
    _log(stderr)
    if code != 0:
        # Rows that failed are rows; the program's line says how many.
        warnings.warn(stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {code}")
    kind = "search-seq" if command == "search" and options.get("over") == "seq" else command
    return Table.from_json(kind, result, _printed(stdout))


def plan(
    model: ModelLike = None,
    *,
    sweep: Any = None,
    peft_config: Any = None,
    bnb_config: Any = None,
    **options: Any,
) -> Union[Plan, PlanTable]:
    """``vrambench plan``: trainer settings for a capacity.

    ``plan("mistral-7b", finetune="qlora", recompute="full", vram="24GiB", seq=2048,
    target_batch=16)`` gives the micro-batch and gradient accumulation for an effective batch of 16
    within 24 GiB less the safety margin (``safety_margin``, default 1 GiB), the longest sequence
    at micro-batch 1 and the budget. ``vram="auto"`` plans for this GPU's free memory, ``seq="max"`` at the longest sequence.
    A sweep gives a ``PlanTable``. ``Plan.text()``, ``.hf()`` and ``.axolotl()`` print the same
    plan as ``--emit text|hf|axolotl`` do.
    """
    call = dict(model=model, sweep=sweep, peft_config=peft_config, bnb_config=bnb_config, **options)
    text, names = _run_plan(call, "json")
    result = json.loads(text)
    # A config.json written for this call is gone once it returns: its plan names the model.
    for one in result.get("plans", [result]):
        one["config"]["model"] = names.get(one["config"]["model"], one["config"]["model"])
    plans = plan_from_json(result)
    if isinstance(plans, Plan):
        object.__setattr__(plans, "_emit", lambda form: _run_plan(call, form)[0])
    return plans


def _run_plan(call: Dict[str, Any], form: str) -> Tuple[str, Dict[str, str]]:
    """stdout of `vrambench plan` for the keyword arguments of a call, with --emit `form`, and the
    names of the models written to a config.json for it."""
    files = _ModelFiles()
    try:
        args = command_line("plan", _files=files, **call)
        code, stdout, stderr = run(args + ["--emit", form, "--quiet"])
    finally:
        files.close()
    if code != 0:
        raise RuntimeError(f"vrambench plan failed (exit {code}): {stderr.strip()}")
    _log(stderr)
    return stdout, files.names


def _printed(stdout: str) -> str:
    """What the program printed, less the names of the files it wrote (temporary here)."""
    return "".join(line for line in stdout.splitlines(True) if not line.startswith("wrote "))


def _log(stderr: str) -> None:
    """The program's notes (a device fallback, rows that failed) go to the ``vrambench`` logger."""
    import logging

    for line in stderr.splitlines():
        if line.strip():
            logging.getLogger("vrambench").info("%s", line)
