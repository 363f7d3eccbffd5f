"""The Redis users of ``deploy/redis/users.acl.template``, loaded into a real redis-server: an agent records its run,
gets lessons from the store's owner and gives feedback, and cannot delete a bank, read a bank's keys or flush."""

from __future__ import annotations

import string
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from smolagents import CodeAgent

import lessonbank
from lessonbank.core.constants import DEFAULT_QUEUE, RECORDER_STATS_KEY, RUN_DISTILLED, run_key
from lessonbank.core.exceptions import ServiceUnavailable
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import connect_store
from tests.fixtures.celery_worker import REPO, CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.scripted_model import ScriptedModel, code_reply

TEMPLATE = REPO / "deploy" / "redis" / "users.acl.template"
PASSWORDS = {"REDIS_AGENT_PASSWORD": "agent-pw", "REDIS_WORKER_PASSWORD": "worker-pw",
             "REDIS_ADMIN_PASSWORD": "admin-pw"}
BANK = "acl-bank"
LESSON = "The totals in the reports are in cents: divide by 100 before printing them."


def render_acl(destination: Path) -> Path:
    """The template with its passwords filled in and its comments dropped (redis-server reads no comments)."""
    text = string.Template(TEMPLATE.read_text()).substitute(PASSWORDS)
    destination.write_text("".join(line + "\n" for line in text.splitlines() if line and not line.startswith("#")))
    return destination


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[RedisServer]:
    acl = render_acl(tmp_path / "users.acl")
    server = RedisServer(tmp_path / "redis", extra_args=("--aclfile", str(acl)), login="admin:admin-pw").start()
    yield server
    server.stop()


def user_url(server: RedisServer, user: str) -> str:
    return f"redis://{user}:{user}-pw@127.0.0.1:{server.port}/0"


def test_the_template_names_every_password_it_needs() -> None:
    assert set(string.Template(TEMPLATE.read_text()).get_identifiers()) == set(PASSWORDS)


def test_without_a_password_nothing_is_allowed(acl_redis: RedisServer) -> None:
    anonymous = redis.Redis(port=acl_redis.port)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_agent_records_gets_lessons_and_gives_feedback_but_cannot_delete_read_banks_or_flush(
    acl_redis: RedisServer, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path
) -> None:
    env = worker_env(user_url(acl_redis, "worker"), DEFAULT_QUEUE, tmp_path / "data", openai_server.url,
                     embed_model_path)
    worker = CeleryWorker(env, DEFAULT_QUEUE, tmp_path / "worker.log").start()
    admin = acl_redis.client()
    agent_settings = Settings(_env_file=None, redis_url=user_url(acl_redis, "agent"), data_dir=tmp_path / "agent",
                              embed_model_path=embed_model_path, store_timeout=30, redis_timeout=5.0, qdrant_url=None)
    try:
        openai_server.script(Reply(content=lessons_json(("fact", LESSON))))
        model = ScriptedModel([code_reply("print(1234 / 100)"), code_reply("final_answer(12.34)")])
        agent = CodeAgent(tools=lessonbank.memory_tools(BANK, settings=agent_settings), model=model, max_steps=4)
        recorder = lessonbank.remember(agent, bank=BANK, settings=agent_settings)
        assert agent.run("What is the report's total in euros?") == 12.34
        run_id = recorder.run_id(agent)
        assert run_id
        deadline = time.monotonic() + 180
        while admin.hget(run_key(run_id), "state") != RUN_DISTILLED.encode():
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.3)
        assert int(admin.hget(RECORDER_STATS_KEY, "spooled") or 0) == 0  # delivered, not left in the spool

        # the user's verdict (one run's own word vouches for nothing), then the lessons through the store's owner
        assert lessonbank.feedback(run_id, True, settings=agent_settings)
        assert admin.hget(run_key(run_id), "verdict_source") == b"user"
        deadline = time.monotonic() + 180
        while "divide by 100" not in lessonbank.lessons_block("the report's total", BANK, settings=agent_settings).text:
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)

        # what the agent's user cannot do
        store = connect_store(agent_settings)
        with pytest.raises(ServiceUnavailable, match="refused the credentials or the command .* no permissions"):
            store.delete_bank(BANK)
        assert store.banks() == {BANK: len(store.list(BANK))} and store.banks()[BANK] >= 1
        agent_client = redis.Redis.from_url(user_url(acl_redis, "agent"))
        for forbidden in (lambda: agent_client.hgetall(f"lessonbank:bank:{BANK}:summaries"),
                          lambda: agent_client.zrange(f"lessonbank:bank:{BANK}:runs", 0, -1),
                          agent_client.flushdb, agent_client.flushall, lambda: agent_client.keys("*"),
                          lambda: agent_client.scan(0)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                forbidden()
        assert admin.zcard(f"lessonbank:bank:{BANK}:runs") == 1
    finally:
        worker.stop()
