"""What a command needs from the Hugging Face Hub, checked before anything loads.

A model or dataset named by the Hub (not a local folder or file) loads from the local cache, or else downloads.
Offline (``HF_HUB_OFFLINE=1``) or without a network, transformers and datasets found out only after 30-80 s of
retries and ended in a 40-80 line traceback. `check_on_hub` says it in one line at once: a name that is not in the
cache while the Hub is offline or unreachable (one request through huggingface_hub's own client, so that its proxy
and certificate settings apply; a few seconds at most) is a user error naming the flag and what to give instead.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import HTTPError, LocalEntryNotFoundError
from huggingface_hub.utils import get_session

__all__ = ["check_on_hub", "hub_reachable", "in_cache"]

REACH_TIMEOUT_S = 5.0
"""How long `hub_reachable` waits for the Hub to answer."""


def in_cache(name: str, repo_type: str, revision: str | None = None) -> bool:
    """Whether the Hub ``repo_type`` (``"model"``, ``"dataset"``) ``name`` is in the local cache: the Hub's (a
    snapshot of ``revision``), or for a dataset also the one `datasets` builds, from which it loads offline."""
    try:
        snapshot_download(name, repo_type=repo_type, revision=revision, local_files_only=True)
        return True
    except LocalEntryNotFoundError:
        pass
    if repo_type != "dataset":
        return False
    from datasets import config

    return (Path(config.HF_DATASETS_CACHE) / name.replace("/", "___")).is_dir()


def hub_reachable(timeout: float = REACH_TIMEOUT_S) -> bool:
    """Whether the Hub (``HF_ENDPOINT``) answers an HTTP request within ``timeout`` seconds (any status counts), asked
    through huggingface_hub's client (`huggingface_hub.set_client_factory`: a proxy, certificates), as a download
    would be."""
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except (HTTPError, OSError, ValueError):  # HTTPError: the client's transport errors (no status raises)
        return False
    return True


def check_on_hub(flag: str, name: str, repo_type: str, instead: str, revision: str | None = None) -> None:
    """Raise ValueError when the Hub ``repo_type`` ``name`` (given by ``--flag``) is not in the cache and cannot be
    downloaded: the Hub is offline (``HF_HUB_OFFLINE``) or unreachable. ``instead``: what to give in its place."""
    if in_cache(name, repo_type, revision):
        return
    kind = "model" if repo_type == "model" else "dataset"
    if constants.is_offline_mode():
        why = "the Hub is offline here (HF_HUB_OFFLINE=1)"
    elif not hub_reachable():
        why = f"{constants.ENDPOINT} cannot be reached"
    else:
        return
    raise ValueError(f"{flag} needs the Hub {kind} {name}, which is not in the local cache, and {why}: {instead}.")
