"""The agent process's Redis connection (``lessonbank.core.wire``) against a real redis-server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from redis.connection import parse_url

from lessonbank.core.connections import create_wire, redis_trouble, wire_of
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.core.wire import ReplyError, Wire, WireConnectionError, WireError, WireTimeoutError
from tests.fixtures.recorded import queued_tasks, run_hash, run_records
from tests.fixtures.redis_server import free_port


def test_commands_and_replies_round_trip_as_redis_py_returns_them(redis_url, redis_client):
    wire = Wire.from_url(redis_url, socket_timeout=2.0)
    every_byte = bytes(range(256)) * 4
    forged = "x\r\n*3\r\n$3\r\nDEL\r\n$1\r\nk\r\n"  # protocol text inside a value stays data
    replies = wire.exchange([("SET", "b", every_byte), ("SET", "f", forged), ("RPUSH", "l", 1, 2.5, "é"),
                             ("LRANGE", "l", 0, -1), ("GET", "missing"), ("HINCRBY", "h", "n", 3),
                             ("INCR", "b"), ("GET", "b")])
    assert replies[:6] == [b"OK", b"OK", 3, [b"1", b"2.5", "é".encode()], None, 3]
    assert isinstance(replies[6], ReplyError) and replies[6].code == "ERR"  # in its place; the rest still read
    assert replies[7] == every_byte == redis_client.get("b")
    assert redis_client.get("f") == forged.encode() and redis_client.exists("k") == 0
    big = os.urandom(3_000_000)  # more than many socket reads
    wire.execute_command("SET", "big", big)
    assert wire.get("big") == big
    with pytest.raises(ReplyError) as error:
        wire.execute_command("NOSUCHCOMMAND")
    assert error.value.code == "ERR"
    assert wire.blpop(["l"], timeout=1) == (b"l", b"1") and wire.blpop(["empty"], timeout=0.1) is None
    seconds, micros = wire.time()
    assert abs(seconds - time.time()) < 5 and 0 <= micros < 1_000_000
    with pytest.raises(WireError):
        wire.execute_command("SET", "k", True)  # as redis-py, a bool is refused rather than guessed


def test_a_transaction_pipeline_returns_exec_replies_and_raises_an_error_inside(redis_url, redis_client):
    wire = Wire.from_url(redis_url, socket_timeout=2.0)
    assert wire.pipeline(transaction=True).set("k", "v", ex=60).lpush("q", "m").execute() == [b"OK", 1]
    assert 0 < redis_client.ttl("k") <= 60 and redis_client.lrange("q", 0, -1) == [b"m"]
    with pytest.raises(ReplyError):  # a command that fails inside EXEC
        wire.pipeline(transaction=True).lpush("k", "x").execute()
    with pytest.raises(ReplyError):  # a command refused while queued: EXECABORT, nothing done
        wire.pipeline(transaction=True).lpush("q", "y").execute_command("NOSUCHCOMMAND").execute()
    assert redis_client.lrange("q", 0, -1) == [b"m"]
    pipe = wire.pipeline().rpush("r", "a").blpop(["r"], timeout=1)
    assert pipe.execute() == [1, (b"r", b"a")]


@pytest.mark.parametrize("url", [
    "redis://localhost", "redis://h:6380/3", "redis://:p%40ss@h/2", "redis://user:pw@h:1234/0",
    "redis://h/0?db=5", "rediss://h:6390/1", "unix:///tmp/r.sock?db=2", "unix://u:pw@/var/run/redis.sock",
    "redis://[::1]:6379/4",
])
def test_a_url_is_read_as_redis_py_reads_it(url):
    wire, theirs = Wire.from_url(url), parse_url(url)
    if wire.path:
        assert (wire.path, wire.db) == (theirs["path"], int(theirs.get("db", 0)))
    else:
        assert (wire.host, wire.port, wire.db) == (theirs.get("host", "localhost"), theirs.get("port", 6379),
                                                   int(theirs.get("db", 0)))
        assert (wire.ssl_context is not None) == (theirs.get("connection_class") is redis.SSLConnection)
    assert (wire.username, wire.password) == (theirs.get("username"), theirs.get("password"))


@pytest.mark.parametrize("url", ["localhost:6379", "http://h/0", "redis://h/zero", "redis://h:99999/0", "unix://",
                                 "rediss://h/0?ssl_cert_reqs=sometimes", "rediss://h/0?ssl_ca_certs=/nonexistent/ca.pem"])
def test_a_url_that_is_no_redis_url_is_a_configuration_error_naming_the_setting(url):
    with pytest.raises(ConfigurationError, match="LESSONBANK_REDIS_URL"):
        create_wire(Settings(_env_file=None, redis_url=url), "agent")


def test_credentials_and_database_from_the_url_or_an_injected_client(own_redis, tmp_path):
    admin = own_redis.client()
    admin.execute_command("ACL", "SETUSER", "agent", "on", ">s3cret", "~*", "+@all")
    admin.config_set("requirepass", "rootpw")
    url = f"redis://agent:s3cret@127.0.0.1:{own_redis.port}/3"
    wire = Wire.from_url(url, socket_timeout=2.0)
    wire.execute_command("SET", "who", "agent")
    root = redis.Redis(port=own_redis.port, password="rootpw", db=3)
    assert root.get("who") == b"agent"
    injected = redis.Redis(port=own_redis.port, password="rootpw", db=3, socket_timeout=9.0)
    copied = wire_of(injected, Settings(_env_file=None, redis_timeout=0.25), "recorder")
    assert copied.get("who") == b"agent" and copied.socket_timeout == 0.25
    assert injected.connection_pool.connection_kwargs["socket_timeout"] == 9.0  # the user's client is as it was
    with pytest.raises(ReplyError) as refused:
        Wire.from_url(f"redis://agent:wrong@127.0.0.1:{own_redis.port}/0", socket_timeout=2.0).get("who")
    assert "credentials" in redis_trouble(refused.value) and "wrong" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="redis_client"):
        wire_of(object(), Settings(_env_file=None), "agent")
    from lessonbank.recorder import StepRecorder

    with pytest.raises(ConfigurationError, match="redis_client"):  # at once, not in the writer thread
        StepRecorder(bank="b", settings=Settings(_env_file=None, data_dir=tmp_path), redis_client=object())


def test_a_unix_socket(tmp_path):
    binary = shutil.which("redis-server")
    assert binary is not None
    path = tmp_path / "redis.sock"
    server = subprocess.Popen([binary, "--port", "0", "--unixsocket", str(path), "--save", "", "--dir",
                               str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        wire = Wire.from_url(f"unix://{path}?db=1", socket_timeout=2.0)
        wire.execute_command("SET", "k", "v")
        assert redis.Redis(unix_socket_path=str(path), db=1).get("k") == b"v"
        assert wire.address == repr([None, None, str(path), 1])
    finally:
        server.terminate()
        server.wait(10)


def test_refused_hung_and_restarted_redis(own_redis):
    refused = Wire("127.0.0.1", free_port(), socket_timeout=0.5)
    with pytest.raises(WireConnectionError) as error:
        refused.get("k")
    assert redis_trouble(error.value) == "Redis unreachable"

    wire = Wire.from_url(own_redis.url, socket_timeout=0.3)
    wire.execute_command("SET", "k", "1")
    own_redis.freeze()
    started = time.monotonic()
    try:
        with pytest.raises(WireTimeoutError):
            wire.get("k")
    finally:
        own_redis.thaw()
    assert 0.25 < time.monotonic() - started < 1.0
    assert wire.get("k") == b"1"  # the timed-out connection was dropped: no reply of the old command is read

    own_redis.kill()
    with pytest.raises(WireConnectionError):
        wire.get("k")
    own_redis.start()
    assert wire.execute_command("PING") == b"PONG"
    wire.execute_command("CLIENT", "SETNAME", "idle")
    own_redis.kill()  # between two commands: the idle socket is closed under it, as redis-py finds at checkout
    own_redis.start()
    assert wire.execute_command("PING") == b"PONG"  # connected afresh, no error
    admin = own_redis.client()
    admin.client_kill_filter(_type="normal", skipme=True)  # Redis closes the idle connection (as a timeout does)
    assert wire.execute_command("PING") == b"PONG"


def test_while_waiting_for_a_reply_on_wait_is_called_and_the_reply_still_read(own_redis):
    wire = Wire.from_url(own_redis.url, socket_timeout=5.0)
    wire.execute_command("PING")
    calls = []

    def on_wait():
        calls.append(time.monotonic())
        if len(calls) == 3:
            own_redis.thaw()

    own_redis.freeze()
    try:
        replies = wire.exchange([("SET", "k", "v"), ("GET", "k")], timeout=3.0, on_wait=on_wait, poll=0.02)
    finally:
        own_redis.thaw()
    assert replies == [b"OK", b"v"] and len(calls) >= 3


def test_threads_share_one_wire_and_a_forked_child_gets_its_own_connection(redis_url, redis_client):
    wire = Wire.from_url(redis_url, socket_timeout=5.0)
    seen: dict[int, list[int]] = {}

    def count(n: int) -> None:
        seen[n] = [wire.execute_command("INCR", "counter") for _ in range(200)]

    threads = [threading.Thread(target=count, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert redis_client.get("counter") == b"1600"
    assert sorted(v for values in seen.values() for v in values) == list(range(1, 1601))  # no reply crossed
    parent_id = wire.execute_command("CLIENT", "ID")
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        ok = wire.execute_command("CLIENT", "ID") != parent_id and wire.execute_command("INCR", "counter") == 1601
        os._exit(0 if ok else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert wire.execute_command("CLIENT", "ID") == parent_id  # the parent's connection is untouched


def test_an_agent_process_with_remember_never_imports_redis_py(redis_url, redis_client, tmp_path: Path):
    """A real run with ``remember``: recorded, closed and queued for distillation through the ``Wire``, its
    verdict given with ``feedback``, and redis-py's package never imported in the agent's process
    (instructions asked of an absent owner too)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import lessonbank\n"
        "from lessonbank.core.settings import Settings\n"
        "from smolagents import CodeAgent\n"
        "from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code\n"
        f"settings = Settings(_env_file=None, redis_url={redis_url!r}, data_dir=Path({str(tmp_path)!r}),"
        " store_timeout=0.5)\n"
        "agent = CodeAgent(tools=[], model=ScriptedModel([code_reply('x = 3'), final_code(7)]), verbosity_level=0)\n"
        "recorder = lessonbank.remember(agent, bank='light', settings=settings)\n"
        "assert agent.run('Seven.') == 7\n"
        "assert recorder.flush(timeout=5)\n"
        "assert lessonbank.feedback(recorder.run_id(agent), False, 'wrong total', settings=settings)\n"
        "assert 'redis' not in sys.modules, sorted(m for m in sys.modules if m.startswith('redis'))\n"
        "print(recorder.run_id(agent))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr[-2000:]
    run_id = result.stdout.split()[-1]
    run = run_hash(redis_client, run_id)
    assert run["bank"] == "light" and run["state"] == "closed" and run["outcome"] == "success"
    assert (run["verdict"], run["verdict_source"], run["verdict_note"]) == ("failure", "user", "wrong total")
    assert [r.kind for r in run_records(redis_client, run_id)] == ["action", "action", "final", "run_end"]
    assert queued_tasks(redis_client, "lessonbank")[0][1][:2] == ["light", run_id]


def test_tls_with_a_ca_file_a_client_certificate_or_no_verification_and_from_an_injected_client(tmp_path):
    binary, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: no certificate to serve")
    assert binary is not None
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen([binary, "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert),
                               "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "yes",
                               "--save", "", "--dir",
                               str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        mine = f"ssl_certfile={cert}&ssl_keyfile={key}"  # Redis asks each client for a certificate of its CA
        wire = Wire.from_url(f"rediss://localhost:{port}/2?ssl_ca_certs={cert}&{mine}", socket_timeout=2.0)
        deadline = time.monotonic() + 10
        while True:
            try:
                wire.execute_command("SET", "k", "tls")
                break
            except WireConnectionError:
                assert time.monotonic() < deadline, "redis-server did not serve TLS"
                time.sleep(0.05)
        client_id = wire.execute_command("CLIENT", "ID")
        assert wire.execute_command("CLIENT", "ID") == client_id and wire.get("k") == b"tls"  # one connection kept
        unverified = Wire.from_url(f"rediss://127.0.0.1:{port}/2?ssl_cert_reqs=none&{mine}", socket_timeout=2.0)
        assert unverified.get("k") == b"tls"
        injected = redis.Redis.from_url(f"rediss://localhost:{port}/2?ssl_ca_certs={cert}&{mine}")
        assert Wire.from_client(injected, socket_timeout=2.0).get("k") == b"tls"
        with pytest.raises(WireConnectionError, match="certificate verify failed"):
            Wire.from_url(f"rediss://localhost:{port}/2?{mine}", socket_timeout=2.0).get("k")  # not trusted by default
        with pytest.raises(WireConnectionError):  # no certificate of its own: Redis closes the connection
            Wire.from_url(f"rediss://localhost:{port}/2?ssl_ca_certs={cert}", socket_timeout=2.0).get("k")
    finally:
        server.terminate()
        server.wait(10)
