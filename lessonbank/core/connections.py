"""The one Redis client factory: every process and role gets a redis-py client (hiredis parses its replies)
with the role's timeouts, retries and health checks from here.

| role       | who                                           | connect | read       | retries | health check |
|------------|-----------------------------------------------|---------|------------|---------|--------------|
| recorder   | the step callback's writer (agent process)    | short   | short      | none    | off          |
| agent      | instructions, tools, ``feedback()`` (agent)   | short   | store wait | none    | off          |
| service    | worker tasks, the store owner, sweeper        | 5 s     | 30 s       | redis'  | 30 s         |
| cli        | ``lessonbank`` commands                       | 3 s     | 10 s       | redis'  | off          |

"short" is ``settings.redis_timeout`` (at least 1 s to connect for the agent role); "store wait" is
``settings.store_timeout``: a lessons lookup against a Redis that does not answer gives up within it. In the
agent process's roles these bounds win over the query options of ``LESSONBANK_REDIS_URL``; its other options
(TLS files and versions, ``client_name``, ``protocol``...) are read by redis-py, and one it does not know is a
``ConfigurationError`` at once. An injected client (``redis_client=``) is used as it is, with its own options,
but by the recorder: its writer connects with a copy of the client's options and its own bounds (``bounded_copy``).
A forked child starts with fresh pools (``os.register_at_fork``): no socket of its parent is read or closed.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, ReadOnlyError
from redis.retry import Retry

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings

logger = logging.getLogger(__name__)

Role = Literal["recorder", "agent", "service", "cli"]

# Commands Redis refuses while it is full (``maxmemory`` with ``noeviction``) or a read-only replica: nothing is
# wrong with the command, it is worth sending again once memory is freed or the primary is back.
WRITES_REFUSED: tuple[type[redis.RedisError], ...] = (OutOfMemoryError, ReadOnlyError)
REDIS_AWAY: tuple[type[redis.RedisError], ...] = (redis.ConnectionError, redis.TimeoutError)

_pools: weakref.WeakSet[redis.ConnectionPool] = weakref.WeakSet()


def _options(settings: Settings, role: Role) -> dict[str, object]:
    """The role's connection options (see the table above)."""
    if role == "recorder":
        return {"socket_timeout": settings.redis_timeout, "socket_connect_timeout": settings.redis_timeout,
                "retry": Retry(NoBackoff(), 0), "health_check_interval": 0}
    if role == "agent":
        return {"socket_timeout": settings.store_timeout,
                "socket_connect_timeout": min(max(settings.redis_timeout, 1.0), settings.store_timeout),
                "retry": Retry(NoBackoff(), 0), "health_check_interval": 0}
    if role == "service":
        return {"socket_timeout": 30.0, "socket_connect_timeout": 5.0, "health_check_interval": 30}
    return {"socket_timeout": 10.0, "socket_connect_timeout": 3.0}


def create_redis(settings: Settings, role: Role) -> redis.Redis:
    """A redis-py client for ``role`` (see the table above). No I/O until the first command; raises
    ConfigurationError for a URL redis-py cannot use."""
    options = _options(settings, role)
    try:
        client = redis.Redis.from_url(settings.redis_url, **options)  # type: ignore[arg-type]
        pool = client.connection_pool
        if role in ("recorder", "agent"):  # the bounds of the agent process win over the URL's own
            pool.connection_kwargs.update(options)
        pool.connection_class(**pool.connection_kwargs)  # an option it does not know fails here, not in a thread
    except (ValueError, TypeError, redis.RedisError) as e:
        raise ConfigurationError(
            f"LESSONBANK_REDIS_URL cannot be used ({e}); expected redis://[user:password@]host:port/db"
        ) from e
    _pools.add(pool)
    return client


# Options of an injected client's pool that its pool computes for itself: a pool of ours computes its own.
_POOL_OWNED = ("maint_notifications", "oss_cluster_maint", "orig_")


def bounded_copy(client: redis.Redis, settings: Settings, role: Literal["recorder", "agent"]) -> redis.Redis:
    """A client of ``role``'s own to the Redis of an injected ``client``: its connection class and every option
    (address, credentials or credential provider, TLS, database, protocol) with the role's timeouts and no
    retry, so that the role's bounds hold whatever the injected client does; the client itself is left as it
    is. No I/O. A client whose pool finds its server itself (Sentinel's) is used as it is, its own bounds then
    holding. Raises ConfigurationError naming ``redis_client`` for a client without a redis-py pool."""
    try:
        pool = client.connection_pool
        options = {name: value for name, value in pool.connection_kwargs.items() if not name.startswith(_POOL_OWNED)}
    except AttributeError as e:
        raise ConfigurationError(f"redis_client must be a redis.Redis (with a connection pool), not a "
                                 f"{type(client).__name__}: {e}") from e
    if not isinstance(pool, redis.ConnectionPool) or hasattr(pool, "service_name"):
        logger.warning("redis_client has a pool of its own kind (%s): the recorder uses it as it is, with its "
                       "timeouts and retries", type(pool).__name__)
        return client
    options.update(_options(settings, role), retry_on_error=[])
    try:
        copy = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **options))
        pool.connection_class(**copy.connection_pool.connection_kwargs)
    except (TypeError, ValueError, redis.RedisError) as e:
        raise ConfigurationError(f"redis_client: its options cannot be used for a connection of the recorder's "
                                 f"own ({e})") from e
    copy.auto_close_connection_pool = True
    _pools.add(copy.connection_pool)
    return copy


POLL = 0.005  # seconds between two looks for a reply while ``on_wait`` is to be called


def exchange(client: redis.Redis, commands: Sequence[Sequence[Any]], timeout: float,
             on_wait: Callable[[], None] | None = None, wait_from: float = 0.0) -> list[Any]:
    """Send ``commands`` in one write on one connection of ``client``'s pool and read one reply per command, as
    Redis sends them (an error reply in its place, as a ``ResponseError``). The replies are waited for at most
    ``timeout`` seconds, whatever the client's socket timeout; while none came, ``on_wait()`` is called every
    ``POLL`` seconds from the unix time ``wait_from`` on. redis-py's pool, parser and reconnection are used; only
    the wait is bounded here. Raises redis errors for the connection (closed then, never reused half-read)."""
    pool = client.connection_pool
    try:
        connection = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name
        connection = pool.get_connection("PIPELINE")
    try:
        connection.send_packed_command(connection.pack_commands(commands))
        deadline = time.monotonic() + timeout
        replies: list[Any] = []
        for _ in commands:
            _await_reply(connection, deadline, timeout, on_wait if not replies else None, wait_from)
            try:
                replies.append(connection.read_response())
            except redis.ResponseError as e:
                replies.append(e)
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
    return replies


def _await_reply(connection: Any, deadline: float, timeout: float, on_wait: Callable[[], None] | None,
                 wait_from: float) -> None:
    """Wait until ``connection`` has a reply to read (or data, or an error), calling ``on_wait`` meanwhile; raises
    redis.TimeoutError at ``deadline`` (monotonic)."""
    while True:
        left = deadline - time.monotonic()
        if connection.can_read(timeout=max(left if on_wait is None else min(left, POLL), 0.0)):
            return
        if time.monotonic() >= deadline:
            raise redis.TimeoutError(f"no reply from Redis in {timeout:g}s")
        if on_wait is not None and time.time() >= wait_from:
            on_wait()


def checked(replies: list[Any]) -> list[Any]:
    """``replies`` as they are, or the first error reply among them raised."""
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise reply
    return replies


def address(client: Any) -> str:
    """Where ``client`` connects (no credentials): the same text for every client of one Redis database."""
    try:
        options = client.connection_pool.connection_kwargs
    except AttributeError:
        return repr(client)
    return repr([options.get(name) for name in ("host", "port", "path", "db")])


def _fresh_pools_in_child() -> None:
    """A forked child: the pools made here forget the parent's connections (a thread of the parent may have held
    one, or a pool's lock, when it forked); each connects afresh on its next command."""
    for pool in list(_pools):
        try:
            pool.reset()
        except Exception:  # redis-py's own code: a pool that cannot reset still notices the fork on its next use
            pass


os.register_at_fork(after_in_child=_fresh_pools_in_child)


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
    (no connection, or no answer in time), refused writes (full, or a read-only replica), or failed the command."""
    if isinstance(error, redis.AuthenticationError | redis.exceptions.NoPermissionError):
        return "Redis refused the credentials or the command (check LESSONBANK_REDIS_URL)"
    if isinstance(error, REDIS_AWAY):
        return "Redis unreachable"
    if isinstance(error, WRITES_REFUSED):
        return "Redis refuses writes (out of memory, or a read-only replica)"
    return "Redis failed the command"


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

    def __init__(self, client: Any, timeout: float | None = None) -> None:
        self.client = client
        self.timeout = timeout  # the longest wait for ``TIME`` (None: the client's socket timeout)
        self._offset: float | None = None
        self._measured = 0.0

    def now(self) -> float:
        """Redis's time now, in seconds since the epoch."""
        if self._offset is None or time.monotonic() - self._measured > self.REFRESH:
            before = time.time()
            if self.timeout is None:
                now = redis_time(self.client)
            else:
                seconds, micros = checked(exchange(self.client, [("TIME",)], self.timeout))[0]
                now = float(seconds) + float(micros) / 1_000_000
            after = time.time()
            self._offset = now - (before + after) / 2
            self._measured = time.monotonic()
        return time.time() + self._offset
