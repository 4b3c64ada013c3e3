"""Models named by a Hugging Face repo id (model.path: org/name, model.revision), resolved
through huggingface_hub's own cache, so a team's hub cache and offline mode
(HF_HUB_OFFLINE=1, HF_HUB_CACHE) work as they do for vLLM and transformers. The repo id is
data handed to huggingface_hub, never joined into a path by the workbench.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from workbench.mechanisms.errors import InputError

__all__ = ["HubModel", "resolve_hub_model"]


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str  # as asked: a branch, tag or commit
    commit: str    # what it resolved to: the snapshot's commit hash
    path: Path


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=8)
def resolve_hub_model(repo_id: str, revision: str | None) -> HubModel:
    """The snapshot of repo_id at revision: from the cache when offline, else downloaded
    (or found) by huggingface_hub. InputError names the repo, the revision and why."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    rev = revision or "main"
    offline = _offline()
    # huggingface_hub reads HF_HUB_CACHE once, when first imported; read it now, so that
    # the cache this process is told to use is the one searched
    cache = os.environ.get("HF_HUB_CACHE") or None
    try:
        folder = Path(snapshot_download(repo_id, revision=rev, local_files_only=offline,
                                        cache_dir=cache))
    except HFValidationError as err:
        raise InputError(f"model.path: {repo_id!r} is not a Hugging Face repo id: "
                         f"{str(err).splitlines()[0]}") from None
    except Exception as err:  # noqa: BLE001 - the hub library raises many kinds; all mean "not here"
        where = "in the hub cache (HF_HUB_OFFLINE=1)" if offline else "on the hub or in its cache"
        raise InputError(f"model.path: {repo_id} at revision {rev} is not {where} "
                         f"({type(err).__name__}); download it first (hf download {repo_id} "
                         f"--revision {rev}) or set HF_HUB_CACHE") from None
    return HubModel(repo_id, rev, folder.name, folder)
