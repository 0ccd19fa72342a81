"""The installed package's metadata: the `vllm` extra can only resolve to a vLLM that the pinned TRL supports; the
CPU install takes PyTorch's CPU build and `constraints.txt` pins that build; the test tools of the `dev` extra keep
a test group on one worker."""

import importlib
import subprocess
import sys
import warnings
from importlib.metadata import requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).parent.parent
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
TRL_IMPORT_UTILS = importlib.import_module("trl.import_utils")  # where TRL checks the vLLM version
CANDIDATES = [f"0.{minor}.{patch}" for minor in range(18, 40) for patch in (0, 1, 2)] + ["1.0.0"]


def _extra(package: str, extra: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in requires(package) or []]
    return [r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": extra})]


def _vllm_specifier() -> SpecifierSet:
    """Every constraint on vllm that `pip install "trl-pods[vllm]"` applies, directly or through trl[vllm]."""
    specifier = SpecifierSet()
    for req in _extra("trl-pods", "vllm"):
        if req.name == "vllm":
            specifier &= req.specifier
        elif req.name == "trl" and "vllm" in req.extras:
            assert Version(version("trl")) in req.specifier, "the extra must pull the TRL that is installed"
            specifier &= next(r.specifier for r in _extra("trl", "vllm") if r.name == "vllm")
    return specifier


def _trl_accepts(vllm_version: str, monkeypatch) -> bool:
    installed = lambda name, return_version=False: (True, vllm_version)  # noqa: E731
    monkeypatch.setattr(TRL_IMPORT_UTILS, "_is_package_available", installed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            TRL_IMPORT_UTILS.is_vllm_available()
        except UserWarning:
            return False
    return True


def test_vllm_extra_admits_only_versions_trl_supports(monkeypatch):
    """`pip install ".[vllm]"` once installed the newest vLLM (0.33), which TRL 1.16 warns about and breaks on.
    Every vLLM version the extra admits must pass TRL's own version check, and some version must be admitted."""
    specifier = _vllm_specifier()
    admitted = [v for v in CANDIDATES if v in specifier]
    assert admitted, f"the vllm extra admits no vLLM version: {specifier}"
    rejected_by_trl = [v for v in admitted if not _trl_accepts(v, monkeypatch)]
    assert not rejected_by_trl, f"the vllm extra admits vLLM versions TRL rejects: {rejected_by_trl}"
    assert "0.33.0" not in specifier


@pytest.mark.parametrize("bad", ["0.21.0", "0.32.0"])
def test_trl_version_check_is_what_the_test_reads(monkeypatch, bad):
    """Guard on the guard: TRL's check really rejects versions outside its range, so the test above can fail."""
    assert not _trl_accepts(bad, monkeypatch)
    assert _trl_accepts("0.25.0", monkeypatch)


def test_constraints_pin_the_cpu_build_of_torch():
    """constraints.txt held `torch==2.13.0`, which PyPI's CUDA build satisfies as well, so it pinned nothing on an
    ordinary Linux machine. It must admit the +cpu build (the one installed here) and refuse the plain version that
    PyPI's CUDA wheel carries, and every CPU install command (README, CI, the vLLM build) must take torch from
    PyTorch's CPU index, as PyTorch documents it (macOS, whose PyPI wheel is the CPU build, apart)."""
    lines = [line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    torch_req = next(Requirement(line) for line in lines if line and not line.startswith("#"))
    assert torch_req.name == "torch"
    assert version("torch") in torch_req.specifier and version("torch").endswith("+cpu")
    assert "2.13.0" not in torch_req.specifier and "2.13.0+cu130" not in torch_req.specifier
    for path in ("README.md", ".ci/run", "scripts/build_vllm_cpu_env.sh"):
        lines = (ROOT / path).read_text().splitlines()
        installs = [line for line in lines if "pip install" in line and "torch==" in line and "macOS" not in line]
        assert installs and all(CPU_INDEX in line for line in installs), (path, installs)


GROUPED = """
import os, pytest

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(4))
def test_grouped(i, tmp_path_factory):
    (tmp_path_factory.getbasetemp().parent / f"grouped{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("i", range(4))
def test_free(i):
    pass
"""


def test_the_test_command_keeps_an_xdist_group_on_one_worker(tmp_path):
    """The README's test command runs on 2 xdist workers with ``--dist loadgroup`` (pyproject.toml), and tests that
    share costly runs (a session fixture of multi-process trainings: test_kill_resume, test_multiprocess) are marked
    with one ``xdist_group`` so those runs are made once. Installed pytest 9 with pytest-xdist 3.8, the group was
    silently spread over both workers, each making the runs again (`setup.cfg` pins pytest below 9)."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    command = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"]
    base = tmp_path / "base"
    result = subprocess.run([*command, "--basetemp", str(base), "test_grouped.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:]
    ran = [path.read_text() for path in base.glob("grouped*")]  # each worker's basetemp lies in base
    assert len(ran) == 4 and len(set(ran)) == 1, ran
