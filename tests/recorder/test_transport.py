"""The recorder when Redis is down, frozen (SIGSTOP), or the broker refuses the distill task."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import redis
from smolagents import CodeAgent

from lessonbank.core.settings import Settings
from lessonbank.recorder import StepRecorder
from lessonbank.recorder.ops import Op
from lessonbank.recorder.spool import spool_files
from lessonbank.recorder.transport import RedisSink
from tests.fixtures.recorded import distill_args, run_hash, run_records
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code

BANK = "faults"


def settings_for(server: RedisServer, tmp_path: Path, **overrides) -> Settings:
    return Settings(_env_file=None, redis_url=server.url, data_dir=tmp_path / "data", **overrides)


def five_step_agent(recorder: StepRecorder) -> CodeAgent:
    replies = [code_reply(f"x = {i}\nprint(x)") for i in range(4)] + [final_code("done")]
    return CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=recorder.step_callbacks,
                     verbosity_level=0, max_steps=10)


def spool_lines(settings: Settings) -> int:
    return sum(len(path.read_text().splitlines()) for path in spool_files(settings.resolved_spool_dir))


@pytest.mark.slow
def test_redis_stopped_before_the_run(own_redis, tmp_path, caplog):
    settings = settings_for(own_redis, tmp_path)
    own_redis.stop()
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = five_step_agent(recorder)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="lessonbank.recorder"):
        assert agent.run("Count to four.") == "done"
    assert time.monotonic() - started < 5
    outage_logs = [r for r in caplog.records if "spooling" in r.getMessage()]
    assert len(outage_logs) == 1  # one warning per outage, not per step
    assert spool_lines(settings) == 7  # 5 actions, the final answer, the close

    own_redis.start()  # same port
    assert recorder.flush()
    assert spool_files(settings.resolved_spool_dir) == []
    client = own_redis.client()
    run_id = recorder.run_id(agent)
    records = run_records(client, run_id)
    assert [r.seq for r in records] == list(range(7)) and records[-1].outcome == "success"
    assert run_hash(client, run_id)["state"] == "closed"
    assert distill_args(client) == [[BANK, run_id]]

    assert recorder.flush()  # nothing left: no second delivery, no second enqueue
    assert client.hlen(f"lessonbank:run:{run_id}:steps") == 7 and len(distill_args(client)) == 1
    recorder.close()


@pytest.mark.slow
def test_a_long_outage_grows_the_spool_file_not_the_agents_memory(own_redis, tmp_path):
    """Twelve runs while Redis is away: 84 ops spooled, at most 10 of them held in memory; back, every run lands
    whole and in order, and each is handed to distillation once, in the order the runs closed."""
    settings = settings_for(own_redis, tmp_path)
    own_redis.stop()
    recorder = StepRecorder(bank=BANK, settings=settings)
    spool = recorder.transport.spool
    spool.in_memory = 10
    held = []
    agents = []
    for run in range(12):
        agent = five_step_agent(recorder)
        assert agent.run(f"Count to four, run {run}.") == "done"
        held.append(len(spool._pending))
        agents.append(recorder.run_id(agent))
    assert spool_lines(settings) == 84 and len(spool) == 84 and max(held) == 10

    own_redis.start()
    assert recorder.flush()
    assert spool_files(settings.resolved_spool_dir) == []
    client = own_redis.client()
    for run_id in agents:
        records = run_records(client, run_id)
        assert [r.seq for r in records] == list(range(7)) and records[-1].outcome == "success"
    assert distill_args(client) == [[BANK, run_id] for run_id in agents]
    recorder.close()


@pytest.mark.slow
def test_next_successful_push_flushes_the_spool_first(own_redis, tmp_path):
    settings = settings_for(own_redis, tmp_path, breaker_cooldown=0.2)
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), final_code(1), final_code(2)]),
                      step_callbacks=recorder.step_callbacks, verbosity_level=0)
    own_redis.kill()
    agent.run("While Redis is away.")
    first = recorder.run_id(agent)
    own_redis.start()
    deadline = time.monotonic() + 30
    while not recorder.transport.breaker.allow():  # past the cooldown: the next step probes, succeeds, flushes first
        assert time.monotonic() < deadline
        time.sleep(0.02)
    agent.run("After it came back.")
    second = recorder.run_id(agent)
    client = own_redis.client()
    assert [r.kind for r in run_records(client, first)] == ["action", "action", "final", "run_end"]
    assert [r.kind for r in run_records(client, second)] == ["action", "final", "run_end"]
    assert distill_args(client) == [[BANK, first], [BANK, second]]  # the spooled close went out first
    assert spool_files(settings.resolved_spool_dir) == []
    recorder.close()


@pytest.mark.slow
def test_redis_dies_mid_run(own_redis, tmp_path):
    settings = settings_for(own_redis, tmp_path, breaker_cooldown=60)
    recorder = StepRecorder(bank=BANK, settings=settings)

    def die(_messages):
        assert recorder.flush()  # step 0 is in Redis when it dies
        own_redis.kill()
        return code_reply("y = 2")

    agent = CodeAgent(tools=[], model=ScriptedModel([code_reply("x = 1"), die, final_code(3)]),
                      step_callbacks=recorder.step_callbacks, verbosity_level=0)
    agent.run("Redis dies at step two.")
    run_id = recorder.run_id(agent)
    own_redis.start()
    client = own_redis.client()
    assert client.hlen(f"lessonbank:run:{run_id}:steps") == 0  # the restarted server lost step 0 (no AOF)
    assert recorder.flush()
    assert [r.seq for r in run_records(client, run_id)] == [1, 2, 3, 4]
    assert distill_args(client) == [[BANK, run_id]]
    recorder.close()


@pytest.mark.slow
def test_redis_frozen_costs_bounded_time(own_redis, tmp_path):
    # a timeout long next to what a loaded machine adds to the run itself (a few seconds at most; 0.1 s idle), so
    # that waiting it once or twice (the steps, the close) and once per step are told apart whatever the load
    settings = settings_for(own_redis, tmp_path, redis_timeout=2.0)
    recorder = StepRecorder(bank=BANK, settings=settings)
    warm = five_step_agent(recorder)
    warm.run("Warm up the connections.")
    agent = five_step_agent(recorder)
    own_redis.freeze()
    try:
        started = time.monotonic()
        assert agent.run("Count while Redis is frozen.") == "done"
        elapsed = time.monotonic() - started
    finally:
        own_redis.thaw()
    # one timeout for the steps, at most one for the close (five steps each waiting one: 10 s and more)
    assert elapsed < 2 * settings.redis_timeout + 3.0, elapsed
    run_id = recorder.run_id(agent)
    assert recorder.flush()
    client = own_redis.client()
    assert [r.seq for r in run_records(client, run_id)] == list(range(7))
    assert distill_args(client) == [[BANK, recorder.run_id(warm)], [BANK, run_id]]
    recorder.close()


def test_a_close_delivered_twice_publishes_once(settings, redis_client):
    """A close that reached Redis although its caller saw a timeout is replayed from the spool: the run is
    closed and its distill task queued by the same Lua script, so the replay queues nothing more."""
    recorder = StepRecorder(bank=BANK, settings=settings)
    agent = CodeAgent(tools=[], model=ScriptedModel([final_code(1)]), step_callbacks=recorder.step_callbacks,
                      verbosity_level=0)
    agent.run("Close twice.")
    run_id = recorder.run_id(agent)
    assert distill_args(redis_client) == [[BANK, run_id]]
    sink = RedisSink(redis_client, settings.queue)
    for record in run_records(redis_client, run_id):
        if record.kind == "run_end":
            close = Op("close", BANK, run_id, record.agent, record.task, record.seq, record.to_json(), time.time(),
                       "success", "another-token")
            sink.apply(close, replay=True)
            sink.apply(close, replay=True)
    assert distill_args(redis_client) == [[BANK, run_id]]
    assert run_hash(redis_client, run_id)["enqueued"] == "1"
    assert redis_client.hlen(f"lessonbank:run:{run_id}:steps") == 3
    recorder.close()


# -- the batched writes are the writes of lessonbank.core.runs ------------------------------------------


def redis_state(client) -> dict:
    """Every key, with task messages reduced to (task, args) (their ids are random)."""
    from tests.fixtures.recorded import queued_tasks

    state = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        if kind == b"hash":
            state[key] = client.hgetall(key)
        elif kind == b"zset":  # an open run's last activity is put on Redis's clock as it is written: to 0.1 s
            state[key] = [(member, round(score, 1)) for member, score in client.zrange(key, 0, -1, withscores=True)]
        elif kind == b"list":
            state[key] = queued_tasks(client, key.decode())
    return state


def batch_ops() -> list[Op]:
    from tests.recorder.test_spool import make_ops

    closed = [Op(**{**op.__dict__, "extra": {"tools": '["a"]', "arm": "control", "check": "pending"}})
              for op in make_ops("closed")]
    still_open = [Op(**{**op.__dict__, "extra": {"tools": "[]", "check": "pending"}})
                  for op in make_ops("open", steps=2, close=False)]
    verdict = Op("verdict", "b", "closed", "agent", "", 4, '{"source": "check", "note": "", "ttl": 600}', 2001.5,
                 "failure")
    no_verdict = Op("verdict", "b", "open", "agent", "", 2, '{"source": "check", "note": "", "ttl": 600}', 1500.0, "")
    return [closed[0], still_open[0], closed[1], closed[2], still_open[1], closed[3], verdict, no_verdict]


def test_a_batch_writes_what_the_run_state_functions_write(redis_url):
    from lessonbank.recorder.spool import Spool
    from lessonbank.recorder.transport import Transport

    expected, batched = (redis.Redis.from_url(redis_url.replace("/0", f"/{db}")) for db in (1, 2))
    ops = batch_ops()
    sink = RedisSink(expected, "q")
    for op in ops:
        sink.apply(op)
    transport = Transport(lambda: batched, Spool(Path("/nonexistent")), 5.0, 1.0, "q", own_client=False)
    transport.deliver(ops, list)
    assert transport.delivered == 8 and transport.spooled == 0
    assert redis_state(batched) == redis_state(expected) != {}
    closed = batched.hgetall("lessonbank:run:closed")
    assert (closed[b"verdict"], closed[b"verdict_source"]) == (b"failure", b"check") and b"check" not in closed
    assert b"check" not in batched.hgetall("lessonbank:run:open")


def test_a_replayed_spool_writes_what_replay_step_writes(redis_url, tmp_path):
    from lessonbank.recorder.spool import Spool
    from lessonbank.recorder.transport import Transport

    expected, batched = (redis.Redis.from_url(redis_url.replace("/0", f"/{db}")) for db in (3, 4))
    ops = batch_ops()
    for client in (expected, batched):  # the open run was closed by the sweeper meanwhile
        RedisSink(client, "q").apply(Op("close", "b", "open", "agent", "t", 9, "{}", 50.0, "abandoned", "x"))
    sink = RedisSink(expected, "q")
    for op in ops:
        sink.apply(op, replay=True)
    spool = Spool(tmp_path)
    spool.append_many(ops)
    transport = Transport(lambda: batched, spool, 5.0, 1.0, "q", own_client=False)
    assert transport.pump(list, budget=5.0, force=True)
    assert transport.delivered == 8 and spool.path is None
    assert redis_state(batched) == redis_state(expected)
    assert batched.hget("lessonbank:run:open", "state") == b"closed"
    before = redis_state(batched)
    spool.append_many(ops)  # the same spool replayed again (a process that died after a partial delivery)
    assert transport.pump(list, budget=5.0, force=True)
    assert redis_state(batched) == before  # every op once in effect: no second task, verdict or late step


def test_an_injected_client_keeps_the_recorders_bounds(tmp_path):
    """An injected client that retries with backoff and waits seconds to connect: the recorder's own connections
    to its Redis use the recorder's timeouts and no retry, so a run's close and ``flush`` keep their bounds."""
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    from tests.fixtures.redis_server import free_port

    port = free_port()  # nothing listens there: every connection is refused
    settings = Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path / "data")
    injected = redis.Redis(port=port, retry=Retry(ExponentialBackoff(cap=2.0, base=0.2), 10),
                           socket_connect_timeout=5.0, socket_timeout=5.0)
    recorder = StepRecorder(bank=BANK, settings=settings, redis_client=injected)
    agent = five_step_agent(recorder)
    started = time.monotonic()
    assert agent.run("Count to four.") == "done"
    # refused at once, so the run takes its own time (0.1 s idle); the injected client's backoff would add seconds
    assert time.monotonic() - started < 5.0
    assert spool_lines(settings) == 7  # the run is recorded (spooled) when agent.run returns
    started = time.monotonic()
    assert not recorder.flush(timeout=0.5)
    assert time.monotonic() - started < 0.5 + 2.5  # the flush's own bound, not the injected client's backoff
    recorder.close()
    assert injected.connection_pool.connection_kwargs["socket_timeout"] == 5.0  # the user's client is as it was


@pytest.mark.slow
def test_a_backlog_drains_over_a_slow_link(own_redis, tmp_path):
    """About 3 MB of records spooled while Redis was away, then a link of 2 MB/s to it: the spool is replayed in
    chunks the link carries within their wait (not resent for ever), and every record lands once."""
    from tests.fixtures.relay import Relay

    relay = Relay(own_redis.port)  # not listening yet: Redis is away
    settings = Settings(_env_file=None, redis_url=relay.url, data_dir=tmp_path / "data", max_field_chars=100_000,
                        max_record_bytes=131072, breaker_cooldown=0.2)
    recorder = StepRecorder(bank=BANK, settings=settings)
    replies = [code_reply(f"print('{i % 10}' * 100_000)") for i in range(64)] + [final_code("done")]
    agent = CodeAgent(tools=[], model=ScriptedModel(replies), step_callbacks=recorder.step_callbacks,
                      verbosity_level=0, max_steps=70)
    assert agent.run("Print a lot.") == "done"
    spooled = sum(path.stat().st_size for path in spool_files(settings.resolved_spool_dir))
    assert recorder.transport.backlog == 67 and spooled > 3_000_000
    relay.rate = 2_000_000
    relay.open()
    started = time.monotonic()
    try:
        deadline = started + 120
        while recorder.transport.backlog:
            assert time.monotonic() < deadline, f"{recorder.transport.backlog} ops still spooled"
            time.sleep(0.05)
        took = time.monotonic() - started
        print(f"\n{spooled / 1e6:.1f} MB spooled, replayed over a 2 MB/s link in {took:.1f} s "
              f"({relay.forwarded / 1e6:.1f} MB sent; next chunk {recorder.transport.replay_bytes // 1024} KiB)")
        client = own_redis.client()
        run_id = recorder.run_id(agent)
        assert [r.seq for r in run_records(client, run_id)] == list(range(67))
        assert relay.forwarded < 2 * spooled  # chunks went through, not again and again
    finally:
        recorder.close()
        relay.close()
