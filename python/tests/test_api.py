"""vrambench.estimate, search and plan against the program's JSON for the same options, their
mistakes against the program's lines, and the package's `vrambench` command against the program."""

import dataclasses
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import vrambench
from vrambench.results import Plan, _from_json

from program import REPO, program_error, program_json, run_program

QLORA = dict(model="llama3.2-1b", finetune="qlora", vram="24GiB", seq=2048, target_batch=16)
QLORA_FLAGS = ["--preset", "llama3.2-1b", "--finetune", "qlora", "--vram", "24GiB", "--seq", "2048",
               "--target-batch", "16"]


def written_json(tmp_path: Path, *args: str) -> dict:
    ran = run_program(*args, "--out", str(tmp_path), "--name", "cli", "--format", "json", "--quiet")
    assert ran.code == 0, ran.err
    return json.loads((tmp_path / "cli.json").read_text())


def rows_as_json(table) -> list:
    return [
        {c.key: getattr(row, c.key.replace("-", "_")) for c in table.columns} for row in table.rows
    ]


def test_the_version_is_the_programs_and_the_projects():
    cmake = (REPO / "CMakeLists.txt").read_text()
    assert re.search(r"project\(vrambench VERSION ([0-9.]+)", cmake).group(1) == vrambench.__version__
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^version = "([0-9.]+)"', pyproject, re.M).group(1) == vrambench.__version__
    assert run_program("--version").out.split()[1] == vrambench.__version__


def test_plan_is_the_programs_json_field_for_field():
    plan = vrambench.plan(**QLORA)
    expected = program_json("plan", *QLORA_FLAGS, "--emit", "json")
    assert plan == _from_json(Plan, expected)
    # The settings a trainer takes, and the budget, by name.
    assert plan.micro_batch == expected["plan"]["micro_batch"] > 0
    assert plan.grad_accum == expected["plan"]["grad_accum"]
    assert plan.micro_batch * plan.grad_accum == 16 == plan.effective_batch
    assert plan.max_seq == expected["longest_seq"]["max_seq"]
    assert plan.budget["activations"] > 0
    assert sum(line.share_of_capacity for line in plan.budget.lines if line.on_device) == pytest.approx(1.0)
    assert str(plan).splitlines()[-1] == expected["summary"]


def test_plan_prints_as_the_program_does_in_every_form():
    plan = vrambench.plan(**QLORA)
    for form, text in (("text", plan.text()), ("hf", plan.hf()), ("axolotl", plan.axolotl())):
        ran = run_program("plan", *QLORA_FLAGS, "--emit", form)
        assert ran.code == 0, ran.err
        assert text == ran.out, form


def test_a_multi_gpu_plan_keeps_the_global_batch_and_prints_the_engines_configs():
    flags = ["--preset", "llama3.2-1b", "--device", "sim:h100-80gb", "--seq", "1024", "--gpus", "4",
             "--strategy", "zero3", "--target-batch", "32"]
    plan = vrambench.plan("llama3.2-1b", device="sim:h100-80gb", seq=1024, gpus=4,
                          strategy="zero3", target_batch=32)
    assert plan.micro_batch * plan.grad_accum * 4 == 32
    for form, text in (("accelerate", plan.accelerate()), ("deepspeed", plan.deepspeed())):
        ran = run_program("plan", *flags, "--emit", form)
        assert ran.code == 0, ran.err
        assert text == ran.out, form
    assert "distributed_type: DEEPSPEED" in plan.accelerate()
    assert json.loads(plan.deepspeed())["train_batch_size"] == 32


def test_the_strategy_is_a_keyword_as_on_the_command_line():
    table = vrambench.estimate("llama3-8b", gpus=8, strategy="zero3", batch=1, seq=2048)
    row = table[0]
    assert row.gpus == 8 and row.strategy == "zero3"
    assert row.deepspeed_count_bytes == pytest.approx(row.deepspeed_estimate_bytes, rel=0.01)


def test_a_plans_fields_are_the_jsons():
    # Every key of the JSON is a field, and no field is missing one (nested objects too).
    expected = program_json("plan", *QLORA_FLAGS, "--emit", "json")
    fields = {f.name for f in dataclasses.fields(Plan) if f.init}
    assert fields == set(expected)


def test_a_swept_plan_is_a_table_of_plans():
    plans = vrambench.plan("gpt2", vram="24GiB", target_batch=8, sweep={"seq": [512, 1024]})
    expected = program_json("plan", "--preset", "gpt2", "--vram", "24GiB", "--target-batch", "8",
                            "--sweep", "seq=512,1024", "--emit", "json")
    assert [p == _from_json(Plan, e) for p, e in zip(plans, expected["plans"])] == [True, True]
    assert plans.varying == ("seq",)
    pandas = pytest.importorskip("pandas")
    frame = plans.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["seq"]) == [512, 1024]
    assert list(frame["micro_batch"]) == [p.micro_batch for p in plans]


def test_estimate_rows_are_the_programs_rows(tmp_path):
    table = vrambench.estimate("llama2-7b", dtype="bf16", vram="80GiB", sweep={"seq": "512..2048"})
    expected = written_json(tmp_path, "estimate", "--preset", "llama2-7b", "--dtype", "bf16",
                            "--vram", "80GiB", "--sweep", "seq=512..2048")
    assert [dataclasses.asdict(c) for c in table.columns] == expected["columns"]
    assert rows_as_json(table) == expected["rows"]
    assert table.summary["summary"] == expected["summary"]["summary"]
    assert len(table) == 3 and [r.seq for r in table] == [512, 1024, 2048]
    assert type(table[0]).__name__ == "EstimateRow"
    assert isinstance(table[0].est_max_batch, int)
    assert table.summary["summary"] in str(table)
    assert "wrote" not in str(table)


def test_search_rows_are_the_programs_rows(tmp_path):
    table = vrambench.search(
        "gpt2", device="sim:rtx4090", sweep=["seq=512,1024", "dtype=fp16,bf16"]
    )
    expected = written_json(tmp_path, "search", "--preset", "gpt2", "--device", "sim:rtx4090",
                            "--sweep", "seq=512,1024", "--sweep", "dtype=fp16,bf16")
    assert rows_as_json(table) == expected["rows"]
    assert table.summary["details"] == expected["summary"]["details"]
    assert table.provenance["device"] == expected["provenance"]["device"]
    assert {r.dtype for r in table} == {"fp16", "bf16"}


def test_search_over_the_sequence(tmp_path):
    table = vrambench.search("gpt2", device="sim:rtx4090", over="seq", sweep={"recompute": ["none", "full"]})
    expected = written_json(tmp_path, "search", "--preset", "gpt2", "--device", "sim:rtx4090",
                            "--over", "seq", "--sweep", "recompute=none,full")
    assert rows_as_json(table) == expected["rows"]
    assert type(table[0]).__name__ == "SearchSeqRow"


def test_a_swept_option_with_a_dash_is_a_field_with_an_underscore():
    table = vrambench.estimate("llama3.2-1b", finetune="lora", vram="24GiB",
                               sweep={"lora_rank": [8, 16]})
    assert [r.lora_rank for r in table] == [8, 16]
    pandas = pytest.importorskip("pandas")
    frame = table.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    # The DataFrame's columns are the JSON's (and the CSV's) keys.
    assert list(frame.columns) == [c.key for c in table.columns]
    assert list(frame["lora-rank"]) == [8, 16]


def test_out_keeps_the_files_the_program_writes(tmp_path):
    table = vrambench.estimate("gpt2", vram="24GiB", out=tmp_path, name="kept")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.csv", "kept.json"]
    assert json.loads((tmp_path / "kept.json").read_text())["rows"] == rows_as_json(table)


LLAMA = {
    "model_type": "llama",
    "_name_or_path": "tiny-llama-test",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}


def test_a_model_as_a_dict_is_the_model_as_a_config_json(tmp_path):
    (tmp_path / "tiny").mkdir()
    path = tmp_path / "tiny" / "config.json"
    path.write_text(json.dumps(LLAMA))
    from_dict = vrambench.plan(LLAMA, vram="8GiB", target_batch=8, seq=512)
    from_path = vrambench.plan(str(path), vram="8GiB", target_batch=8, seq=512)
    assert from_dict.recipe == from_path.recipe
    assert from_dict.recipe.startswith("tiny-llama-test")
    assert from_dict.plan == from_path.plan and from_dict.budget == from_path.budget
    # The folder of a checkpoint, and a config object (what transformers' configs answer to).
    assert vrambench.plan(tmp_path / "tiny", vram="8GiB", target_batch=8, seq=512).plan == from_dict.plan
    config = SimpleNamespace(model_type="llama", to_dict=lambda: dict(LLAMA))
    assert vrambench.plan(config, vram="8GiB", target_batch=8, seq=512).plan == from_dict.plan
    assert vrambench.plan(SimpleNamespace(config=config), vram="8GiB", target_batch=8, seq=512).plan == from_dict.plan
    # A model given as a dict prints again in another form.
    assert from_dict.text().startswith("Plan for tiny-llama-test")


def test_lora_and_quantisation_configs_are_the_options_they_stand_for():
    lora = SimpleNamespace(r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
    bnb = SimpleNamespace(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=False)
    args = vrambench.command_line("plan", "llama3.2-1b", peft_config=lora, bnb_config=bnb)
    assert args[:3] == ["plan", "--preset", "llama3.2-1b"]
    flags = dict(zip(args[3::2], args[4::2]))
    assert flags == {
        "--quant": "nf4",
        "--double-quant": "off",
        "--lora-rank": "8",
        "--lora-alpha": "16",
        "--lora-targets": "q_proj,v_proj",
        "--lora-dropout": "0.05",
        "--finetune": "qlora",
    }
    by_config = vrambench.plan("llama3.2-1b", peft_config=lora, bnb_config=bnb, vram="12GiB", seq=1024, target_batch=8)
    by_name = vrambench.plan("llama3.2-1b", finetune="qlora", quant="nf4", double_quant="off", lora_rank=8,
                             lora_alpha=16, lora_dropout=0.05, lora_targets="q_proj,v_proj",
                             vram="12GiB", seq=1024, target_batch=8)
    assert by_config == by_name
    # PEFT's own default targets, all-linear, an 8-bit base; dicts as well as objects.
    assert "peft-default" in vrambench.command_line("plan", peft_config={"r": 4, "target_modules": None})
    eight = vrambench.command_line("plan", peft_config={"r": 4, "target_modules": "all-linear"},
                                   bnb_config={"load_in_8bit": True})
    assert eight[eight.index("--quant") + 1] == "int8" and eight[eight.index("--finetune") + 1] == "lora"
    # A mixture of experts' expert weights (PEFT's target_parameters) join the modules.
    moe = vrambench.command_line("plan", "olmoe-1b-7b", peft_config={
        "r": 8, "target_modules": ["q_proj"], "target_parameters": ["mlp.experts.gate_up_proj"]})
    assert moe[moe.index("--lora-targets") + 1] == "q_proj,experts.gate_up_proj"
    with pytest.raises(ValueError, match="all-linear"):
        vrambench.command_line("plan", peft_config={"r": 8, "target_modules": "all-linear",
                                                    "target_parameters": ["experts.down_proj"]})
    with pytest.raises(ValueError, match="router.weight"):
        vrambench.command_line("plan", peft_config={"r": 8, "target_parameters": ["router.weight"]})
    # Inside a sweep, a value that is a list is joined with '+', as the program reads it there.
    swept = vrambench.command_line("estimate", sweep={"lora_targets": [["q_proj", "v_proj"], "all-linear"]})
    assert swept[-2:] == ["--sweep", "lora-targets=q_proj+v_proj,all-linear"]


def test_what_the_model_does_not_hold_is_refused():
    with pytest.raises(ValueError, match="DoRA"):
        vrambench.command_line("plan", peft_config={"r": 8, "use_dora": True})
    with pytest.raises(ValueError, match="modules_to_save"):
        vrambench.command_line("plan", peft_config={"r": 8, "modules_to_save": ["lm_head"]})
    with pytest.raises(ValueError, match="given both"):
        vrambench.command_line("plan", peft_config={"r": 8}, lora_rank=16)


@pytest.mark.parametrize(
    "call, flags",
    [
        # A mistake of the engine's (core's validate), of the plan's request, of CLI11's validators.
        (dict(model="gpt2", heads=5), ["plan", "--preset", "gpt2", "--heads", "5"]),
        (dict(model="gpt2", batch=4), ["plan", "--preset", "gpt2", "--batch", "4"]),
        (dict(model="gpt2", seq="long"), ["plan", "--preset", "gpt2", "--seq", "long"]),
        (dict(model="no-such-model"), ["plan", "--preset", "no-such-model"]),
        (dict(model="gpt2", optimizer="adafactor"), ["plan", "--preset", "gpt2", "--optimizer", "adafactor"]),
    ],
)
def test_a_mistake_is_a_value_error_with_the_programs_line(call, flags):
    with pytest.raises(ValueError) as raised:
        vrambench.plan(**call)
    assert str(raised.value) == program_error(*flags)


def test_vram_auto_without_a_gpu_is_the_programs_line():
    ran = run_program("devices")
    if not ran.out.startswith("No GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError) as raised:
        vrambench.plan("gpt2", vram="auto")
    assert str(raised.value) == program_error("plan", "--preset", "gpt2", "--vram", "auto")


def test_a_mistake_in_estimate_and_search_too():
    with pytest.raises(ValueError, match="--over seq"):
        vrambench.search("gpt2", over="seq", seq=1024)
    with pytest.raises(ValueError, match="sweep"):
        vrambench.estimate("gpt2", sweep="seq=1..")


def package_command(*args: str):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "vrambench", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["presets"],
        ["devices"],
        ["--help"],
        ["plan", "--help"],
        ["--version"],
        ["plan", *QLORA_FLAGS],
        ["plan", "--preset", "gpt2", "--emit", "yaml"],
        ["plan", "--preset", "gpt2", "--no-such-option"],
        ["estimate", "--preset", "gpt2", "--heads", "5"],
        ["program", "--preset", "tiny", "--batch", "2", "--seq", "64"],
        ["compare", "no-such.csv", "other.csv"],
    ],
)
def test_the_package_command_is_the_program(args):
    ran = run_program(*args)
    assert package_command(*args) == (ran.code, ran.out, ran.err)


def test_the_package_command_runs_the_headline_sweep(tmp_path):
    args = ["--sweep", "seq=512..8192", "--device", "sim:h100-80gb", "--out", str(tmp_path), "--name", "seq"]
    code, out, err = package_command(*args)
    assert code == 0, err
    ran = run_program(*args[:-1], "seq-program")
    # The same table; the summary line's seconds differ.
    assert out.split("\n\n")[0] == ran.out.split("\n\n")[0]
    assert len([l for l in out.splitlines() if l.startswith("| ")]) == 2 + 5
    assert json.loads((tmp_path / "seq.json").read_text())["rows"] == json.loads(
        (tmp_path / "seq-program.json").read_text())["rows"]


def test_main_returns_the_exit_code(capfd):
    assert vrambench.main(["plan", "--preset", "gpt2", "--emit", "yaml"]) == 2
    assert "vrambench: error: " in capfd.readouterr().err
    assert vrambench.main(["presets"]) == 0
    assert "llama2-7b" in capfd.readouterr().out
