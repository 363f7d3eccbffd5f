"""What the fault tests share: one worker service (Redis, fake LLM, Celery worker), waiting, counting.

``Service`` starts a real redis-server (optionally with AOF, so the queue survives a kill), a real HTTP
server speaking the OpenAI protocol (optionally behind a ``Relay`` that can refuse connections), and a
real ``celery -A workers worker`` process owning the embedded lesson store. Timeouts and backoffs are
small so that every fault resolves in seconds.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from smolagents import CodeAgent, Tool

from lessonbank.core import runs
from lessonbank.core.constants import RUN_DEAD, RUN_DISTILLED, run_key, run_steps_key
from lessonbank.core.models import Lesson, StepRecord
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import RemoteLessonStore, connect_store
from lessonbank.recorder import StepRecorder
from lessonbank.workers import deadletters
from tests.fixtures.celery_worker import CeleryWorker, enqueue, producer, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.recorded import run_records
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.relay import Relay
from tests.fixtures.runs import run_state, write_run
from tests.fixtures.scripted_model import Reply as ModelReply
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

FINISHED = (RUN_DISTILLED, RUN_DEAD)

# Small limits for every fault worker (each can be overridden per module).
FAST = {
    "llm_timeout": 2,
    "retry_backoff": 1,
    "retry_backoff_max": 1,
    "max_retries": 2,
    "store_timeout": 3,
    "task_soft_time_limit": 20,
    "task_time_limit": 25,
    "visibility_timeout": 30,
    "distill_lock_timeout": 15,
    "lease_timeout": 3,
}


class Service:
    """Redis + fake LLM + one worker, for one test module. Tests use banks of their own."""

    def __init__(self, root: Path, embed_model_path: Path, queue: str, appendonly: bool = False,
                 relay: bool = False, concurrency: int = 2, **overrides: str | int | float) -> None:
        self.root = root
        self.queue = queue
        self.embed_model_path = embed_model_path
        self.redis_server = RedisServer(root / "redis", appendonly=appendonly)
        self.llm = FakeOpenAI()
        self.relay: Relay | None = None
        self.use_relay = relay
        self.concurrency = concurrency
        self.overrides: dict[str, str | int | float] = {**FAST, **overrides}
        self.worker: CeleryWorker | None = None
        self.workers_started = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Service:
        self.redis_server.start()
        self.llm.start()
        if self.use_relay:
            self.relay = Relay(int(self.llm.url.split(":")[-1].split("/")[0])).open()
        self.client = self.redis_server.client()
        self.app: Celery = producer(self.redis_server.url)
        self.start_worker()
        return self

    @property
    def llm_url(self) -> str:
        return f"http://127.0.0.1:{self.relay.port}/v1" if self.relay is not None else self.llm.url

    def worker_env(self) -> dict[str, str]:
        return worker_env(self.redis_server.url, self.queue, self.root / "data", self.llm_url, self.embed_model_path,
                          **self.overrides)

    def start_worker(self) -> CeleryWorker:
        self.workers_started += 1
        log = self.root / f"worker-{self.workers_started}.log"
        self.worker = CeleryWorker(self.worker_env(), self.queue, log, concurrency=self.concurrency).start()
        return self.worker

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.relay is not None:
            self.relay.close()
        self.llm.stop()
        self.redis_server.stop()

    def restart_redis(self, down_for: float = 0.0) -> None:
        """SIGKILL redis-server, wait `down_for` seconds, start it again on the same port (same AOF)."""
        self.redis_server.kill()
        time.sleep(down_for)
        self.redis_server.start()

    # -- the agent side -------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """Settings of an agent process / CLI talking to this service (no Qdrant URL: through the worker)."""
        return Settings(
            _env_file=None, redis_url=self.redis_server.url, queue=self.queue, data_dir=self.root / "agent",
            embed_model_path=self.embed_model_path, store_timeout=10, qdrant_url=None,
            openai_base_url=None, openai_api_key=None,
        )

    def cli_env(self) -> dict[str, str | None]:
        """Environment for ``CliRunner``: the same Redis and embedded store as the worker."""
        return {
            "LESSONBANK_REDIS_URL": self.redis_server.url,
            "LESSONBANK_QUEUE": self.queue,
            "LESSONBANK_DATA_DIR": str(self.root / "data"),
            "LESSONBANK_EMBED_MODEL_PATH": str(self.embed_model_path),
            "LESSONBANK_STORE_TIMEOUT": "10",
            "LESSONBANK_QDRANT_URL": None,
            "LESSONBANK_QDRANT_PATH": None,
            "LESSONBANK_BANK": None,
        }

    def store(self) -> RemoteLessonStore:
        store = connect_store(self.settings, self.redis_server.client())
        assert isinstance(store, RemoteLessonStore)
        return store

    def lessons(self, bank: str, include_inactive: bool = False) -> list[Lesson]:
        return self.store().list(bank, limit=1000, include_inactive=include_inactive)

    # -- runs -----------------------------------------------------------------------------------

    def submit(self, bank: str, queue: str | None = None, **kwargs: Any) -> str:
        """A run written the way the recorder lays it out, and its distill task."""
        run_id = write_run(self.client, bank, **kwargs)
        enqueue(self.app, queue or self.queue, bank, run_id)
        return run_id

    def state(self, run_id: str) -> dict[str, str]:
        return run_state(self.client, run_id)

    def wait(self, run_id: str, states: tuple[str, ...] = FINISHED, timeout: float = 60) -> dict[str, str]:
        return self.wait_all([run_id], states, timeout)[run_id]

    def wait_all(self, run_ids: Iterable[str], states: tuple[str, ...] = FINISHED,
                 timeout: float = 60) -> dict[str, dict[str, str]]:
        pending = list(run_ids)
        done: dict[str, dict[str, str]] = {}
        deadline = time.monotonic() + timeout
        while pending:
            for run_id in list(pending):
                state = run_state(self.client, run_id)
                if state.get("state") in states:
                    done[run_id] = state
                    pending.remove(run_id)
            if not pending:
                break
            if time.monotonic() > deadline:
                log = self.worker.log()[-3000:] if self.worker else ""
                raise AssertionError(f"{len(pending)} run(s) not {states} in {timeout}s, e.g. "
                                     f"{pending[0]}: {run_state(self.client, pending[0])}\n{log}")
            time.sleep(0.1)
        return done

    def dead_letter(self, run_id: str) -> deadletters.DeadLetter | None:
        return deadletters.get(self.client, run_id)

    def requests_for(self, marker: str) -> list[dict[str, Any]]:
        """The chat requests whose messages mention `marker` (e.g. a task text unique to one run)."""
        return [r for r in self.llm.chat_requests() if marker in json.dumps(r["messages"])]


class Monitor:
    """Every command a real redis-server executes (its ``MONITOR`` feed), to count what was sent and published.

    Reconnects when the server restarts (what it executes meanwhile is not seen: counts are lower bounds then).
    """

    QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')

    def __init__(self, port: int) -> None:
        self.port = port
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="redis monitor", daemon=True)
        self.connected = threading.Event()

    def start(self) -> Monitor:
        self._thread.start()
        assert self.connected.wait(10), "MONITOR did not connect"
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=1)
            except OSError:
                time.sleep(0.05)
                continue
            self._sock = sock
            sock.settimeout(None)
            sock.sendall(b"MONITOR\r\n")
            buffer = b""
            try:
                while data := sock.recv(1 << 20):
                    buffer += data
                    *lines, buffer = buffer.split(b"\r\n")
                    with self._lock:
                        self._lines += [line.decode("utf-8", "replace") for line in lines if line.startswith(b"+")]
                    self.connected.set()
            except OSError:
                pass
            finally:
                sock.close()

    def clients_asking(self, command: str) -> set[str]:
        """The connections (address and port) that sent a command whose start is ``command`` (``'"SET" "key"'``)."""
        with self._lock:
            lines = list(self._lines)
        return {line.split("]", 1)[0].rsplit(" ", 1)[-1] for line in lines if f"] {command}" in line}

    def commands(self) -> list[list[str]]:
        """Each executed command as its arguments (escapes left as they are: ids and numbers read fine)."""
        with self._lock:
            lines = list(self._lines)
        return [self.QUOTED.findall(line) for line in lines]

    def published(self, queue: str, run_id: str) -> int:
        """Task messages naming ``run_id`` pushed onto ``queue`` (by any client, or a Lua script)."""
        return sum(1 for c in self.commands() if c[:2] == ["LPUSH", queue] and run_id in " ".join(c[2:]))

    def script_sends(self, sha: str, run_id: str) -> list[list[str]]:
        """The ``EVALSHA sha`` commands about ``run_id`` (its first argument after the keys)."""
        found = []
        for c in self.commands():
            if c[:2] == ["EVALSHA", sha]:
                keys = int(c[2])
                if len(c) > 3 + keys and c[3 + keys] == run_id:
                    found.append(c[4 + keys:])
        return found

    def record_sends(self, run_id: str) -> Counter[int]:
        """How many times each step record (by seq) of the run reached Redis, closes included."""
        sent: Counter[int] = Counter()
        for args in self.script_sends(runs.SCRIPTS["step"], run_id):
            # after the run id: its fields, first and last step's times, the follow-up, the sending time, then
            # pairs of seq and record (runs.STEP_SCRIPT)
            sent.update(int(seq) for seq in args[5::2])
        for args in self.script_sends(runs.SCRIPTS["close"], run_id):
            sent[int(args[0])] += 1
        return sent


def duplicate_lessons(svc: Service, *banks: str) -> int:
    """Lessons of ``banks`` stored twice (same text), plus lessons crediting one run more than once."""
    lessons = [lesson for bank in banks for lesson in svc.lessons(bank, include_inactive=True)]
    texts = Counter((lesson.bank, lesson.text) for lesson in lessons)
    twice = sum(n - 1 for n in texts.values())
    return twice + sum(len(lesson.source_run_ids) - len(set(lesson.source_run_ids)) for lesson in lessons)


def records_lost(client: redis.Redis, handed: dict[str, int]) -> int:
    """Step records handed to the recorder (``handed``: run id -> how many) that Redis does not hold."""
    return sum(max(count - int(client.hlen(run_steps_key(run_id))), 0) for run_id, count in handed.items())


def deliveries(client: redis.Redis, run_id: str) -> int:
    """Deliveries of the run's distill task to a worker (duplicates included), as the task counts them."""
    return int(client.hget(run_key(run_id), "deliveries") or 0)


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05,
               seen: Callable[[], object] | None = None) -> Any:
    """``condition()`` once it is true; after ``timeout`` seconds an AssertionError naming ``what`` it waited for
    and, with ``seen``, what ``seen()`` found then."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            found = f"; saw {seen()}" if seen is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{found}")
        time.sleep(interval)


def seqs(client: redis.Redis, run_id: str) -> list[int]:
    """Sequence numbers of the run's step records in Redis (each field holds exactly one record)."""
    return [record.seq for record in run_records(client, run_id)]


def records(client: redis.Redis, run_id: str) -> list[StepRecord]:
    return run_records(client, run_id)


def step_count(client: redis.Redis, run_id: str) -> int:
    return int(client.hlen(run_steps_key(run_id)))


def paced(reply: ModelReply, seconds: float, before: Callable[[], None] | None = None) -> ModelReply:
    """A scripted model reply that takes `seconds` (like a real model) and may inject a fault first."""

    def slow(_messages: list[Any]) -> ModelReply:
        if before is not None:
            before()
        time.sleep(seconds)
        return reply

    return slow


def by_task(replies: dict[str, list[Reply]], fallback: Reply | None = None) -> Callable[[dict[str, Any]], Reply]:
    """A fake-LLM handler scripted per run: the key found in the request's messages picks its queue of replies.

    The last reply of a queue repeats. Requests matching no key get `fallback` (an error if None).
    """
    lock = threading.Lock()
    queues = {key: list(items) for key, items in replies.items()}

    def handle(body: dict[str, Any]) -> Reply:
        text = json.dumps(body["messages"])
        with lock:
            for key, items in queues.items():
                if key in text:
                    return items.pop(0) if len(items) > 1 else items[0]
        return fallback or Reply(status=500, body={"error": {"message": "unexpected request"}})

    return handle


class FnTool(Tool):
    """A smolagents tool without inputs that returns ``fn()`` as is (any Python object)."""

    inputs: dict[str, dict[str, str | bool]] = {}
    output_type = "any"
    skip_forward_signature_validation = True

    def __init__(self, name: str, fn: Callable[[], Any], description: str, output_type: str = "any") -> None:
        self.name = name
        self.description = description
        self.output_type = output_type
        self.fn = fn
        super().__init__()

    def forward(self) -> Any:  # type: ignore[override]
        return self.fn()


def tenant_run(bank: str, index: int, settings: Settings, pace: float = 0.02, observe: str = "") -> str:
    """One recorded run of agent `index` of `bank` (three code steps, each printing a marker of its own;
    the first also prints `observe`, when given: what a lesson of the run may rest on)."""
    seen = f"\nprint({observe!r})" if observe else ""
    replies = [paced(code_reply(f"marker = 'agent-{index}-step-{k}'\nprint(marker)" + (seen if k == 0 else "")),
                     pace) for k in range(2)]
    replies.append(paced(final_code(f"agent-{index}"), pace))
    recorder = StepRecorder(bank=bank, settings=settings)
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), verbosity_level=0, max_steps=5)
    assert recorder.run(agent, tenant_task(bank, index)) == f"agent-{index}"
    run_id = recorder.run_id(agent)
    recorder.close()
    assert run_id
    return run_id


def tenant_task(bank: str, index: int) -> str:
    return f"[{bank}] agent {index}: print two markers, then answer."


if __name__ == "__main__":  # python -m tests.faults.helpers BANK INDEX REDIS_URL QUEUE DATA_DIR [OBSERVE]: one run
    bank_arg, index_arg, url, queue_arg, data = sys.argv[1:6]
    process_settings = Settings(_env_file=None, redis_url=url, queue=queue_arg, data_dir=Path(data),
                                openai_base_url=None, openai_api_key=None)
    observed = sys.argv[6] if len(sys.argv) > 6 else ""
    sys.stdout.write(tenant_run(bank_arg, int(index_arg), process_settings, observe=observed) + "\n")
