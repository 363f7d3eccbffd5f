"""Tasks in hand: each task's work (a *job*) runs under a lease in Redis, and its retries are due times there.

A job is the distillation of one run (``distill:{run_id}``), the credit of one run, or one remembered
lesson. Its hash (``job_key``) says what to publish to send it again (task, args, queue, task id, retries)
and who holds it; ``JOBS_DUE_KEY`` says when it is due again:

- a delivery *takes* the job: it becomes the holder, due ``lease_timeout`` from now; a thread renews
  that every third of it while the task runs. A delivery of a job held by a live process is dropped:
  two workers do not work on one run at once (unless a holder could not renew for a whole lease: a
  process stopped, Redis away; it then holds the job again if nobody took it, else learns it lost it).
  A holder on this host whose process has died (a pool process killed, its message requeued by Celery
  at once) is taken over at once;
- done (or failed for good): the job is deleted — unless it is done, is a job whose deliveries are not
  dropped (``Job.again_if_held``: a run's distillation or credit, whose steps or verdict may have changed
  after the holder read them) and one came while it was held: it is then due at once, and runs once more;
- a transient failure: the holder is dropped and the job is due after the backoff. The failing
  delivery is acknowledged, so no retry message waits, unacknowledged, in a worker (which the
  broker would hand out again only after its visibility timeout);
- the process is stopped mid-task (``SystemExit`` in a terminated pool process): due at once;
- the worker dies: nobody renews, and the job is due when its lease lapses.

An attempt lost with its process counts as a retry, so a run that kills its worker every time ends in the
dead letters instead of going round for ever.

``publish_due`` sends every due job to its queue again, one Lua script per job, so it is published once
however many processes call it: the ``Keeper`` thread of every worker's main process does, every
second, and so does the sweeper. Every script reads the time from Redis (``TIME``), so the clocks of the
hosts do not matter.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import bootsteps

from lessonbank.core.connections import create_redis, redis_text, redis_time
from lessonbank.core.constants import JOBS_DUE_KEY, job_key
from lessonbank.core.publish import task_message
from lessonbank.core.settings import Settings

logger = logging.getLogger(__name__)

KEEP_EVERY = 1.0  # seconds between two passes of a worker's Keeper
PUBLISH_BATCH = 100

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS: job hash, due set. ARGV: job id, token, lease seconds, task, args JSON, queue, task id, retries,
# holder to take over ('' for none). Returns {1, retries, holder} when taken (holder: the one it was taken from,
# '' for none), {0, holder} when another holds it.
_TAKE = _NOW + """
local holder = redis.call('HGET', KEYS[1], 'holder')
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
local retries = tonumber(redis.call('HGET', KEYS[1], 'retries') or '0')
if holder then
  if holder ~= ARGV[9] and due and tonumber(due) > now then
    if ARGV[10] == '1' then redis.call('HSET', KEYS[1], 'again', '1') end
    return {0, holder}
  end
  retries = retries + 1
end
if tonumber(ARGV[8]) > retries then retries = tonumber(ARGV[8]) end
redis.call('HSET', KEYS[1], 'task', ARGV[4], 'args', ARGV[5], 'queue', ARGV[6], 'task_id', ARGV[7],
           'retries', retries, 'holder', ARGV[2])
redis.call('HDEL', KEYS[1], 'released', 'again', 'rerun')
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
return {1, retries, holder or ''}
"""

# KEYS: job hash, due set. ARGV: job id, token, lease seconds. Returns 1 (renewed), 2 (the lease had lapsed and
# the job was published again, but nobody took it: held again, the new delivery will be dropped), 0 (lost).
_RENEW = _NOW + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder and holder ~= ARGV[2] then return 0 end
if (not holder) and redis.call('HGET', KEYS[1], 'released') == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'holder', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
if holder then return 1 end
return 2
"""

# KEYS: job hash, due set. ARGV: job id, token, delay seconds. Returns 1 when the retry was scheduled.
_RETRY = _NOW + """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'holder')
redis.call('HSET', KEYS[1], 'released', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'retries', 1)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""

# KEYS: job hash, due set. ARGV: job id, token, '1' when done (not failed for good). Deletes the job unless
# another process holds it (0); a done job a delivery asked to run again while it was held is let go, due at
# once, retries counted afresh (2).
_FINISH = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder and holder ~= ARGV[2] then return 0 end
if ARGV[3] == '1' and redis.call('HGET', KEYS[1], 'again') then
  redis.call('HDEL', KEYS[1], 'holder', 'again')
  redis.call('HSET', KEYS[1], 'retries', 0, 'rerun', '1')
  redis.call('ZADD', KEYS[2], 0, ARGV[1])
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS: due set, job hash, queue. ARGV: job id, task message, the holder it was read with ('' for none).
# Returns 1 (published), 0 (not due, or changed since it was read), -1 (an entry without a job: dropped).
_PUBLISH = _NOW + """
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not due) or tonumber(due) > now then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return -1
end
local holder = redis.call('HGET', KEYS[2], 'holder') or ''
if holder ~= ARGV[3] then return 0 end
if holder ~= '' then redis.call('HINCRBY', KEYS[2], 'retries', 1) end
redis.call('HDEL', KEYS[2], 'holder')
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Job:
    """One task's work: ``id`` names it (``distill:{run_id}``); task, args and queue publish it again."""

    id: str
    task: str
    args: Sequence[str]
    queue: str
    task_id: str = ""
    # a delivery that finds the job held has it run once more after the holder's run, instead of being dropped:
    # for work that reads what may have changed since the holder read it (a run's steps, a run's verdict)
    again_if_held: bool = False


def job_id(kind: str, key: str) -> str:
    """The id of a job: ``distill:{run_id}``, ``credit:{run_id}``, ``remember:{pending_id}``."""
    return f"{kind}:{key}"


_held_here: set[str] = set()  # tokens of the leases this process holds now
_held_lock = threading.Lock()


@dataclass
class Lease:
    """This process's hold on a job; ``retries`` counts the attempts before this one."""

    client: redis.Redis
    job: Job
    token: str
    seconds: float
    retries: int
    closed: bool = field(default=False)

    def _eval(self, script: str, *args: Any) -> Any:
        return self.client.eval(script, 2, job_key(self.job.id), JOBS_DUE_KEY, self.job.id, self.token, *args)

    def renew(self) -> int:
        """Push the lease's end ``seconds`` from now: 1 renewed, 2 held again after it had lapsed, 0 lost
        (another delivery holds the job now, or it ended)."""
        if self.closed:
            return 0
        return int(self._eval(_RENEW, self.seconds))

    def retry(self, delay: float) -> bool:
        """Let go of the job and make it due in ``delay`` seconds, one retry more. False if it was lost."""
        self._close()
        return bool(self._eval(_RETRY, round(max(delay, 0.0), 3)))

    def finish(self, done: bool = True) -> bool:
        """The job is done (or, ``done`` False, failed for good): forget it — or, when it is done and a delivery
        of a job ``again_if_held`` came meanwhile, make it due at once for one more run. False if another process
        holds it now."""
        self._close()
        finished = int(self._eval(_FINISH, "1" if done else ""))
        if finished == 2:
            logger.info("job %s: delivered again while it ran; it runs once more", self.job.id)
        return bool(finished)

    def _close(self) -> None:
        self.closed = True
        with _held_lock:
            _held_here.discard(self.token)


def new_token() -> str:
    """Who holds a lease: ``host:pid:started_nonce``, ``started`` the process's start time (``_stat``), so that a
    later process given the same pid is not taken for the holder."""
    started = (_stat(os.getpid()) or ("", ""))[1]
    return f"{socket.gethostname()}:{os.getpid()}:{started}_{uuid.uuid4().hex[:8]}"


def _stat(pid: int) -> tuple[str, str] | None:
    """A process's state and start time (clock ticks since boot) from ``/proc/<pid>/stat``; None if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def holder_gone(holder: str) -> bool:
    """True when ``holder`` was a process of this host that no longer runs (or this very process, between tasks)."""
    try:
        host, pid_text, nonce = holder.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False
    if pid == os.getpid():
        with _held_lock:
            return holder not in _held_here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: the holder's, or one given its pid since
        pass
    stat = _stat(pid)
    if stat is None:
        return False
    started = nonce.split("_", 1)[0] if "_" in nonce else ""
    # a killed process its parent has not reaped yet, or another process given the holder's pid since
    return stat[0] in ("Z", "X") or bool(started) and started != stat[1]


def acquire(client: redis.Redis, job: Job, seconds: float, retries: int,
            token: str | None = None) -> tuple[Lease | None, str]:
    """Take ``job`` for ``seconds`` (renewable): ``(lease, "")``, or ``(None, holder)`` when a live process
    holds it. ``retries`` is what the delivery says; the job's own count wins when higher. ``token`` names
    the holder (default: this process, ``new_token()``)."""
    token = token or new_token()
    steal = ""
    for _ in range(2):
        taken, value, *previous = client.eval(_TAKE, 2, job_key(job.id), JOBS_DUE_KEY, job.id, token, seconds,
                                              job.task, json.dumps(list(job.args)), job.queue, job.task_id, retries,
                                              steal, "1" if job.again_if_held else "")
        if int(taken):
            lapsed = redis_text(previous[0]) if previous else ""
            if lapsed and lapsed != steal:  # taken from a holder whose lease lapsed before any keeper sent it again
                logger.warning("job %s: the lease of %s lapsed; taken over (retry %d)", job.id, lapsed, int(value))
            with _held_lock:
                _held_here.add(token)
            return Lease(client, job, token, seconds, int(value)), ""
        holder = redis_text(value)
        if steal or not holder_gone(holder):
            return None, holder
        logger.info("job %s: its holder %s is gone; taking it over", job.id, holder)
        steal = holder
    return None, steal


@contextmanager
def renewing(lease: Lease, every: float) -> Iterator[Lease]:
    """Renew ``lease`` every ``every`` seconds in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        failing = False
        while not stop.wait(every):
            try:
                state = lease.renew()
            except redis.RedisError as e:
                if not failing:
                    logger.warning("job %s: lease not renewed (%s); trying again every %.0fs", lease.job.id,
                                   type(e).__name__, every)
                failing = True
                continue
            failing = False
            if state == 2:
                logger.warning("job %s: its lease had lapsed (Redis or this process stalled); held again",
                               lease.job.id)
            elif state == 0 and not lease.closed:
                logger.warning("job %s: lease lost to another delivery; its results count once", lease.job.id)
                return

    thread = threading.Thread(target=loop, name=f"lease {lease.job.id}", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        stop.set()
        thread.join(every)


def _message(fields: dict[str, str], retries: int) -> str:
    """The task message that sends the job again (same task id, so Flower shows one task retried)."""
    envelope = json.loads(task_message(fields["task"], json.loads(fields["args"]), fields["queue"],
                                       fields.get("task_id") or None))
    envelope["headers"]["retries"] = retries
    return json.dumps(envelope)


def publish_due(client: redis.Redis, limit: int = PUBLISH_BATCH) -> int:
    """Send every due job (a retry whose time has come, a lease that lapsed) to its queue; returns how many."""
    published = 0
    for raw in client.zrangebyscore(JOBS_DUE_KEY, "-inf", redis_time(client), start=0, num=limit):
        job_id = redis_text(raw)  # type: ignore[arg-type]
        fields = {redis_text(k): redis_text(v) for k, v in client.hgetall(job_key(job_id)).items()}
        holder = fields.get("holder", "")
        retries = int(fields.get("retries") or 0) + (1 if holder else 0)
        try:
            message, queue = _message(fields, retries), fields["queue"]
        except (KeyError, ValueError):
            message, queue = "", JOBS_DUE_KEY + ":none"
        done = int(client.eval(_PUBLISH, 3, JOBS_DUE_KEY, job_key(job_id), queue, job_id, message, holder))
        if done == 1:
            published += 1
            if holder:
                logger.warning("job %s sent again: the lease of %s lapsed (retry %d)", job_id, holder, retries)
            elif fields.get("rerun"):
                logger.info("job %s sent again: delivered again while it ran", job_id)
            else:
                logger.info("job %s sent again: retry %d is due", job_id, retries)
        elif done == -1:
            logger.warning("job %s: due without a job record; dropped", job_id)
    return published


class Keeper:
    """A thread publishing due jobs every ``every`` seconds (in a worker's main process)."""

    def __init__(self, settings: Settings, client: redis.Redis | None = None, every: float = KEEP_EVERY) -> None:
        self.settings = settings
        self._client = client
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Keeper:
        if self._client is None:
            self._client = create_redis(self.settings, "service")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lessonbank job keeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.every + 5)
            self._thread = None

    def _loop(self) -> None:
        assert self._client is not None
        failing = False
        while not self._stop.wait(self.every):
            try:
                publish_due(self._client)
            except redis.RedisError as e:
                if not failing:
                    logger.warning("cannot publish due jobs (%s: %s); trying again every %.0fs", type(e).__name__,
                                   e, self.every)
                failing = True
                continue
            if failing:
                logger.info("publishing due jobs again")
            failing = False


class KeeperStep(bootsteps.StartStopStep):
    """Runs a `Keeper` in the worker's main process once its pool is up."""

    requires = {"celery.worker.components:Pool"}

    def create(self, parent: Any) -> Keeper:
        return Keeper(parent.app.settings)
