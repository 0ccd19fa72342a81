"""The command line answered before the heavy imports (`trl_pods.flags`): a run saves its parser's manifest, and the
next run's mistake is one `error:` line with none of torch, transformers or TRL imported, the line the full parser
gives; the manifest is the parser's own (JSON holds it whole, every dataclass field is in it), used only on the
installation that wrote it; every recipe passes the check; a flag's value is read as transformers reads it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trl.scripts._hf_argparser import string_to_bool

from trl_pods import demo, evaluate, flags, train
from trl_pods.train import ScriptArguments, parser

ROOT = Path(__file__).parent.parent
COMMANDS = {"train": train.main, "eval": evaluate.main, "demo": demo.main}
PROBE = """
import sys
from trl_pods.cli import main
try:
    main(sys.argv[1:])
finally:
    heavy = sorted(name for name in ("torch", "transformers", "trl", "datasets") if name in sys.modules)
    print("imported:", heavy, file=sys.stderr)
"""


def _trl_pods(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """`trl-pods ARGV` in a fresh process (`PROBE`: it also says which heavy packages it imported)."""
    env = {**os.environ, "TRL_PODS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "--pods_nn", "3"],
            "unknown flags (--help-all lists all): ['--pods_nn', '3'] (did you mean --pods_n?)",
        ),
        (["train", "--pods_n", "three"], "argument --pods_n/--pods-n: invalid int value: 'three'"),
        (["train", "--config", "missing.yaml"], "--config missing.yaml: no such file."),
        (["eval", "--task", "gsm9k", "--model_name_or_path", "m"], "Unknown task 'gsm9k' (did you mean 'gsm8k'?)"),
        (["demo", "--max_stepz", "3"], "unrecognized arguments: --max_stepz 3 (did you mean --max_steps?)"),
    ],
    ids=["unknown flag", "bad int", "missing config", "eval task", "demo flag"],
)
def test_a_mistake_is_answered_before_the_heavy_imports(argv, message, tmp_path, monkeypatch, capsys):
    """Each refused flag took 12-28 s on two busy cores (TRL and transformers were imported before the command line
    was checked; a mistyped command answered in 4). A run of a command (here the full parser, in this process) saves
    its parser's manifest; the next `trl-pods` process checks its command line against it first: the same one
    `error:` line, exit status 2, and none of torch, transformers, TRL or datasets imported (measured: 0.07 s against
    4.2 s on an idle core)."""
    monkeypatch.setenv("TRL_PODS_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[argv[0]](argv[1:])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line, line
    answered = _trl_pods(tmp_path, *argv)
    assert answered.returncode == 2 and answered.stderr.strip().splitlines() == [line, "imported: []"], answered.stderr


def test_the_manifest_is_the_parsers_own_and_json_holds_it_whole():
    """The manifest is written from the parser the dataclasses build, not declared a second time: every field of the
    script, PODS and model arguments is a flag of it, with the type, arity and choices argparse has, and a JSON
    round trip (the cache) changes nothing."""
    command = parser()
    manifest = command.manifest
    assert json.loads(json.dumps(manifest)) == manifest
    by_dest = {flag["dest"]: flag for flag in manifest["flags"] if flag["kind"] == "store"}
    for dataclass in command.dataclass_types:
        missing = [field for field in dataclass.__dataclass_fields__ if field not in by_dest]
        assert not missing, (dataclass.__name__, missing)
    assert (by_dest["pods_n"]["type"], by_dest["use_peft"]["type"], by_dest["pods_down_sampler"]["type"]) == (
        "int", "bool", "str")  # fmt: skip
    assert by_dest["prompt_style"]["choices"] == ["think", "plain"] and by_dest["reward_funcs"]["nargs"] == "+"
    assert by_dest["lr_scheduler_type"]["type"] == "choice" and "cosine" in by_dest["lr_scheduler_type"]["choices"]
    assert by_dest["task"]["default"] == ScriptArguments.task
    assert "max_variance" in manifest["names"]["pods_down_sampler"] and "tensorboard" in manifest["names"]["report_to"]


def test_a_manifest_of_another_installation_is_not_used(tmp_path, monkeypatch, capsys):
    """A manifest is keyed by the trl_pods sources and the versions of trl and transformers: after an upgrade or an
    edit, a flag the new parser has could be missing from the old manifest, so the old one is never read and the
    command line goes to the full parser unchecked."""
    monkeypatch.setenv("TRL_PODS_CACHE", str(tmp_path))
    flags.save(parser().manifest)
    with pytest.raises(SystemExit):
        flags.precheck("train", ["--pods_nn", "3"])
    assert "did you mean --pods_n?" in capsys.readouterr().err
    monkeypatch.setattr(flags, "manifest_key", lambda: "another-installation")
    assert flags.load("train") is None and flags.precheck("train", ["--pods_nn", "3"]) == ["--pods_nn", "3"]


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda path: path.stem)
def test_every_recipe_passes_the_check(recipe, tmp_path):
    """The check before the heavy imports refuses nothing the full parser takes: every recipe passes it, as the
    README's launch commands give it."""
    argv = ["--config", str(recipe), "--output_dir", str(tmp_path / "run")]
    assert flags.check(json.loads(json.dumps(parser().manifest)), argv)[0] == argv


@pytest.mark.parametrize("value", ["true", "False", "YES", "n", "1", "0", "maybe", ""])
def test_a_bool_is_read_as_transformers_reads_it(value):
    """`--use_peft VALUE` is read by TRL's `string_to_bool`, which the check cannot import: its copy gives the
    same value, or the same error."""

    def read(convert):
        try:
            return convert(value)
        except Exception as error:  # noqa: BLE001 (the error is the result compared)
            return type(error).__name__, str(error)

    assert read(flags._string_to_bool) == read(string_to_bool)
