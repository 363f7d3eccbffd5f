"""``lessonbank status`` warns when its credentials can delete banks: the Redis users of the ACL template on a real
redis-server, and a Qdrant key that can or cannot write."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from pydantic import SecretStr

from lessonbank.cli.credentials import qdrant_can_write, redis_can_write_banks
from lessonbank.cli.main import cli
from lessonbank.core.settings import Settings
from tests.deploy.test_redis_acl import render_acl, user_url
from tests.fixtures.redis_server import RedisServer

READ_ONLY, ADMIN = "read-only-key", "admin-key"


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", extra_args=("--aclfile", str(render_acl(tmp_path / "users.acl"))),
                         login="admin:admin-pw").start()
    yield server
    server.stop()


def test_the_agent_user_cannot_write_banks_and_the_others_can(acl_redis: RedisServer) -> None:
    answers = {user: redis_can_write_banks(redis.Redis.from_url(user_url(acl_redis, user)))
               for user in ("agent", "worker", "admin")}
    assert answers == {"agent": False, "worker": True, "admin": True}
    assert redis_can_write_banks(redis.Redis(port=9, socket_connect_timeout=1)) is None  # nobody answered


class QdrantKeys(BaseHTTPRequestHandler):
    """Answers an alias change as a Qdrant server with an admin key and a read-only key does (403 for the latter)."""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("api-key")
        status, body = ((200, {"result": True, "status": "ok", "time": 0.0}) if key == ADMIN else
                        (403, {"status": {"error": "Forbidden: Write access denied"}, "time": 0.0}) if key == READ_ONLY
                        else (401, {"status": {"error": "Must provide an API key"}, "time": 0.0}))
        if self.path != "/collections/aliases":
            status, body = 404, {"status": {"error": "not found"}}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def qdrant_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), QdrantKeys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_read_only_qdrant_key_cannot_write_and_an_admin_key_can(settings: Settings, qdrant_url: str) -> None:
    def ask(key: str | None) -> bool | None:
        return qdrant_can_write(settings.model_copy(update={"qdrant_url": qdrant_url,
                                                           "qdrant_api_key": SecretStr(key) if key else None}))

    assert (ask(READ_ONLY), ask(ADMIN), ask(None)) == (False, True, False)
    assert qdrant_can_write(settings) is None  # no Qdrant server configured


def test_status_warns_only_when_the_credentials_can_delete_banks(acl_redis: RedisServer, qdrant_url: str,
                                                                 env: dict[str, str | None]) -> None:
    def status(user: str, key: str) -> dict[str, Any]:
        run_env = {**env, "LESSONBANK_REDIS_URL": user_url(acl_redis, user), "LESSONBANK_QDRANT_URL": qdrant_url,
                   "LESSONBANK_QDRANT_API_KEY": key}
        result = CliRunner().invoke(cli, ["status", "--json"], env=run_env)
        assert result.stdout.startswith("{"), result.output
        return json.loads(result.stdout)["credentials"]

    assert status("admin", ADMIN) == {
        "redis_can_write_banks": True, "qdrant_can_write": True,
        "warning": "the Redis user and the Qdrant key can delete banks: fine for workers and the CLI, not for agents "
                   "(give them the `agent` Redis user and Qdrant's read-only key: docs/deploy.md)"}
    assert status("admin", READ_ONLY)["warning"].startswith("the Redis user can delete banks")
    assert status("worker", READ_ONLY)["qdrant_can_write"] is False
    refused = CliRunner().invoke(cli, ["status"], env={**env, "LESSONBANK_REDIS_URL": user_url(acl_redis, "agent")})
    assert refused.exit_code == 1 and "may not read the service's state (an agent's user" in refused.output
