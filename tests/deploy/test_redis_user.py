"""The compose Redis runs as the image's redis user, not as root: its command steps down (su-exec, as the image's own
entrypoint does) after rendering the users as root, and hands the rendered users and /data to that user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_deploy import REQUIRED_ENV, ROOT, STEP_DOWN, _redis_service, compose, started_redis
from tests.fixtures.redis_server import free_port


@pytest.fixture(scope="module")
def config() -> dict:
    result = compose("config", "--format", "json", env=REQUIRED_ENV)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_server_is_started_as_the_redis_user(config: dict) -> None:
    script = config["services"]["redis"]["command"][2]
    lines = script.strip().splitlines()
    assert lines[-1].startswith(f"exec {STEP_DOWN}redis-server ")
    assert "chown -R redis /run/redis" in lines  # the rendered users, readable by Redis alone
    assert "find /data \\! -user redis -exec chown redis '{}' +" in lines  # its data, from before too
    assert "user" not in config["services"]["redis"]  # root until the users are rendered


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the redis user can reach (pytest's own are its owner's alone)."""
    with tempfile.TemporaryDirectory(prefix="lessonbank-redis-user-") as name:
        os.chmod(name, 0o755)
        yield Path(name)


@pytest.mark.skipif(os.geteuid() != 0 or not _user_exists("redis") or shutil.which("setpriv") is None,
                    reason="stepping down needs root, a redis user and setpriv")
def test_compose_redis_command_serves_as_the_redis_user(config: dict, open_dir: Path) -> None:
    """Compose's command run for real as root, su-exec swapped for setpriv: the server answers as the redis user,
    owning the rendered users and what it writes, and a file left by root in its data is handed over."""
    redis_user = pwd.getpwnam("redis")
    (open_dir / "left-by-root").write_text("")
    port = free_port()
    command, env = _redis_service(config, open_dir, port, ROOT / "deploy" / "redis" / "users.acl.template", "redis")
    process, admin = started_redis(command, env, open_dir / "redis.log", port)
    try:
        status = (Path("/proc") / str(process.pid) / "status").read_text()  # sh exec'd setpriv, setpriv the server
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert uids == [str(redis_user.pw_uid)] * 4, status
        assert (open_dir / "run" / "users.acl").stat().st_uid == redis_user.pw_uid
        assert (open_dir / "left-by-root").stat().st_uid == redis_user.pw_uid
        admin.set("probe", "1")
        admin.bgrewriteaof()
        written = [path for path in open_dir.rglob("*") if path.suffix in {".aof", ".manifest"}]
        assert written and _owners(written) == {redis_user.pw_uid}
    finally:
        process.terminate()
        process.wait(30)


def _owners(paths: list[Path]) -> set[int]:
    """The owners of ``paths`` that still exist: an AOF rewrite's temporary file can be renamed or removed between
    the listing and the ``stat``."""
    owners = set()
    for path in paths:
        try:
            owners.add(path.stat().st_uid)
        except FileNotFoundError:
            continue
    return owners
