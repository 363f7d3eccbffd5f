"""Many hosts, one Redis: one embedded store per Redis, the sweeper's schedule run once per cluster."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from lessonbank.core.constants import BEAT_LOCK_KEY, RUN_DISTILLED, STORE_CLAIM_KEY
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import connect_store
from lessonbank.workers.owner import claim_store, local_store_id
from tests.fixtures.celery_worker import REPO, CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state, write_run

# Each wait for a worker or a beat to get somewhere (started, took over, sent the schedule): far beyond the few
# seconds it takes on an idle machine, so that only one that never gets there fails, not a loaded machine.
EVENT_WAIT = 300


def test_the_first_store_binds_the_redis_and_another_is_refused(settings: Settings, redis_client: redis.Redis,
                                                                tmp_path: Path) -> None:
    claim_store(settings, redis_client)
    claim_store(settings, redis_client)  # the same store again (a restart, a standby on its volume)
    held = json.loads(redis_client.get(STORE_CLAIM_KEY) or b"{}")
    assert held["id"] == local_store_id(settings) and held["path"] == str(settings.resolved_qdrant_path)
    other = settings.model_copy(update={"data_dir": tmp_path / "other-host"})
    with pytest.raises(ConfigurationError, match="LESSONBANK_QDRANT_URL") as refused:
        claim_store(other, redis_client)
    assert str(settings.resolved_qdrant_path) in str(refused.value) and "\n" not in str(refused.value)
    assert json.loads(redis_client.get(STORE_CLAIM_KEY) or b"{}") == held  # the binding stays the first store's


def test_a_store_keeps_its_id_across_restarts(settings: Settings) -> None:
    first = local_store_id(settings)
    assert local_store_id(settings) == first and len(first) == 32


@pytest.mark.slow
def test_a_second_worker_with_its_own_data_dir_refuses_to_start(redis_url: str, openai_server: FakeOpenAI,
                                                                embed_model_path: Path, tmp_path: Path) -> None:
    """Two hosts sharing one Redis, each with its own LESSONBANK_DATA_DIR and no Qdrant server: the second worker
    stops with one line instead of serving half of every bank."""
    first = CeleryWorker(worker_env(redis_url, "hosts", tmp_path / "host-a", openai_server.url, embed_model_path),
                         "hosts", tmp_path / "a.log").start()
    try:
        second = CeleryWorker(worker_env(redis_url, "hosts", tmp_path / "host-b", openai_server.url,
                                         embed_model_path), "hosts", tmp_path / "b.log")
        with pytest.raises(RuntimeError, match="worker exited"):
            second.start(timeout=120)
        lines = [line for line in second.log().splitlines() if "LESSONBANK_QDRANT_URL" in line]
        assert len(lines) == 1 and lines[0].startswith("lessonbank: this Redis's lessons are in the embedded store")
        assert str(tmp_path / "host-a") in lines[0]
        assert "serving the lesson store" not in second.log()
        # the first one still serves every request
        client = redis.Redis.from_url(redis_url)
        assert client.get(STORE_CLAIM_KEY) is not None
        assert "serving the lesson store" in first.log()
    finally:
        first.stop()


@pytest.mark.slow
@pytest.mark.timeout(3 * EVENT_WAIT)
def test_a_worker_on_the_same_store_waits_as_a_standby(redis_url: str, openai_server: FakeOpenAI,
                                                       embed_model_path: Path, tmp_path: Path) -> None:
    """A second worker on the same data directory (the same host, or the same volume) is no second store: it starts
    and serves the store once the first lets go of it."""
    env = worker_env(redis_url, "standby", tmp_path / "shared", openai_server.url, embed_model_path)
    first = CeleryWorker(env, "standby", tmp_path / "a.log").start()
    second = CeleryWorker(env, "standby", tmp_path / "b.log")
    try:
        second.start(wait_for=("ready.", "tries to own it"))
        first.stop()
        deadline = time.monotonic() + EVENT_WAIT
        while "now serves the lesson store" not in second.log():
            assert time.monotonic() < deadline, second.log()[-2000:]
            time.sleep(0.2)
    finally:
        first.stop()
        second.stop()


CSV = ("fact", "The sales CSV files are separated by ';': read them with pandas.read_csv(path, sep=';').")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_workers_on_one_store_distill_every_bank_once(redis_url: str, redis_client: redis.Redis,
                                                          openai_server: FakeOpenAI, embed_model_path: Path,
                                                          tmp_path: Path) -> None:
    """Two workers, one store (the one that owns it serves the other over Redis, as a Qdrant server would serve
    both): runs of three banks are split between them, and each run is distilled once, into its own bank."""
    env = worker_env(redis_url, "pair", tmp_path / "shared", openai_server.url, embed_model_path)
    first = CeleryWorker(env, "pair", tmp_path / "a.log", concurrency=1).start()
    second = CeleryWorker(env, "pair", tmp_path / "b.log", concurrency=1)
    try:
        second.start(wait_for=("ready.", "tries to own it"))
        held = openai_server.released_event()  # the first two calls wait: each worker is busy with one run
        openai_server.script(*(Reply(content=lessons_json(CSV), block=held) for _ in range(2)))
        openai_server.default = Reply(content=lessons_json(CSV))
        banks = ["north", "south", "east"]
        runs = {write_run(redis_client, bank): bank for bank in banks for _ in range(2)}
        app = producer(redis_url)
        for run_id, bank in runs.items():
            enqueue(app, "pair", bank, run_id)
        openai_server.wait_for_requests(2, timeout=120)
        held.set()
        deadline = time.monotonic() + 240
        while any(run_state(redis_client, run_id).get("state") != RUN_DISTILLED for run_id in runs):
            assert time.monotonic() < deadline, first.log()[-2000:] + second.log()[-2000:]
            time.sleep(0.3)
        assert len(openai_server.chat_requests()) == len(runs)  # each run distilled once
        for log in (first.log(), second.log()):
            assert "Task lessonbank.distill_run[" in log and "succeeded" in log  # both did their share
        store = connect_store(Settings(_env_file=None, redis_url=redis_url, queue="pair", data_dir=tmp_path / "shared",
                                       embed_model_path=embed_model_path, qdrant_url=None, store_timeout=30))
        for bank in banks:
            [lesson] = [lesson for lesson in store.list(bank) if lesson.recipe is None]
            assert lesson.evidence == 2 and sorted(lesson.source_run_ids) == sorted(r for r, b in runs.items()
                                                                                      if b == bank)
    finally:
        first.stop()
        second.stop()


def _beat(redis_url: str, tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = worker_env(redis_url, "beats", tmp_path / name, "http://127.0.0.1:9/v1", tmp_path / "no-model",
                     sweep_interval=1)
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "celery", "-A", "lessonbank.workers", "beat", "--loglevel",
                                    "DEBUG"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return process, log


def _sent(log: Path) -> int:
    return log.read_text(errors="replace").count("Sending due task sweep-runs")


def _wait(condition: Callable[[], bool], seconds: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(5 * EVENT_WAIT)
def test_two_beats_on_one_redis_send_the_schedule_once(redis_url: str, tmp_path: Path) -> None:
    """A second beat (a second host's ``worker -B``, a second ``beat`` service) waits for the lock in Redis and sends
    nothing; once the first stops, it takes over."""
    first, first_log = _beat(redis_url, tmp_path, "beat-a")
    second = None
    try:
        _wait(lambda: _sent(first_log) >= 1, EVENT_WAIT, lambda: first_log.read_text(errors="replace")[-2000:])
        assert redis.Redis.from_url(redis_url).exists(BEAT_LOCK_KEY)  # what `lessonbank status --beat` checks
        second, second_log = _beat(redis_url, tmp_path, "beat-b")
        _wait(lambda: "Acquiring lock" in second_log.read_text(errors="replace"), EVENT_WAIT,
              lambda: second_log.read_text(errors="replace")[-2000:])
        before = _sent(first_log)
        _wait(lambda: _sent(first_log) >= before + 3, EVENT_WAIT, lambda: "the first beat stopped sending")
        assert _sent(second_log) == 0 and "Acquired lock" not in second_log.read_text(errors="replace")
        first.send_signal(signal.SIGTERM)
        first.wait(EVENT_WAIT)
        _wait(lambda: _sent(second_log) >= 1, EVENT_WAIT, lambda: second_log.read_text(errors="replace")[-2000:])
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
