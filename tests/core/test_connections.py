"""The one Redis client factory and URL masking."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

from lessonbank.core.connections import create_redis, masked_url
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from tests.fixtures.redis_server import RedisServer, free_port


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:s3cret@redis:6379/0", "redis://:**@redis:6379/0"),
        ("redis://user:s3cret@redis:6379/0", "redis://user:**@redis:6379/0"),
        ("rediss://default:p%40ss@host/1", "rediss://default:**@host/1"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://user@host/0", "redis://user@host/0"),
        ("redis://:pw@[::1]:6379/0", "redis://:**@[::1]:6379/0"),  # an IPv6 host keeps its brackets
        ("redis://user:pw@[fe80::1%25eth0]/0", "redis://user:**@[fe80::1%25eth0]/0"),
        ("redis://:pw@host:99999/0", "redis://:**@host:99999/0"),  # a port out of range is no reason to crash
        ("redis://:pw@host:port/0", "redis://:**@host:port/0"),
        ("redis://:pw@[::1:6379/0", "<unparseable URL>"),
    ],
)
def test_masked_url_hides_the_password(url: str, masked: str) -> None:
    assert masked_url(url) == masked


@pytest.mark.parametrize(
    ("role", "socket_timeout", "connect_timeout", "retries"),
    [("recorder", 0.25, 0.25, 0), ("agent", 3.0, 1.0, 0), ("service", 30.0, 5.0, None), ("cli", 10.0, 3.0, None)],
)
def test_roles_get_their_timeouts(role, socket_timeout, connect_timeout, retries) -> None:
    client = create_redis(Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0"), role)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == socket_timeout and kwargs["socket_connect_timeout"] == connect_timeout
    if retries is not None:
        assert kwargs["retry"].get_retries() == retries


def test_a_url_without_a_scheme_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="LESSONBANK_REDIS_URL"):
        create_redis(Settings(_env_file=None, redis_url="localhost:6379"), "cli")


def test_redis_trouble_names_what_went_wrong(redis_url: str) -> None:
    """A wrong password or a missing permission is no "unreachable"; nor is a command Redis refused."""
    import redis

    from lessonbank.core.connections import redis_trouble
    from tests.fixtures.redis_server import free_port

    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "limited", "on", ">right-pw", "~*", "-@all", "+auth", "+hello")
    host = redis_url.split("//", 1)[1].split("/", 1)[0]
    seen = {}
    try:
        for case, url in (("wrong password", f"redis://limited:wrong-pw@{host}/0"),
                          ("no permission", f"redis://limited:right-pw@{host}/0"),
                          ("unreachable", f"redis://127.0.0.1:{free_port()}/0")):
            client = create_redis(Settings(_env_file=None, redis_url=url), "cli")
            with pytest.raises(redis.RedisError) as raised:
                client.get("some-key")
            seen[case] = redis_trouble(raised.value)
        with pytest.raises(redis.RedisError) as raised:
            admin.execute_command("NO-SUCH-COMMAND")
        seen["refused command"] = redis_trouble(raised.value)
    finally:
        admin.execute_command("ACL", "DELUSER", "limited")
        admin.close()
    assert seen["wrong password"].startswith("Redis refused the credentials")
    assert seen["no permission"].startswith("Redis refused the credentials")
    assert seen["unreachable"] == "Redis unreachable"
    assert seen["refused command"] == "Redis failed the command"


def test_eviction_risk_says_what_redis_may_drop(own_redis: RedisServer) -> None:
    """lessonbank's Redis must not evict: a queue or a run in progress would vanish without a word."""
    from lessonbank.core.redis_health import eviction_risk

    admin = own_redis.client()
    assert eviction_risk(admin) == ""  # the default: no maxmemory
    admin.config_set("maxmemory-policy", "allkeys-lru")
    assert eviction_risk(admin) == ""  # a policy without a limit never evicts
    admin.config_set("maxmemory", "100mb")
    risk = eviction_risk(admin)
    assert "the queue, runs in progress" in risk and "maxmemory-policy allkeys-lru" in risk
    assert risk.endswith("set maxmemory-policy noeviction for lessonbank's Redis")
    admin.config_set("maxmemory-policy", "volatile-ttl")
    assert "keys that expire" in eviction_risk(admin)
    admin.config_set("maxmemory-policy", "noeviction")
    assert eviction_risk(admin) == ""
    admin.execute_command("ACL", "SETUSER", "default", "-config")  # CONFIG refused, as on some managed Redis
    assert eviction_risk(admin) == ""


@pytest.mark.parametrize(("query", "said"), [("nonsense=1", "nonsense"), ("ssl_cert_reqs=bogus", "bogus")])
def test_an_option_redis_py_does_not_take_is_a_configuration_error_at_once(query: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=f"LESSONBANK_REDIS_URL cannot be used.*{said}"):
        create_redis(Settings(_env_file=None, redis_url=f"rediss://127.0.0.1:1/0?{query}"), "agent")


def test_the_agent_process_roles_keep_their_bounds_whatever_the_url_asks() -> None:
    url = "redis://127.0.0.1:1/0?socket_timeout=60&socket_connect_timeout=60&client_name=mine"
    settings = Settings(_env_file=None, redis_url=url)
    for role, timeout in (("recorder", 0.25), ("agent", 3.0), ("service", 60.0)):
        kwargs = create_redis(settings, role).connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == timeout and kwargs["client_name"] == "mine", role


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def tls_redis(tmp_path: Path, protocols: str) -> tuple[subprocess.Popen, int]:
    """A redis-server speaking TLS only (``protocols``), asking every client for a certificate of its CA."""
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file", "server.pem",
                               "--tls-key-file", "server.key", "--tls-ca-cert-file", "ca.pem", "--tls-auth-clients",
                               "yes", "--tls-protocols", protocols, "--save", "", "--dir", str(tmp_path)],
                              cwd=tmp_path, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return server, port
        assert time.monotonic() < deadline, "redis-server did not listen"
        time.sleep(0.05)


@pytest.mark.slow
def test_an_injected_clients_tls_options_all_hold_for_the_recorder_and_the_tools(tmp_path: Path) -> None:
    """A private CA given as data, a client key encrypted with a password, TLS 1.3 at least: the recorder (a copy of
    the client's options with its own bounds) and the memory tools (the client as it is) both reach Redis with
    them, and a Redis that speaks only TLS 1.2 is refused, not spoken to in TLS 1.2."""
    import ssl

    from smolagents import CodeAgent

    from lessonbank.recorder import StepRecorder
    from lessonbank.tools import RememberLessonTool
    from tests.fixtures.recorded import run_records
    from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed: no certificate to serve", pytrace=False)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=lessonbank test CA", cwd=tmp_path)
    for name, subject, key in (("server", "/CN=localhost", ["-nodes"]), ("client", "/CN=agent",
                                                                      ["-passout", "pass:k3y-pw"])):
        openssl("req", "-newkey", "rsa:2048", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
                "-addext", "subjectAltName=DNS:localhost", cwd=tmp_path)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
                f"{name}.pem", "-days", "2", "-copy_extensions", "copy", cwd=tmp_path)
    options = {"ssl": True, "ssl_ca_data": (tmp_path / "ca.pem").read_text(), "ssl_password": "k3y-pw",
               "ssl_certfile": str(tmp_path / "client.pem"), "ssl_keyfile": str(tmp_path / "client.key"),
               "ssl_min_version": ssl.TLSVersion.TLSv1_3}
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path / "data")
    servers = []
    try:
        server, port = tls_redis(tmp_path, "TLSv1.2 TLSv1.3")
        servers.append(server)
        injected = redis.Redis(host="localhost", port=port, **options)
        recorder = StepRecorder(bank="tls", settings=settings, redis_client=injected)
        agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), final_code(1)]), verbosity_level=0,
                          step_callbacks=recorder.step_callbacks)
        assert agent.run("Over TLS.") == 1
        assert [r.kind for r in run_records(injected, recorder.run_id(agent))] == ["action", "action", "final",
                                                                                   "run_end"]
        assert recorder.transport.spooled == 0
        recorder.close()
        saved = RememberLessonTool("tls", redis_client=injected, settings=settings)(lesson="TLS works.", kind="fact")
        assert saved.startswith("Saved for future runs")

        old, old_port = tls_redis(tmp_path, "TLSv1.2")
        servers.append(old)
        refused = redis.Redis(host="localhost", port=old_port, **options)
        with pytest.raises(redis.ConnectionError):
            refused.ping()
        recorder = StepRecorder(bank="tls", settings=settings, redis_client=refused)
        agent = CodeAgent(tools=[], model=ScriptedModel([final_code(2)]), verbosity_level=0,
                          step_callbacks=recorder.step_callbacks)
        assert agent.run("Over TLS 1.2.") == 2
        assert recorder.transport.spooled == 3 and recorder.transport.delivered == 0
        recorder.close()
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)


def test_a_credential_provider_is_asked_again_on_each_connection(own_redis: RedisServer, tmp_path: Path) -> None:
    """Rotating credentials: the recorder's copy of an injected client keeps its provider, which is asked again when
    a connection is made, so a password changed since (and the old connections closed) is used."""
    from smolagents import CodeAgent

    from lessonbank.recorder import StepRecorder
    from tests.fixtures.recorded import run_records
    from tests.fixtures.scripted_model import ScriptedModel, final_code

    admin = own_redis.client()
    admin.execute_command("ACL", "SETUSER", "agent", "on", ">first-pw", "~*", "+@all")
    current = ["first-pw"]
    asked: list[str] = []

    class Rotating(redis.CredentialProvider):
        def get_credentials(self) -> tuple[str, str]:
            asked.append(current[0])
            return "agent", current[0]

    injected = redis.Redis(port=own_redis.port, credential_provider=Rotating())
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path / "data")
    recorder = StepRecorder(bank="rotating", settings=settings, redis_client=injected)
    agent = CodeAgent(tools=[], model=ScriptedModel([], then=final_code(1)), verbosity_level=0,
                      step_callbacks=recorder.step_callbacks)
    agent.run("With the first password.")
    first = recorder.run_id(agent)
    admin.execute_command("ACL", "SETUSER", "agent", "resetpass", ">second-pw")
    current[0] = "second-pw"
    admin.client_kill_filter(_type="normal", skipme=True)  # the old connections go, as at a rotation
    agent.run("With the second password.")
    second = recorder.run_id(agent)
    assert recorder.flush(timeout=10)
    for run_id in (first, second):
        assert [r.kind for r in run_records(admin, run_id)] == ["action", "final", "run_end"]
    assert asked[0] == "first-pw" and asked[-1] == "second-pw"
    recorder.close()


def test_a_client_found_through_sentinel_records_as_it_is(own_redis: RedisServer, tmp_path: Path) -> None:
    """A client whose pool asks Sentinel for the primary cannot be copied: the recorder uses it as it is."""
    from redis.sentinel import Sentinel
    from smolagents import CodeAgent

    from lessonbank.recorder import StepRecorder
    from tests.fixtures.recorded import run_records
    from tests.fixtures.scripted_model import ScriptedModel, final_code

    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nsentinel monitor primary 127.0.0.1 {own_redis.port} 1\n")
    sentinel = subprocess.Popen(["redis-server", str(conf), "--sentinel"], cwd=tmp_path, stdout=subprocess.DEVNULL)
    try:
        client = Sentinel([("127.0.0.1", port)], socket_timeout=5).master_for("primary", socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "Sentinel did not name the primary"
                time.sleep(0.05)
        settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path / "data")
        recorder = StepRecorder(bank="sentinel", settings=settings, redis_client=client)
        agent = CodeAgent(tools=[], model=ScriptedModel([final_code(1)]), verbosity_level=0,
                          step_callbacks=recorder.step_callbacks)
        assert agent.run("Through Sentinel.") == 1
        assert [r.kind for r in run_records(own_redis.client(), recorder.run_id(agent))] == ["action", "final",
                                                                                           "run_end"]
        recorder.close()
    finally:
        sentinel.terminate()
        sentinel.wait(10)
