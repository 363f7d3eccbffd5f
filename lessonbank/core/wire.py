"""The agent process's Redis connection: one socket, commands packed and replies parsed by ``hiredis``.

An agent with ``lessonbank.remember`` sends few commands (the recorder's pipelined scripts, the store's
requests and replies, a few counters) and must stay light: redis-py's package imports its asyncio, cluster,
sentinel and keyspace-notification clients whatever is used (7 MB of an agent's memory with redis-py 8).
``hiredis`` (Redis's own C protocol library, which redis-py also uses when installed) packs the commands and
parses the replies; this module adds only the socket: connecting (TCP, TLS, a unix socket), ``AUTH`` and
``SELECT``, timeouts, and reconnecting after an error or a ``fork()``. Workers and the CLI keep redis-py.

``Wire`` speaks the few redis-py methods its callers use (``execute_command``, ``pipeline``, ``get``,
``blpop``...), returning what redis-py returns with its default options (bytes, ints, None), so the code
that reaches the store over Redis takes either. One ``Wire`` is shared safely between threads: each
exchange of commands and replies holds its lock.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

Arg = bytes | str | int | float
CHUNK = 65536


class WireError(Exception):
    """Base class of what a ``Wire`` raises."""


class WireConnectionError(WireError):
    """No connection, a closed one, or a reply that does not parse; the socket is dropped (the next
    command connects again)."""


class WireTimeoutError(WireConnectionError):
    """Redis did not answer (or accept the connection) in time."""


class ReplyError(WireError):
    """Redis answered with an error (``ERR ...``, ``NOSCRIPT ...``, ``WRONGPASS ...``): its code is the first word."""

    @property
    def code(self) -> str:
        return str(self).split(" ", 1)[0]


def encode(arg: Arg) -> bytes:
    """An argument as redis-py sends it: bytes as they are, text as UTF-8, numbers in decimal (floats by repr)."""
    if isinstance(arg, bytes | bytearray | memoryview):
        return bytes(arg)
    if isinstance(arg, str):
        return arg.encode("utf-8")
    if isinstance(arg, bool):
        raise WireError("a bool is not a Redis argument; send 0/1 or text")
    if isinstance(arg, int | float):
        return repr(arg).encode("ascii")
    raise WireError(f"a {type(arg).__name__} is not a Redis argument")


def checked(replies: list[Any]) -> list[Any]:
    """``replies`` as they are, or the first error reply among them raised."""
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise reply
    return replies


def pack(commands: Iterable[Sequence[Arg]]) -> bytes:
    """``commands`` in Redis's protocol, ready for one write."""
    # hiredis's stub types the command as a 1-tuple; it takes any length
    return b"".join(hiredis.pack_command(tuple(encode(a) for a in command))  # type: ignore[arg-type]
                    for command in commands)


class Wire:
    """One connection to one Redis; connects on the first command. See the module docstring."""

    def __init__(
        self,
        host: str = "localhost",
        port: int = 6379,
        *,
        path: str | None = None,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        ssl_context: Any = None,
        server_hostname: str | None = None,
        socket_timeout: float | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        self.host, self.port, self.path, self.db = host, port, path, db
        self.username, self.password = username, password
        self.ssl_context, self.server_hostname = ssl_context, server_hostname
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout if connect_timeout is not None else socket_timeout
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._buffer = bytearray(CHUNK)  # what each read of a reply goes into
        self._pid = os.getpid()
        self._lock = threading.Lock()

    # -- building one -------------------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, socket_timeout: float | None = None,
                 connect_timeout: float | None = None) -> Wire:
        """A ``Wire`` for a ``redis://``, ``rediss://`` or ``unix://`` URL, read as redis-py reads it (user and
        password, ``/db`` or ``?db=``; for TLS ``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_check_hostname``,
        ``ssl_certfile`` and ``ssl_keyfile``). Other query options (redis-py's socket and pool settings) are not
        read: the role's timeouts apply. Raises ValueError for anything else."""
        parts = urlsplit(url)
        query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password is not None else query.get("password")
        db_text = query.get("db") or (parts.path.lstrip("/") if parts.scheme != "unix" else "") or "0"
        try:
            db = int(db_text)
        except ValueError:
            raise ValueError(f"the database {db_text!r} is not a number") from None
        if parts.scheme == "unix":
            if not parts.path:
                raise ValueError("a unix:// URL needs the socket's path")
            return cls(path=unquote(parts.path), db=db, username=username, password=password,
                       socket_timeout=socket_timeout, connect_timeout=connect_timeout)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError("Redis URL must specify one of the following schemes (redis://, rediss://, unix://)")
        host, port = parts.hostname or "localhost", parts.port or 6379  # .port raises ValueError when out of range
        context = None
        if parts.scheme == "rediss":
            context = tls_context(query.get("ssl_cert_reqs", "required"), query.get("ssl_ca_certs"),
                                  query.get("ssl_check_hostname", "true").lower() not in ("false", "0", "no"),
                                  query.get("ssl_certfile"), query.get("ssl_keyfile"))
        return cls(host, port, db=db, username=username, password=password, ssl_context=context,
                   server_hostname=host if context is not None else None, socket_timeout=socket_timeout,
                   connect_timeout=connect_timeout)

    @classmethod
    def from_client(cls, client: Any, socket_timeout: float | None = None,
                    connect_timeout: float | None = None) -> Wire:
        """A ``Wire`` to the Redis of a redis-py client (its address, credentials, database and TLS options),
        with these timeouts; the client is not touched. Raises ValueError when its options cannot be read."""
        try:
            pool = client.connection_pool
            options = dict(pool.connection_kwargs)
            ssl = any(k.__name__ == "SSLConnection" for k in type.mro(pool.connection_class))
        except (AttributeError, TypeError) as e:
            raise ValueError(f"not a redis-py client with a connection pool ({type(client).__name__})") from e
        username, password = options.get("username"), options.get("password")
        provider = options.get("credential_provider")
        if provider is not None:
            credentials = tuple(provider.get_credentials())
            username, password = credentials if len(credentials) == 2 else (None, credentials[0])
        host, port = str(options.get("host") or "localhost"), int(options.get("port") or 6379)
        path = str(options["path"]) if options.get("path") else None
        context = None
        if ssl and path is None:
            reqs = options.get("ssl_cert_reqs", "required")
            context = tls_context(reqs if isinstance(reqs, str) else {0: "none", 1: "optional"}.get(reqs, "required"),
                                  options.get("ssl_ca_certs"), bool(options.get("ssl_check_hostname", True)),
                                  options.get("ssl_certfile"), options.get("ssl_keyfile"))
        return cls(host, port, path=path, db=int(options.get("db") or 0), username=username, password=password,
                   ssl_context=context, server_hostname=host if context is not None else None,
                   socket_timeout=socket_timeout, connect_timeout=connect_timeout)

    @property
    def address(self) -> str:
        """Where it connects (no credentials): the same text for every ``Wire`` to one Redis database."""
        if self.path:
            return repr([None, None, self.path, self.db])
        return repr([self.host, self.port, None, self.db])

    # -- the exchange ---------------------------------------------------------------------------------------

    def exchange(
        self,
        commands: Sequence[Sequence[Arg]],
        *,
        timeout: float | None = None,
        on_wait: Callable[[], None] | None = None,
        wait_from: float = 0.0,
        poll: float = 0.005,
    ) -> list[Any]:
        """Send ``commands`` in one write and read one reply per command (an error reply as a ``ReplyError``
        in its place). Connecting, when needed, takes at most the connect timeout; the whole exchange at most
        ``timeout`` (default: the socket timeout) seconds from its start. While it waits for the first reply,
        ``on_wait()`` is called every ``poll`` seconds once the unix time is ``wait_from``.
        Raises ``WireConnectionError``/``WireTimeoutError`` and drops the connection on any failure."""
        if os.getpid() != self._pid:  # a forked child: a lock of its own, and a connection of its own (closing
            self._pid, self._lock = os.getpid(), threading.Lock()  # its copy of the socket leaves the parent's open)
            self._drop()
        payload = pack(commands)
        with self._lock:
            limit = timeout if timeout is not None else self.socket_timeout
            deadline = None if limit is None else time.monotonic() + limit
            try:
                if self._sock is not None and self._stale():
                    self._drop()  # closed by Redis (a restart, an idle timeout): connect afresh, as redis-py does
                if self._sock is None:
                    self._connect()
                return self._send_and_read(payload, len(commands), deadline, on_wait, wait_from, poll)
            except BaseException:
                self._drop()
                raise

    def execute_command(self, *args: Arg) -> Any:
        """One command; its reply (raises ``ReplyError`` for an error reply)."""
        return checked(self.exchange([args]))[0]

    def pipeline(self, transaction: bool = False) -> WirePipeline:
        return WirePipeline(self, transaction)

    def get(self, key: Arg) -> Any:
        return self.execute_command("GET", key)

    def hget(self, key: Arg, field: Arg) -> Any:
        return self.execute_command("HGET", key, field)

    def lrem(self, key: Arg, count: int, value: Arg) -> Any:
        return self.execute_command("LREM", key, count, value)

    def blpop(self, keys: Iterable[Arg], timeout: float = 0) -> Any:
        """``(key, value)`` or None after ``timeout`` seconds (the socket timeout must be longer)."""
        reply = self.execute_command("BLPOP", *keys, timeout)
        return None if reply is None else tuple(reply)

    def time(self) -> tuple[int, int]:
        seconds, micros = self.execute_command("TIME")
        return int(seconds), int(micros)

    def script_load(self, body: str) -> Any:
        return self.execute_command("SCRIPT", "LOAD", body)

    def close(self) -> None:
        """Close the connection (a later command connects again)."""
        with self._lock:
            self._drop()

    # -- the socket ----------------------------------------------------------------------------------------

    def _connect(self) -> None:
        try:
            if self.path:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.connect_timeout)
                try:
                    sock.connect(self.path)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.ssl_context is not None:
                    sock = self.ssl_context.wrap_socket(sock, server_hostname=self.server_hostname)
        except TimeoutError as e:
            raise WireTimeoutError(f"Timeout connecting to {self._where()}") from e
        except OSError as e:
            raise WireConnectionError(f"Error connecting to {self._where()}: {e}") from e
        self._sock = sock
        self._reader = hiredis.Reader(replyError=ReplyError, protocolError=WireConnectionError)
        hello: list[tuple[Arg, ...]] = []
        if self.password is not None:
            hello.append(("AUTH", self.username, self.password) if self.username else ("AUTH", self.password))
        if self.db:
            hello.append(("SELECT", self.db))
        if hello:
            deadline = None if self.connect_timeout is None else time.monotonic() + self.connect_timeout
            payload = pack(hello)
            checked(self._send_and_read(payload, len(hello), deadline, None, 0.0, 0.0))

    def _stale(self) -> bool:
        """True when the idle connection has something to read: Redis closed it, or sent what nobody asked for."""
        sock = self._sock
        assert sock is not None
        if not select.select([sock], [], [], 0)[0]:
            return False
        sock.setblocking(False)
        try:
            sock.recv(CHUNK)  # b"": closed; anything else is out of step with the replies expected
        except BlockingIOError:
            return False
        except OSError as e:  # with TLS, a record that is no data (a session ticket) is no reason to reconnect
            return type(e).__name__ != "SSLWantReadError"
        return True

    def _send_and_read(self, payload: bytes, count: int, deadline: float | None,
                       on_wait: Callable[[], None] | None, wait_from: float, poll: float) -> list[Any]:
        sock, reader = self._sock, self._reader
        assert sock is not None and reader is not None
        try:
            sock.settimeout(self._left(deadline))
            sock.sendall(payload)
            replies: list[Any] = []
            buffer = self._buffer
            while len(replies) < count:
                reply = reader.gets()
                if reply is not False:
                    replies.append(reply)
                    continue
                waiting = on_wait is not None and not replies
                left = self._left(deadline)
                sock.settimeout(min(poll, left) if waiting and left is not None else poll if waiting else left)
                try:
                    read = sock.recv_into(buffer)
                except TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
                    if waiting and on_wait is not None and time.time() >= wait_from:
                        on_wait()
                    continue
                if not read:
                    raise WireConnectionError(f"Connection closed by {self._where()}")
                reader.feed(buffer, 0, read)
            return replies
        except TimeoutError as e:
            raise WireTimeoutError(f"Timeout reading from {self._where()}") from e
        except OSError as e:
            raise WireConnectionError(f"Error talking to {self._where()}: {e}") from e

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def _drop(self) -> None:
        sock, self._sock, self._reader = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _where(self) -> str:
        return f"unix socket {self.path}" if self.path else f"{self.host}:{self.port}"


class WirePipeline:
    """Commands queued and sent in one exchange by ``execute()`` (within ``MULTI``/``EXEC`` for a transaction);
    the methods redis-py's pipeline has that lessonbank's agent side uses."""

    def __init__(self, wire: Wire, transaction: bool) -> None:
        self.wire, self.transaction = wire, transaction
        self.commands: list[tuple[Arg, ...]] = []

    def execute_command(self, *args: Arg) -> WirePipeline:
        self.commands.append(args)
        return self

    def set(self, key: Arg, value: Arg, ex: int | None = None) -> WirePipeline:
        return self.execute_command("SET", key, value, *(("EX", ex) if ex is not None else ()))

    def lpush(self, key: Arg, *values: Arg) -> WirePipeline:
        return self.execute_command("LPUSH", key, *values)

    def rpush(self, key: Arg, *values: Arg) -> WirePipeline:
        return self.execute_command("RPUSH", key, *values)

    def hincrby(self, key: Arg, field: Arg, amount: int = 1) -> WirePipeline:
        return self.execute_command("HINCRBY", key, field, amount)

    def blpop(self, keys: Iterable[Arg], timeout: float = 0) -> WirePipeline:
        return self.execute_command("BLPOP", *keys, timeout)

    def execute(self) -> list[Any]:
        """The replies, in order (BLPOP's as a tuple or None); raises the first error reply."""
        commands, self.commands = self.commands, []
        if self.transaction:
            done = checked(self.wire.exchange([("MULTI",), *commands, ("EXEC",)]))[-1]
            replies = checked(done if isinstance(done, list) else [])
        else:
            replies = checked(self.wire.exchange(commands))
        return [tuple(r) if c[0] == "BLPOP" and r is not None else r for c, r in zip(commands, replies, strict=False)]


def tls_context(cert_reqs: str, ca_certs: str | None, check_hostname: bool, certfile: str | None = None,
                keyfile: str | None = None) -> Any:
    """A client TLS context as redis-py builds one from its ``ssl_*`` options."""
    import ssl

    modes = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
    if cert_reqs.lower() not in modes:
        raise ValueError(f"ssl_cert_reqs must be one of none, optional, required (not {cert_reqs!r})")
    try:
        context = ssl.create_default_context(cafile=ca_certs)
        mode = modes[cert_reqs.lower()]
        context.check_hostname = check_hostname and mode != ssl.CERT_NONE
        context.verify_mode = mode
        if certfile:
            context.load_cert_chain(certfile, keyfile)
    except OSError as e:  # a file that is not there or holds no certificate (ssl.SSLError is an OSError)
        raise ValueError(f"the TLS files {[f for f in (ca_certs, certfile, keyfile) if f]} cannot be read: {e}") from e
    return context
