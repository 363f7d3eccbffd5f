"""The embedded store shared over Redis: a real owner subprocess, remote calls, timeouts, the path lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from qdrant_client import QdrantClient

from lessonbank.core.constants import STORE_OWNER_KEY, STORE_REQUESTS_KEY, store_reply_key
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.exceptions import ServiceUnavailable, StoreError
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.store.remote import REPLY_TTL, RemoteLessonStore, connect_store
from lessonbank.workers.owner import StoreOwner, open_local_store
from tests.fixtures.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
CSV = "Read semicolon separated CSV files with pandas.read_csv(sep=';')."
TIMEOUT = "Always pass a timeout to requests.get, the billing API hangs otherwise."

OWNER_SCRIPT = """
import logging, signal, sys, threading
from lessonbank.core.settings import Settings
from lessonbank.workers.owner import StoreOwner

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
owner = StoreOwner(Settings())
if not owner.start():
    print("refused", flush=True)
    sys.exit(3)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *args: stop.set())
print("serving", flush=True)
stop.wait()
owner.stop()
print("stopped", flush=True)
"""


@pytest.fixture
def shared_settings(settings: Settings, embed_model_path: Path) -> Settings:
    return settings.model_copy(update={"embed_model_path": embed_model_path, "store_timeout": 20.0})


# A machine whose clock is off by CLOCK_SKEW seconds
SKEWED = """
import os, time
_clock = time.time
time.time = lambda: _clock() + float(os.environ["CLOCK_SKEW"])
"""


def start_owner(settings: Settings, skew: float | None = None) -> subprocess.Popen[str]:
    """A real second process owning the embedded Qdrant path and serving it over Redis (its clock ``skew``
    seconds off)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LESSONBANK_REDIS_URL": settings.redis_url,
        "LESSONBANK_DATA_DIR": str(settings.data_dir),
        "LESSONBANK_EMBED_MODEL_PATH": str(settings.embed_model_path),
        "CLOCK_SKEW": str(skew or 0.0),
    }
    script = (SKEWED if skew else "") + OWNER_SCRIPT
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "serving"
    return process


@pytest.fixture
def owner_process(shared_settings: Settings) -> Iterator[subprocess.Popen[str]]:
    process = start_owner(shared_settings)
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.mark.parametrize("skew", [30.0, -30.0])
def test_an_owner_whose_clock_is_off_serves_the_agent_and_drops_what_it_gave_up(
    shared_settings: Settings, redis_client: redis.Redis, skew: float
) -> None:
    """The agent's machine and the worker's may disagree by seconds, more than the 3 s an agent waits: a
    request's deadline is in Redis's clock. Were it in the agent's, an owner 30 s ahead would drop every request
    as given up, and one 30 s behind would run requests given up long ago."""
    process = start_owner(shared_settings, skew)
    try:
        # the first write loads the owner's embedding model: on a busy machine that alone may take the 3 s
        RemoteLessonStore(shared_settings.model_copy(update={"store_timeout": 60.0})).upsert([Lesson.new("a", "fact",
                                                                                                     CSV)])
        remote = RemoteLessonStore(shared_settings.model_copy(update={"store_timeout": 3.0}))
        assert remote.banks() == {"a": 1}
        seconds, micros = redis_client.time()
        given_up = {"id": "given-up", "method": "banks", "args": {}, "deadline": seconds + micros / 1e6 - 1}
        redis_client.rpush(STORE_REQUESTS_KEY, json.dumps(given_up))
        assert remote.banks() == {"a": 1}  # served after the one given up...
        time.sleep(0.3)  # (another serving thread may have taken that one side by side)
        assert not redis_client.exists(store_reply_key("given-up"))  # ...which got no reply
    finally:
        stop_owner(process)


def stop_owner(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    assert process.returncode == 0 and "stopped" in out


def test_two_processes_share_the_embedded_store(
    shared_settings: Settings, owner_process: subprocess.Popen[str]
) -> None:
    remote = connect_store(shared_settings)
    assert isinstance(remote, RemoteLessonStore)
    csv, timeout, other = Lesson.new("a", "approach", CSV), Lesson.new("a", "failure", TIMEOUT), Lesson.new(
        "b", "approach", CSV
    )
    remote.upsert([csv, timeout, other])

    found = remote.search("a", "load a semicolon separated csv file", limit=2)
    assert [x.id for x, _ in found] == [csv.id, timeout.id]
    assert found[0][0] == csv
    similar = remote.similar("a", "load a semicolon separated csv file", limit=1)
    assert similar[0][0].id == csv.id and 0.5 < similar[0][1] <= 1.0
    assert [x.id for x, _ in remote.search("a", "billing API", kinds=["failure"])] == [timeout.id]
    assert remote.get("a", [other.id, csv.id]) == [csv]
    assert {x.id for x in remote.list("a")} == {csv.id, timeout.id}
    assert remote.banks() == {"a": 2, "b": 1}
    assert remote.set_counts("a", {csv.id: {"given": 1, "helpful": 1}}) == 1
    assert remote.set_status("a", [timeout.id, other.id], "forgotten") == 1
    assert [x.id for x in remote.list("a")] == [csv.id]
    assert [x.id for x, _ in remote.similar("a", "the billing API", statuses=["forgotten"])] == [timeout.id]
    with pytest.raises(StoreError, match="unknown lesson status"):  # the owner's error crosses back
        remote.set_status("a", [csv.id], "bogus")
    ranked = remote.rank("a", "load a semicolon separated csv file", limit=3, min_similarity=0.2)
    assert ranked[0][0].id == csv.id and ranked[0][0].helpful == 1 and ranked[0][1] > 0.5 and ranked[0][2] == 0
    extra = Lesson.new("b", "fact", "A lesson of bank b that is deleted through the owner.")
    remote.upsert([extra])
    assert remote.delete("a", [extra.id]) == 0 and remote.delete("b", [extra.id]) == 1

    # the path is held: a direct open fails clearly, a second owner declines
    with pytest.raises(ServiceUnavailable, match="held by another process"):
        open_local_store(shared_settings)
    assert StoreOwner(shared_settings).start() is False

    stop_owner(owner_process)  # releases the path; what it wrote is on disk
    direct = open_local_store(shared_settings)
    try:
        (stored,) = direct.get("a", [csv.id])
        assert stored.given == 1 and stored.helpful == 1
        assert direct.banks() == {"a": 1, "b": 1}
    finally:
        direct.close()


def test_no_owner_means_service_unavailable_within_the_timeout(settings: Settings, redis_client: redis.Redis) -> None:
    remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 0.5}))
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=r"no lesson store owner answered within 0.5s; is a worker running\?"):
        remote.search("a", "anything")
    assert 0.4 < time.monotonic() - started < 3
    assert redis_client.llen(STORE_REQUESTS_KEY) == 0  # the unanswered request does not linger


def test_unreachable_redis_is_service_unavailable(settings: Settings) -> None:
    remote = RemoteLessonStore(settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"}))
    with pytest.raises(ServiceUnavailable, match="Redis unreachable"):
        remote.banks()


def test_connect_store_talks_to_a_server_directly(settings: Settings) -> None:
    direct = connect_store(settings.model_copy(update={"qdrant_url": f"http://127.0.0.1:{free_port()}"}))
    assert isinstance(direct, LessonStore) and not direct.is_local
    assert direct.collection == settings.collection
    direct.close()


def test_serving_threads_answer_concurrent_callers_each_their_own(
    settings: Settings, redis_client: redis.Redis, embedder: FastEmbedEmbedder, tmp_path: Path
) -> None:
    store = EdgeLessonStore(tmp_path / "qdrant", embedder)
    owner = StoreOwner(settings, redis_client=redis_client, store=store, threads=3)
    lessons = {bank: Lesson.new(bank, "fact", f"Bank {bank} reads its CSV files with sep=';'.") for bank in "abcdef"}
    store.upsert(list(lessons.values()))
    assert owner.start() and len([t for t in threading.enumerate() if t.name.startswith("lessonbank-store")]) == 3
    errors: list[str] = []

    def caller(bank: str) -> None:
        remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 20.0}))
        for _ in range(5):
            ranked = remote.rank(bank, "read the CSV files", limit=3)
            if [lesson.id for lesson, _, _ in ranked] != [lessons[bank].id]:
                errors.append(f"{bank}: {ranked}")

    callers = [threading.Thread(target=caller, args=(bank,)) for bank in lessons]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(60)
    owner.stop()
    store.close()
    assert errors == []


class HashEmbedder:
    """Cheap 8-d vectors from the text's bytes: the purge below copies points, whatever they mean."""

    dim = 8

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[float(b) + 1.0 for b in text.encode()[:8].ljust(8, b"x")] for text in texts]


def test_a_delete_the_owner_took_is_waited_for_beyond_the_store_timeout(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    store = EdgeLessonStore(tmp_path / "qdrant", HashEmbedder())
    store.upsert([Lesson.new("big", "fact", f"Lesson {i} of a big bank.") for i in range(3000)])
    store.upsert([Lesson.new("doomed", "fact", "The one lesson of a doomed bank.")])
    owner = StoreOwner(settings, redis_client=redis_client, store=store)
    assert owner.start()
    try:
        remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 0.05}))
        remote.banks()  # the owner is serving
        started = time.monotonic()
        assert remote.delete_bank("doomed") == 1  # copies 3,000 points into a fresh shard
        assert time.monotonic() - started > 0.05
        assert remote.banks() == {"big": 3000}
    finally:
        owner.stop()
        store.close()


def fake_owner(redis_client: redis.Redis, delay: float, reply: bytes | None) -> threading.Thread:
    """A thread that takes the next store request after ``delay`` seconds and sends ``reply`` (None: never)."""
    def serve() -> None:
        time.sleep(delay)
        item = redis_client.blpop([STORE_REQUESTS_KEY], timeout=10)
        assert item is not None
        if reply is not None:
            redis_client.rpush(store_reply_key(json.loads(item[1])["id"]), reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_store_timeout_longer_than_the_clients_socket_timeout_is_waited_in_pieces(
    settings: Settings, redis_client: redis.Redis
) -> None:
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=1.0)  # as the CLI's (10 s), shorter
    remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 4.0}), client)
    owner = fake_owner(redis_client, 2.5, b'{"ok": true, "result": {"a": 2}}')
    assert remote.banks() == {"a": 2}  # not "Redis unreachable" once the socket's 1 s has passed
    owner.join()

    remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 2.5}), client)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match="no lesson store owner answered within 2.5s"):
        remote.delete_bank("a")
    assert 2.4 < time.monotonic() - started < 5
    assert redis_client.llen(STORE_REQUESTS_KEY) == 0  # taken back: no owner starting later runs the delete


@pytest.mark.timeout(120)
def test_a_delete_whose_owner_died_fails_once_its_heartbeat_lapses(
    settings: Settings, redis_client: redis.Redis
) -> None:
    redis_client.set(STORE_OWNER_KEY, "worker-1", px=2500)  # the owner's heartbeat, not renewed: it died
    owner = fake_owner(redis_client, 0.0, None)  # takes the delete, never replies
    remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 0.3}))
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match="stopped during delete_bank .its heartbeat lapsed"):
        remote.delete_bank("a")
    assert time.monotonic() - started < 10  # not PURGE_WAIT (600 s)
    owner.join()


@pytest.fixture
def memory_owner(settings: Settings, redis_client: redis.Redis, embedder: FastEmbedEmbedder) -> Iterator[StoreOwner]:
    client = QdrantClient(":memory:")
    owner = StoreOwner(settings, redis_client=redis_client, store=LessonStore(client, embedder))
    yield owner
    owner.stop()
    client.close()


def test_owner_serves_in_a_thread_and_stops_promptly(memory_owner: StoreOwner, settings: Settings) -> None:
    assert memory_owner.start() is True and memory_owner.running
    remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 10.0}))
    remote.upsert([Lesson.new("a", "fact", CSV)])
    assert remote.banks() == {"a": 1}
    started = time.monotonic()
    memory_owner.stop()
    assert not memory_owner.running and time.monotonic() - started < 2.5
    assert memory_owner.store is not None  # an injected store stays open for its owner


def test_owner_drops_expired_and_malformed_requests(memory_owner: StoreOwner, redis_client: redis.Redis) -> None:
    expired = {"id": "r1", "method": "banks", "args": {}, "deadline": time.time() - 1}
    assert memory_owner.handle(json.dumps(expired)) is None
    assert not redis_client.exists(store_reply_key("r1"))
    assert memory_owner.handle(b"{not json") is None
    assert memory_owner.handle(json.dumps({"method": "banks"})) is None


def test_owner_replies_with_errors_and_a_short_ttl(memory_owner: StoreOwner, redis_client: redis.Redis) -> None:
    reply = memory_owner.handle(json.dumps({"id": "r2", "method": "drop_everything", "args": {}}))
    assert json.loads(reply or b"") == {
        "ok": False, "error": {"type": "StoreError", "message": "unknown store method 'drop_everything'"}}
    bad_args = json.loads(memory_owner.handle(json.dumps(
        {"id": "r3", "method": "list", "args": {"bank": "a", "nope": 1}})) or b"")
    assert bad_args["ok"] is False and "bad arguments to list" in bad_args["error"]["message"]
    ok = memory_owner.handle(json.dumps({"id": "r4", "method": "banks", "args": {}, "deadline": time.time() + 5}))
    assert ok is not None and json.loads(ok) == {"ok": True, "result": {}}
    assert redis_client.lpop(store_reply_key("r4")) == ok
    assert 0 < redis_client.ttl(store_reply_key("r2")) <= REPLY_TTL


AGENT_SCRIPT = """
import sys
from smolagents import CodeAgent
from tests.fixtures.scripted_model import ScriptedModel, final_code
import lessonbank

model = ScriptedModel([final_code("done")])
agent = CodeAgent(tools=[], model=model, verbosity_level=0)
lessonbank.remember(agent, bank="a", holdout=0)
agent.run("Load a semicolon separated csv file.")
task = model.calls[0]["messages"][1]  # the lessons follow the task
content = task.content if hasattr(task, "content") else task["content"]
text = "".join(part.get("text", "") for part in content) if isinstance(content, list) else str(content)
print(text.count("sep=';'"))
heavy = ("celery", "kombu", "qdrant_client", "qdrant_edge", "fastembed", "onnxruntime", "numpy", "tokenizers",
         "lessonbank.workers", "lessonbank.tools", "lessonbank.core.embeddings", "lessonbank.core.store.owner")
print(",".join(sorted(m for m in heavy if m in sys.modules)))
"""


def test_an_agent_given_lessons_through_the_owner_loads_no_store_embedder_or_tools(
    shared_settings: Settings, owner_process: subprocess.Popen[str]
) -> None:
    """The default set-up: the worker owns the store and embeds the task; ``remember()`` in the agent process
    loads neither Celery, nor Qdrant, nor an embedding model, nor the memory tools it was not asked for."""
    connect_store(shared_settings).upsert([Lesson.new("a", "approach", CSV, origin="added")])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LESSONBANK_REDIS_URL": shared_settings.redis_url,
           "LESSONBANK_DATA_DIR": str(shared_settings.data_dir), "LESSONBANK_STORE_TIMEOUT": "20"}
    done = subprocess.run([sys.executable, "-c", AGENT_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    given, loaded = done.stdout.splitlines()
    assert int(given) >= 1  # the owner's lesson reached the run, after its task
    assert loaded == ""


def test_a_reply_that_is_not_the_method_result_is_a_store_error(settings: Settings, redis_client: redis.Redis) -> None:
    def impostor() -> None:  # answers like an owner of another version would: a result of the wrong shape
        item = redis_client.blpop([STORE_REQUESTS_KEY], timeout=10)
        assert item is not None
        redis_client.rpush(store_reply_key(json.loads(item[1])["id"]), b'{"ok": true, "result": {"lessons": 3}}')

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    remote = RemoteLessonStore(settings.model_copy(update={"store_timeout": 10.0}))
    with pytest.raises(StoreError, match=r"^unreadable reply from the lesson store owner to rank: .+ at result"):
        remote.rank("a", "anything")
    thread.join(5)
