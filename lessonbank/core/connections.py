"""The one Redis client factory: every process and role gets its timeouts and health checks from here.

| role       | who                                   | connect | read       | retries | health check |
|------------|---------------------------------------|---------|------------|---------|--------------|
| recorder   | the step callback (agent process)     | short   | short      | none    | off          |
| agent      | instructions, tools (agent process)   | short   | store wait | none    | off          |
| service    | worker tasks, the store owner, sweeper| 5 s     | 30 s       | redis'  | 30 s         |
| cli        | ``lessonbank`` commands, ``feedback()``| 3 s     | 10 s       | redis'  | off          |

"short" is ``settings.redis_timeout``; "store wait" is ``settings.store_timeout`` plus a margin, so a
blocking wait for the store owner's reply is not cut by the socket's own timeout.

In the agent process (the recorder, instructions and tools, ``feedback()``) a role gets a ``Wire``
(``create_wire``: one socket, hiredis, none of redis-py's package imported; no retries, and an idle connection
Redis closed is found before a command is sent, as redis-py's pool does); elsewhere a redis-py client
(``create_redis``). ``redis_errors()`` is what either raises.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.core.wire import ReplyError, Wire, WireConnectionError, WireError

if TYPE_CHECKING:
    import redis

Role = Literal["recorder", "agent", "service", "cli"]

BLOCKING_MARGIN = 5.0


def _timeouts(settings: Settings, role: Role) -> tuple[float, float]:
    """(read, connect) timeouts of ``role``, in seconds."""
    if role == "recorder":
        return settings.redis_timeout, settings.redis_timeout
    if role == "agent":
        return settings.store_timeout + BLOCKING_MARGIN, max(settings.redis_timeout, 1.0)
    if role == "service":
        return 30.0, 5.0
    return 10.0, 3.0


def _options(settings: Settings, role: Role) -> dict[str, object]:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    read, connect = _timeouts(settings, role)
    options: dict[str, object] = {"socket_timeout": read, "socket_connect_timeout": connect}
    if role in ("recorder", "agent"):
        options.update(retry=Retry(NoBackoff(), 0), health_check_interval=0)
    elif role == "service":
        options.update(health_check_interval=30)
    return options


def create_redis(settings: Settings, role: Role) -> redis.Redis:
    """A redis-py client for ``role`` (see the table above). No I/O until the first command."""
    import redis

    try:
        return redis.Redis.from_url(settings.redis_url, **_options(settings, role))  # type: ignore[arg-type]
    except ValueError as e:
        raise ConfigurationError(
            f"LESSONBANK_REDIS_URL is not a Redis URL ({e}); expected redis://[:password@]host:port/db"
        ) from e


def create_wire(settings: Settings, role: Literal["recorder", "agent", "cli"]) -> Wire:
    """The agent process's connection for ``role`` (see the table above). No I/O until the first command."""
    timeout, connect = _timeouts(settings, role)
    try:
        return Wire.from_url(settings.redis_url, socket_timeout=timeout, connect_timeout=connect)
    except ValueError as e:
        raise ConfigurationError(
            f"LESSONBANK_REDIS_URL cannot be used ({e}); expected redis://[:password@]host:port/db"
        ) from e


def wire_of(client: Any, settings: Settings, role: Literal["recorder", "agent"]) -> Wire:
    """A ``Wire`` with ``role``'s timeouts to the Redis of an injected ``client`` (a ``Wire``, or a redis-py
    client whose options are copied; the client itself is left as it was)."""
    if isinstance(client, Wire):
        return client
    timeout, connect = _timeouts(settings, role)
    try:
        return Wire.from_client(client, socket_timeout=timeout, connect_timeout=connect)
    except ValueError as e:
        raise ConfigurationError(f"redis_client: {e}; pass a redis.Redis, or leave it out and set "
                                 "LESSONBANK_REDIS_URL") from e


def redis_errors() -> tuple[type[Exception], ...]:
    """What a Redis call may raise here: a ``Wire``'s errors, and redis-py's once this process has imported it."""
    loaded = sys.modules.get("redis")
    base = getattr(loaded, "RedisError", None) if loaded is not None else None
    return (WireError,) if base is None else (WireError, base)


def masked_url(url: str) -> str:
    """``url`` with its password replaced by ``**`` (as Celery prints broker URLs); its host and port as
    written (an IPv6 address keeps its brackets, a port out of range stays as it is)."""
    try:
        parts = urlsplit(url)
        password, user = parts.password, parts.username or ""
    except ValueError:
        return "<unparseable URL>"
    if password is None and not user:
        return url
    host = parts.netloc.rpartition("@")[2]
    credentials = f"{user}:**" if password is not None else user
    return urlunsplit((parts.scheme, f"{credentials}@{host}", parts.path, parts.query, parts.fragment))


def redis_trouble(error: Exception) -> str:
    """What went wrong with Redis, in a few words for an error message: refused the credentials, unreachable
    (no connection, or no answer in time), or failed the command (out of memory, a read-only replica...)."""
    names = {cls.__name__ for cls in type(error).mro()}
    refused = isinstance(error, ReplyError) and error.code in ("WRONGPASS", "NOAUTH", "NOPERM")
    if refused or names & {"AuthenticationError", "NoPermissionError", "AuthenticationWrongNumberOfArgsError"}:
        return "Redis refused the credentials or the command (check LESSONBANK_REDIS_URL)"
    if isinstance(error, WireConnectionError) or (names & {"ConnectionError", "TimeoutError"} and
                                                  not isinstance(error, WireError)):
        return "Redis unreachable"
    return "Redis failed the command"


def eviction_risk(client: redis.Redis) -> str:
    """One line when this Redis may evict lessonbank's keys under memory pressure, else "" (no ``maxmemory``,
    ``noeviction``, or ``CONFIG`` not allowed, as on some managed Redis). With ``allkeys-*`` it may drop the
    queue, a run in progress or its records; with ``volatile-*`` the keys that expire anyway: the steps a retry
    or ``lessons show`` reads, heartbeats, the store's replies. ``noeviction`` refuses writes instead, which the
    recorder spools and the worker retries."""
    try:
        found = client.config_get("maxmemory*")
    except redis_errors():
        return ""
    config = {redis_text(k): redis_text(v) for k, v in found.items()}
    policy, limit = config.get("maxmemory-policy", ""), config.get("maxmemory", "0")
    if limit in ("", "0") or policy in ("", "noeviction"):
        return ""
    what = ("any key: the queue, runs in progress and their records" if policy.startswith("allkeys")
            else "keys that expire: the steps a retry reads, heartbeats, the store's replies")
    return (f"Redis may evict {what} when it reaches maxmemory {limit} bytes (maxmemory-policy {policy}); "
            f"set maxmemory-policy noeviction for lessonbank's Redis")


def redis_text(value: bytes | str | None) -> str:
    """A value read from Redis as text (bytes decoded as UTF-8, anything undecodable replaced; None as "")."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def redis_time(client: Any) -> float:
    """Redis's clock (``TIME``) now, in seconds since the epoch: the clock every machine's deadlines share."""
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1_000_000


class RedisClock:
    """Redis's clock (``TIME``), read through this process's: the clock a deadline that one machine writes
    and another checks is written in (an agent's machine and the worker's may disagree by seconds; a
    deadline in either one's own clock would then have passed before it was sent, or never pass).

    The offset to Redis's clock is measured with one ``TIME`` round trip, again every ``REFRESH`` seconds;
    ``now()`` raises what the client raises when it cannot measure it.
    """

    REFRESH = 60.0

    def __init__(self, client: Any) -> None:
        self.client = client
        self._offset: float | None = None
        self._measured = 0.0

    def now(self) -> float:
        """Redis's time now, in seconds since the epoch."""
        if self._offset is None or time.monotonic() - self._measured > self.REFRESH:
            before = time.time()
            now = redis_time(self.client)
            after = time.time()
            self._offset = now - (before + after) / 2
            self._measured = time.monotonic()
        return time.time() + self._offset
