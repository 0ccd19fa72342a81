"""Every recipe, and every launch command in a recipe, the README or a docs page, parses and is consistent: the layout
passes PODSConfig for the command's process count, GPUs and tensor-parallel sizes add up, and every GPU recipe
generates with vLLM, sized for its N."""

import re
import shlex
from pathlib import Path

import pytest
import yaml
from trl import ModelConfig, TrlParser
from trl.scripts.vllm_serve import ScriptArguments as ServeArguments
from trl.scripts.vllm_serve import build_command

from trl_pods import PODSConfig
from trl_pods.train import ScriptArguments

ROOT = Path(__file__).parent.parent
RECIPES = ROOT / "recipes"
DOCS = ROOT / "docs"
TRAINING = sorted(RECIPES.glob("*.yaml"))
ACCELERATE = sorted((RECIPES / "accelerate").glob("*.yaml"))
PROMPT_BUDGET = 512  # tokens a vLLM context must leave for the prompt beyond max_completion_length


def launch_commands(text: str) -> list[list[str]]:
    """`accelerate launch` and `trl vllm-serve` commands in a markdown page (code blocks, and code spans in table
    rows) or a recipe header (`#   ` comment lines), with backslash continuations joined, as argument lists (leading
    `VAR=value` assignments kept)."""
    lines = []
    for line in (re.sub(r"^#\s?", "", line).strip() for line in text.splitlines()):
        spans = re.findall(r"`([^`]+)`", line) if line.startswith("|") else []
        lines.extend(spans or [line])
    joined, current = [], ""
    for line in lines:
        current += " " + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            joined.append(current.strip())
            current = ""
    commands = []
    for line in joined:
        if not re.match(r"^([A-Z_]+=\S*\s+)*(accelerate launch|trl vllm-serve)\s", line):
            continue
        words = shlex.split(line, comments=True)
        if _body(words)[:2] in (["accelerate", "launch"], ["trl", "vllm-serve"]):
            commands.append(words)
    return commands


def _body(words: list[str]) -> list[str]:
    """The command without its leading `VAR=value` assignments."""
    first = next(i for i, w in enumerate(words) if not re.fullmatch(r"[A-Z_]+=\S*", w))
    return words[first:]


def _flag(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def _devices(words: list[str]) -> list[int] | None:
    env = dict(w.split("=", 1) for w in words[: len(words) - len(_body(words))])
    return [int(d) for d in env["CUDA_VISIBLE_DEVICES"].split(",")] if "CUDA_VISIBLE_DEVICES" in env else None


def _parse_recipe(words: list[str], tmp_path, monkeypatch, processes: int):
    """The (script, PODS, model) arguments the training command would build on `processes` processes."""
    args = words[words.index("scripts/train_pods.py") + 1 :]
    args[args.index("--config") + 1] = str(ROOT / _flag(args, "--config"))  # relative to the repository root
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: processes))
    parser = TrlParser((ScriptArguments, PODSConfig, ModelConfig))
    overrides = ["--use_cpu", "true", "--bf16", "false", "--output_dir", str(tmp_path)]
    return parser.parse_args_and_config(args=[*args, *overrides])


def _processes(words: list[str]) -> tuple[int, int, int]:
    """(processes, machines, machine rank) of an `accelerate launch` command."""
    accelerate = yaml.safe_load((ROOT / _flag(words, "--config_file")).read_text())
    processes = int(_flag(words, "--num_processes") or accelerate["num_processes"])
    machines = int(_flag(words, "--num_machines") or accelerate["num_machines"])
    return processes, machines, int(_flag(words, "--machine_rank") or 0)


def check_launch(training: list[str], serve: list[str] | None, tmp_path, monkeypatch) -> PODSConfig:
    """Validate one training command (and the vLLM server command launched beside it, if any)."""
    processes, machines, rank = _processes(training)
    assert processes % machines == 0, "accelerate starts the same number of processes on every node"
    devices = _devices(training)
    if devices is not None:
        assert len(devices) == processes // machines, "one visible GPU per training process on each node"
    _, config, model_args = _parse_recipe(training, tmp_path, monkeypatch, processes)  # PODSConfig's layout checks
    assert config.use_vllm, "GPU recipes generate with vLLM"
    kept = config.per_device_train_batch_size * config.steps_per_generation
    assert kept % config.pods_m == 0 and config.generation_batch_size == kept * processes
    if config.vllm_mode == "colocate":
        assert serve is None
        assert processes % config.vllm_tensor_parallel_size == 0, "TRL: tensor-parallel groups must tile the ranks"
        assert 0 < config.vllm_gpu_memory_utilization < 1
        assert config.vllm_max_model_length >= config.max_completion_length + PROMPT_BUDGET
        return config
    assert config.vllm_mode == "server" and serve is not None, "a server-mode recipe says how to start the server"
    script_args, extra = TrlParser(ServeArguments).parse_args_and_config(
        args=_body(serve)[2:], return_remaining_strings=True
    )
    command = build_command(script_args, extra)  # what `trl vllm-serve` runs: vLLM's own server
    assert script_args.model == model_args.model_name_or_path
    assert script_args.max_model_len >= config.max_completion_length + PROMPT_BUDGET
    assert int(_flag(command, "--port")) == config.vllm_server_port
    server_devices = _devices(serve)
    assert len(server_devices) == script_args.tensor_parallel_size * script_args.data_parallel_size
    if rank == 0 and devices is not None:
        assert not set(server_devices) & set(devices), "the server has GPUs of its own"
    rollouts = config.generation_batch_size // config.pods_m * config.pods_n  # one request: every prompt, n = N
    assert int(_flag(command, "--max-num-seqs")) >= rollouts, "the server decodes a whole request in one wave"
    assert int(_flag(command, "--max-num-batched-tokens")) >= int(_flag(command, "--max-num-seqs")), "vLLM's check"
    return config


def _header(recipe: Path) -> str:
    return recipe.read_text().split("\n\n", 1)[0]


def _launches(text: str) -> list[tuple[list[str], list[str] | None]]:
    """Training commands, each with the server command written before it (on the same node), if any."""
    pairs, serve = [], None
    for words in launch_commands(text):
        if "vllm-serve" in words:
            serve = words
        else:
            pairs.append((words, serve))
    return pairs


def test_the_recipe_set_is_complete():
    """The paper's settings each have a PODS recipe and its baseline; a server-mode and a 2-node recipe exist; the
    accelerate configs exist."""
    names = {p.stem for p in TRAINING}
    for setting in ("gsm8k_qwen2.5-3b_lora", "math_qwen2.5-3b_lora", "gsm8k_qwen2.5-3b_full", "gsm8k_qwen2.5-7b_full"):
        assert any(n.startswith(setting) and n.endswith("pods") for n in names), setting
        assert any(n.startswith(setting) and "grpo" in n for n in names), setting
    assert {"gsm8k_qwen2.5-3b_full_pods_server", "gsm8k_qwen2.5-7b_full_pods_2node"} <= names
    assert {p.stem for p in ACCELERATE} == {"single_gpu", "multi_gpu", "zero2", "zero3", "zero3_2node"}


@pytest.mark.parametrize("recipe", TRAINING, ids=lambda p: p.stem)
def test_recipe_launch_commands_are_consistent(recipe, tmp_path, monkeypatch):
    """The recipe's header states how to launch it; each command names this recipe and passes `check_launch`."""
    launches = _launches(_header(recipe))
    assert launches, "the header must state the launch command"
    raw = yaml.safe_load(recipe.read_text())
    for training, serve in launches:
        assert _flag(training, "--config") == f"recipes/{recipe.name}"
        config = check_launch(training, serve, tmp_path, monkeypatch)
        assert (config.pods_n, config.pods_m) == (raw["pods_n"], raw["pods_m"])
        kind = "pods" if "pods" in recipe.stem else "grpo"
        assert (config.pods_n > config.pods_m) == (kind == "pods")


def test_documented_commands_are_valid_launches(tmp_path, monkeypatch):
    """Every `accelerate launch` in the README and the docs pages passes `check_launch` (with its own overrides), and
    every `trl vllm-serve` in them is one written in a recipe header (a page's server command pairs with the training
    commands after it)."""
    headers = [launch_commands(_header(recipe)) for recipe in TRAINING]
    pages = {page.name: _launches(page.read_text()) for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]}
    assert len(pages["README.md"]) >= 1 and sum(len(launches) for launches in pages.values()) >= 9
    for name, launches in pages.items():
        for training, serve in launches:
            check_launch(training, serve, tmp_path / name / str(len(training)), monkeypatch)
            if serve is not None:
                assert any(serve in commands for commands in headers), shlex.join(serve)


_PER_GENERATION = re.compile(
    r"Per generation: (\d+) (?:GPUs|processes) x (\d+) rows x (\d+) steps = (\d+) (?:kept )?rows = (\d+) prompts x "
    r"(\d+)(?:, from (\d+) x (\d+) = (\d+) rollouts)?"
)


@pytest.mark.parametrize("recipe", TRAINING, ids=lambda p: p.stem)
def test_recipe_header_agrees_with_its_yaml(recipe, tmp_path, monkeypatch):
    """The 7B recipes' headers said gradient accumulation 4 and 16 while their YAML set 8 and 32. The numbers a header
    states must be the recipe's: its group sizes (PODS N -> M, GRPO M/M), its gradient accumulation, and its
    per-generation arithmetic (processes x rows x steps = kept rows = prompts x M, from prompts x N rollouts)."""
    header, raw = _header(recipe), yaml.safe_load(recipe.read_text())
    sizes = re.match(r"# (?:PODS (\d+) -> (\d+)|GRPO(?:-GA)? (\d+)/(\d+))", header)
    assert sizes, "the header's first line names the method and its group sizes"
    n, m = (int(v) for v in sizes.groups() if v is not None)
    assert (n, m) == (raw["pods_n"], raw["pods_m"])
    stated = re.search(r"gradient accumulation (\d+)", header.splitlines()[0])
    if stated:
        assert int(stated[1]) == raw["gradient_accumulation_steps"]
    line = _PER_GENERATION.search(" ".join(re.sub(r"^#\s?", "", row) for row in header.splitlines()))
    if line is None:
        assert "Per generation" not in header, "a per-generation line this test cannot read"
        return
    processes, rows, steps, kept, prompts, group, *rollouts = (None if v is None else int(v) for v in line.groups())
    training, _ = _launches(header)[0]
    _, config, _ = _parse_recipe(training, tmp_path, monkeypatch, _processes(training)[0])
    assert (processes, rows, steps) == (
        _processes(training)[0],
        raw["per_device_train_batch_size"],
        config.steps_per_generation,
    )
    assert kept == processes * rows * steps == prompts * group and group == m
    if rollouts[0] is not None:
        assert rollouts == [prompts, n, prompts * n]


@pytest.mark.parametrize("recipe", ACCELERATE, ids=lambda p: p.stem)
def test_accelerate_config_is_complete(recipe):
    """Accelerate configs name a distributed type, a process count and bf16; DeepSpeed ones a ZeRO stage; multi-node
    ones a port and the same number of processes on every machine."""
    config = yaml.safe_load(recipe.read_text())
    assert config["mixed_precision"] == "bf16" and config["num_processes"] >= 1
    if config["distributed_type"] == "DEEPSPEED":
        assert config["deepspeed_config"]["zero_stage"] == int(recipe.stem[len("zero")])
    if config["num_machines"] > 1:
        assert config["num_processes"] % config["num_machines"] == 0
        assert config["main_process_port"] and config["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"
