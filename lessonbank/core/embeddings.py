"""Text embeddings: dense vectors from a real model, sparse lexical vectors from term counts.

Dense vectors come from fastembed (default ``sentence-transformers/all-MiniLM-L6-v2``: mean pooling
and L2 normalization, 384 dimensions) or from any OpenAI-compatible ``/v1/embeddings`` endpoint.
fastembed always loads a local folder (``model.onnx``, ``tokenizer.json``, ``tokenizer_config.json``,
``config.json``, ``special_tokens_map.json``) through ``specific_model_path``: the pinned, sha256-checked
folder ``lessonbank.model_files`` assembles, or the user's own. Nothing is ever downloaded by model name
(fastembed's own, unpinned source); a folder that is not there is an error naming the setting.

Every embedder keeps the vectors of the texts it embedded last (``EMBED_CACHE_SIZE`` texts, as float32
arrays): the store embeds a lesson's text to look for its neighbours and again to write it, and the
second time costs a dictionary lookup. A batch is embedded in one model call, repeated texts once.

Sparse vectors are plain term frequencies over lowercased word tokens hashed to stable uint32
indices; the collection's sparse vector applies Qdrant's IDF modifier on top.
"""

from __future__ import annotations

import logging
import math
import threading
import zlib
from array import array
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.core.tokens import tokens

if TYPE_CHECKING:
    from lessonbank.core.settings import Settings

logger = logging.getLogger(__name__)

MODEL_FILES: tuple[str, ...] = (
    "model.onnx",
    "tokenizer.json",
    "tokenizer_config.json",
    "config.json",
    "special_tokens_map.json",
)


MODEL_PATH_SETTING = "LESSONBANK_EMBED_MODEL_PATH"

EMBED_CACHE_SIZE = 4096
# onnxruntime threads per embedder: one text takes ~10 ms on one thread, and the processes that embed
# (the store's owner, workers) share the machine's cores with each other.
EMBED_THREADS = 1

class Embedder(Protocol):
    """Turns texts into L2-normalized dense vectors of ``dim`` dimensions."""

    @property
    def dim(self) -> int:
        """Number of dimensions of every vector."""
        ...

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalized vector per text, in order."""
        ...


def _normalize(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return vector
    return [x / norm for x in vector]


class VectorCache:
    """The last ``size`` texts' vectors (float32 arrays, ~1.5 kB each for 384 dimensions); thread-safe."""

    def __init__(self, size: int = EMBED_CACHE_SIZE) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._vectors: OrderedDict[str, array[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, text: str) -> list[float] | None:
        with self._lock:
            vector = self._vectors.get(text)
            if vector is None:
                self.misses += 1
                return None
            self._vectors.move_to_end(text)
            self.hits += 1
        return vector.tolist()

    def put(self, text: str, vector: list[float]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._vectors[text] = array("f", vector)
            self._vectors.move_to_end(text)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)


class CachingEmbedder:
    """``embed`` through a ``VectorCache``: only texts not seen lately reach the model, in one batch."""

    cache: VectorCache

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One L2-normalized vector per text, in order."""
        if not texts:
            return []
        found = {text: self.cache.get(text) for text in dict.fromkeys(texts)}
        missing = [text for text, vector in found.items() if vector is None]
        if missing:
            for text, vector in zip(missing, self._embed(missing), strict=True):
                self.cache.put(text, vector)
                found[text] = vector
        return [list(found[text] or ()) for text in texts]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError


def missing_model_files(folder: Path) -> list[str]:
    """Names of the model files that ``folder`` lacks (empty when it is complete)."""
    return [name for name in MODEL_FILES if not (folder / name).is_file()]


def default_model_dir(settings: Settings) -> Path:
    """Where ``scripts/fetch_embed_model.py`` assembles the model by default: DATA_DIR/models/<name>."""
    return settings.data_dir / "models" / settings.embed_model.rsplit("/", 1)[-1]


def model_folder(settings: Settings) -> Path:
    """The folder fastembed loads: ``embed_model_path``, else the default one under DATA_DIR."""
    return settings.embed_model_path or default_model_dir(settings)


def check_model_folder(folder: Path) -> None:
    """ConfigurationError (one line naming ``LESSONBANK_EMBED_MODEL_PATH``) when ``folder`` lacks a model file."""
    missing = missing_model_files(folder)
    if missing:
        raise ConfigurationError(
            f"embedding model folder {folder} lacks {', '.join(missing)}: set {MODEL_PATH_SETTING} to a complete "
            "folder, or assemble the pinned one there: `lessonbank embed setup` (`lessonbank worker` does it at start)"
        )


class FastEmbedEmbedder(CachingEmbedder):
    """fastembed ``TextEmbedding`` over the model files in ``model_path``; they load on the first ``embed`` call,
    not in ``__init__``, and a folder that lacks one is a ConfigurationError, never a download by name.

    ``threads`` is onnxruntime's thread count (None: one per core).
    """

    def __init__(self, model_name: str, model_path: Path | str, cache_dir: Path | str | None = None,
                 threads: int | None = EMBED_THREADS, cache_size: int = EMBED_CACHE_SIZE):
        self.model_name = model_name
        self.model_path = Path(model_path)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.threads = threads
        self.cache = VectorCache(cache_size)
        self._model: Any = None
        self._dim: int | None = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        if self._dim is None:
            from fastembed import TextEmbedding

            try:
                self._dim = int(TextEmbedding.get_embedding_size(self.model_name))
            except ValueError as e:
                raise ConfigurationError(f"fastembed does not know the model {self.model_name!r}") from e
        return self._dim

    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            from fastembed import TextEmbedding

            check_model_folder(self.model_path)
            kwargs: dict[str, Any] = {"specific_model_path": str(self.model_path)}
            if self.cache_dir is not None:
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                kwargs["cache_dir"] = str(self.cache_dir)
            if self.threads is not None:
                kwargs["threads"] = self.threads
            logger.info("loading embedding model %s from %s", self.model_name, self.model_path)
            try:
                self._model = TextEmbedding(model_name=self.model_name, **kwargs)
            except ValueError as e:
                raise ConfigurationError(f"cannot load embedding model {self.model_name!r}: {e}") from e
            except Exception as e:  # fastembed/onnxruntime/huggingface_hub raise many types
                raise ConfigurationError(
                    f"cannot load embedding model {self.model_name!r} from {self.model_path} "
                    f"({type(e).__name__}: {e}); check {MODEL_PATH_SETTING}"
                ) from e
            return self._model

    def _embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        model = self._load()
        vectors = np.asarray(list(model.embed(list(texts))), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit = vectors / np.where(norms == 0.0, np.float32(1.0), norms)
        rows: list[list[float]] = unit.tolist()
        return rows


class OpenAIEmbedder(CachingEmbedder):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint, through an injected ``openai.OpenAI`` client."""

    def __init__(self, client: Any, model: str, dim: int | None = None, cache_size: int = EMBED_CACHE_SIZE) -> None:
        self.client = client
        self.model = model
        self._dim = dim
        self.cache = VectorCache(cache_size)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = len(self.embed(["dimension probe"])[0])
        return self._dim

    def _embed(self, texts: list[str]) -> list[list[float]]:
        import openai

        try:
            response = self.client.embeddings.create(model=self.model, input=list(texts))
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise ServiceUnavailable(f"embedding endpoint unreachable: {e}") from e
        except openai.APIStatusError as e:
            if e.status_code == 429 or e.status_code >= 500:
                raise ServiceUnavailable(f"embedding endpoint failed ({e.status_code}): {e}") from e
            raise ConfigurationError(f"embedding endpoint refused the request ({e.status_code}): {e}") from e
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise ServiceUnavailable(f"embedding endpoint returned {len(data)} vectors for {len(texts)} texts")
        vectors = [_normalize([float(x) for x in item.embedding]) for item in data]
        if self._dim is None:
            self._dim = len(vectors[0])
        return vectors


def embedder_from_settings(settings: Settings) -> Embedder:
    """The embedder the settings describe (no I/O until the first ``embed``).

    ``embed_base_url`` set: an OpenAI-compatible endpoint serving ``embed_model``. Otherwise fastembed, from
    ``embed_model_path``, else from the default folder DATA_DIR/models/<name> (never by name from fastembed's
    own source: an incomplete folder is an error at the first ``embed``).
    """
    if settings.embed_base_url:
        import openai

        api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else "unused"
        client = openai.OpenAI(base_url=settings.embed_base_url, api_key=api_key, timeout=settings.llm_timeout)
        return OpenAIEmbedder(client, settings.embed_model)
    return FastEmbedEmbedder(settings.embed_model, model_path=model_folder(settings),
                             cache_dir=settings.data_dir / "fastembed")


def token_index(token: str) -> int:
    """Stable uint32 index of a token (crc32, the same on every machine and run)."""
    return zlib.crc32(token.encode("utf-8")) & 0xFFFFFFFF


@dataclass(frozen=True)
class SparseVector:
    """A sparse vector: sorted, distinct indices and their values (each store converts it to its engine's type)."""

    indices: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def sparse_vector(text: str) -> SparseVector:
    """Term frequencies of ``text`` as a sparse vector (the collection applies the IDF modifier)."""
    counts: Counter[int] = Counter(token_index(token) for token in tokens(text))
    indices = sorted(counts)
    return SparseVector(indices=indices, values=[float(counts[i]) for i in indices])
