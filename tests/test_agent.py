"""``remember(agent)``: a real CodeAgent with a scripted model, a real store and a real Redis."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from qdrant_client import QdrantClient
from smolagents import CodeAgent, tool
from smolagents.memory import FinalAnswerStep

from lessonbank import remember
from lessonbank.core.constants import RECORDER_STATS_KEY, STORE_OWNER_KEY, STORE_REQUESTS_KEY, run_key, run_steps_key
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.local import open_local_store
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.store.remote import RemoteLessonStore
from tests.faults.helpers import Monitor
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.recorded import distill_args, run_hash, run_records
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code
from tests.learn.runs import written_observed

CSV = "CSV files in the data folder use ';' as separator: read them with pd.read_csv(path, sep=';')."
USER = "Always answer in French."
HEADER = "## Lessons from earlier runs"
CSV_TASK = "Load data/sales.csv and compute the total revenue per region"


@pytest.fixture
def store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    client = QdrantClient(":memory:")
    store = LessonStore(client, embedder)
    store.upsert([Lesson.new("team", "approach", CSV).model_copy(update={"verified": True})])
    yield store
    client.close()


class Probe:
    """Scripted model replies that note what the agent looked like while it ran."""

    def __init__(self, agent_ref: list[Any]) -> None:
        self.agent_ref = agent_ref
        self.instructions: list[str | None] = []
        self.told: list[str] = []  # the instructions and the task the run was given

    def __call__(self, messages: list[Any]) -> str:
        agent = self.agent_ref[0]
        self.instructions.append(agent.instructions)
        self.told.append(f"{agent.instructions}\n\n{agent.task}")
        return final_code("ok")


def message(model: ScriptedModel, call: int, index: int) -> str:
    """The text of message ``index`` of the model's call ``call`` (0: the system prompt, 1: the task)."""
    first = model.calls[call]["messages"][index]
    content = first.content if hasattr(first, "content") else first["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


def system_prompt(model: ScriptedModel, call: int) -> str:
    return message(model, call, 0)


def make_agent(settings: Settings, store: Any) -> tuple[CodeAgent, ScriptedModel, Probe]:
    ref: list[Any] = []
    probe = Probe(ref)
    model = ScriptedModel([], then=probe)
    agent = CodeAgent(tools=[], model=model, instructions=USER, verbosity_level=0)
    ref.append(agent)
    return agent, model, probe


def test_run_gets_lessons_after_its_task(settings: Settings, store: LessonStore, redis_client: redis.Redis) -> None:
    """The lessons follow the task in the run's first message (a 1.5B model given a fix in the system prompt mostly
    wrote the task's own value first: bench/learning/first_call.py); the run is recorded with its task alone."""
    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store)
    try:
        assert agent.run(CSV_TASK) == "ok"
        task_message = message(model, 0, 1)
        assert CSV_TASK in task_message and task_message.index(CSV_TASK) < task_message.index(HEADER)
        assert CSV in task_message and CSV not in system_prompt(model, 0) and USER in system_prompt(model, 0)
        assert probe.instructions == [USER]  # the user's instructions are left alone
        assert agent.task == CSV_TASK  # and the task is the user's again after the run

        run_id = recorder.run_id(agent)
        assert run_id and redis_client.hlen(run_steps_key(run_id)) >= 1  # the run was recorded
        state = run_hash(redis_client, run_id)
        assert state["task"] == CSV_TASK  # recorded (and distilled, summarized) as the user gave it
        assert state["arm"] == "lessons" and json.loads(state["given"]) == [Lesson.new("team", "approach", CSV).id]
        assert "check" not in state  # no check= was given
        assert all(HEADER not in record.model_dump_json() for record in run_records(redis_client, run_id))
    finally:
        recorder.close()


def test_a_run_gets_no_lesson_about_a_tool_its_agent_lacks(settings: Settings, store: LessonStore) -> None:
    """One bank, agents with other tools: the shape of get_invoice goes to the agent that has get_invoice."""
    shape = ("`get_invoice(...)` returns {'invoice': str, 'lines': [{'qty': int, 'unit_price_cents': int}, ...]}: "
             "its records are `result['lines']`.")
    store.upsert([written_observed("shop", "fact", shape)])
    task = "Using get_invoice, what is the total of invoice INV-7 in euros?"

    @tool
    def get_invoice(invoice_id: str) -> dict:
        """Return an invoice.

        Args:
            invoice_id: The invoice's id.
        """
        return {"invoice": invoice_id, "lines": []}

    told = []
    for tools in ([], [get_invoice]):
        ref: list[Any] = []
        probe = Probe(ref)
        agent = CodeAgent(tools=tools, model=ScriptedModel([], then=probe), verbosity_level=0)
        ref.append(agent)
        recorder = remember(agent, bank="shop", settings=settings, store=store)
        try:
            assert agent.run(task) == "ok"
        finally:
            recorder.close()
        told.append(probe.told[0])
    assert "get_invoice(...)` returns" not in told[0] and HEADER not in told[0]
    assert "get_invoice(...)` returns" in told[1]


def test_task_with_additional_args_is_the_users_again_after_the_run(settings: Settings, store: LessonStore) -> None:
    """smolagents appends a note on ``additional_args`` to the task the lessons were joined to: after the run the
    task is the user's with that note, without the lessons."""
    agent, model, _ = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store)
    try:
        assert agent.run(CSV_TASK, additional_args={"region_names": ["north"]}) == "ok"
        assert CSV in message(model, 0, 1) and "region_names" in message(model, 0, 1)
        assert agent.task.startswith(CSV_TASK) and "region_names" in agent.task
        assert HEADER not in agent.task and CSV not in agent.task
    finally:
        recorder.close()


def test_run_gets_lessons_in_its_instructions_when_asked(settings: Settings, store: LessonStore,
                                                         redis_client: redis.Redis) -> None:
    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store, lessons_in="instructions")
    try:
        assert agent.run(CSV_TASK) == "ok"
        during = probe.instructions[0]
        assert during is not None and during.startswith(USER) and CSV in during and HEADER in during
        assert CSV in system_prompt(model, 0) and USER in system_prompt(model, 0)
        assert HEADER not in message(model, 0, 1)
        assert agent.instructions == USER  # the user's own instructions are back after the run
        assert run_hash(redis_client, recorder.run_id(agent) or "")["task"] == CSV_TASK
    finally:
        recorder.close()
    with pytest.raises(ConfigurationError, match="lessons_in must be 'task' or 'instructions'"):
        remember(make_agent(settings, store)[0], bank="team", settings=settings, lessons_in="system")  # type: ignore[arg-type]


def test_unrelated_task_and_other_bank_get_no_lessons(settings: Settings, store: LessonStore) -> None:
    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store)
    other, other_model, other_probe = make_agent(settings, store)
    other_recorder = remember(other, bank="elsewhere", settings=settings, store=store)
    try:
        agent.run("Write a haiku about autumn leaves.")
        assert probe.instructions[0] == USER and HEADER not in probe.told[0]
        other.run(CSV_TASK)
        assert other_probe.instructions[0] == USER and CSV not in other_probe.told[0]
    finally:
        recorder.close()
        other_recorder.close()


def test_remember_is_idempotent_and_follows_user_changes(settings: Settings, store: LessonStore) -> None:
    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store)
    try:
        assert remember(agent, bank="team", settings=settings, store=store) is recorder
        assert remember(agent) is recorder
        with pytest.raises(ValueError, match="already remembers into bank 'team'"):
            remember(agent, bank="another")
        agent.run(CSV_TASK)
        assert probe.told[0].count(CSV) == 1
        records = run_records(redis.Redis.from_url(settings.redis_url), recorder.run_id(agent) or "")
        assert [r.kind for r in records] == ["action", "final", "run_end"]  # each step recorded once
        agent.instructions = "Answer in German."
        agent.run(CSV_TASK)
        assert probe.instructions[1] == "Answer in German." and CSV in probe.told[1]
        assert agent.instructions == "Answer in German." and agent.task == CSV_TASK
    finally:
        recorder.close()


def test_instructions_restored_after_a_failing_run_and_a_stream(
    settings: Settings, store: LessonStore, redis_client: redis.Redis
) -> None:
    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store)
    try:
        model.then = None  # the script is empty: the model call raises
        with pytest.raises(Exception, match="scripted model has only 0 replies"):
            agent.run(CSV_TASK)
        assert agent.instructions == USER
        failed = recorder.run_id(agent)
        assert failed and redis_client.hget(run_key(failed), "outcome") == b"error"  # closed as failed
        model.then = probe
        steps = agent.run(CSV_TASK, stream=True)
        assert CSV in agent.task  # the streamed run is still going
        outputs = list(steps)
        assert isinstance(outputs[-1], FinalAnswerStep) and outputs[-1].output == "ok"
        assert CSV in message(model, len(model.calls) - 1, 1)
        assert agent.instructions == USER and agent.task == CSV_TASK
    finally:
        recorder.close()


def test_unavailable_store_never_breaks_the_run(settings: Settings) -> None:
    silent = RemoteLessonStore(settings.model_copy(update={"store_timeout": 0.2}))  # no worker serves it
    agent, model, probe = make_agent(settings, silent)
    recorder = remember(agent, bank="team", settings=settings, store=silent)
    try:
        assert agent.run(CSV_TASK) == "ok"
        assert probe.instructions == [USER]
    finally:
        recorder.close()


def test_check_records_the_verdict_with_the_run(settings: Settings, store: LessonStore,
                                               redis_client: redis.Redis) -> None:
    answers: list[Any] = []

    def check(answer: Any) -> bool:
        answers.append(answer)
        return answer == "right"

    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store, judge=check)
    try:
        agent.run(CSV_TASK)  # the probe answers "ok"
        state = run_hash(redis_client, recorder.run_id(agent) or "")
        assert answers == ["ok"] and (state["verdict"], state["verdict_source"]) == ("failure", "check")
        assert "check" not in state and distill_args(redis_client, settings.queue) != []
        model.then = lambda messages: final_code("right")
        agent.run(CSV_TASK)
        assert run_hash(redis_client, recorder.run_id(agent) or "")["verdict"] == "success"
    finally:
        recorder.close()


def test_a_raising_check_leaves_no_verdict_and_never_breaks_the_run(settings: Settings, store: LessonStore,
                                                                   redis_client: redis.Redis) -> None:
    def broken(answer: Any) -> bool:
        raise RuntimeError("the user's check has a bug")

    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store, judge=broken)
    try:
        assert agent.run(CSV_TASK) == "ok"
        state = run_hash(redis_client, recorder.run_id(agent) or "")
        assert "verdict" not in state and "check" not in state
    finally:
        recorder.close()


def test_check_is_a_deprecated_name_of_judge(settings: Settings, store: LessonStore,
                                           redis_client: redis.Redis) -> None:
    agent, model, probe = make_agent(settings, store)
    with pytest.warns(DeprecationWarning, match="judge="):
        recorder = remember(agent, bank="team", settings=settings, store=store, check=lambda answer: answer == "ok")
    try:
        agent.run(CSV_TASK)
        assert run_hash(redis_client, recorder.run_id(agent) or "")["verdict"] == "success"
    finally:
        recorder.close()
    with pytest.raises(ValueError, match="judge= only"):
        remember(make_agent(settings, store)[0], bank="team", settings=settings, store=store, check=bool, judge=bool)


def test_holdout_runs_get_no_lessons_and_are_recorded_as_control(settings: Settings, store: LessonStore,
                                                                  redis_client: redis.Redis) -> None:
    agent, model, probe = make_agent(settings, store)
    recorder = remember(agent, bank="team", settings=settings, store=store, holdout=0.5, seed=7)
    arms = []
    try:
        for index in range(12):
            agent.run(CSV_TASK)
            state = run_hash(redis_client, recorder.run_id(agent) or "")
            arms.append(state["arm"])
            given = json.loads(state["given"])
            assert (CSV in probe.told[index]) == (state["arm"] == "lessons") == bool(given)
        assert 2 <= arms.count("control") <= 10
    finally:
        recorder.close()
    again, _, _ = make_agent(settings, store)
    replay = remember(again, bank="team", settings=settings, store=store, holdout=0.5, seed=7)
    try:
        replayed = []
        for _ in range(12):
            again.run(CSV_TASK)
            replayed.append(run_hash(redis_client, replay.run_id(again) or "")["arm"])
        assert replayed == arms  # seeded: the same runs are held out
    finally:
        replay.close()


@pytest.mark.parametrize("holdout", [-0.1, 1.0, 3])
def test_bad_holdout_and_bank_names_are_refused(settings: Settings, holdout: float) -> None:
    from lessonbank.core.exceptions import ConfigurationError

    agent, _, _ = make_agent(settings, None)
    with pytest.raises(ConfigurationError, match="holdout"):
        remember(agent, bank="team", settings=settings, holdout=holdout)
    for bad in ("", " team", "team "):
        with pytest.raises(ConfigurationError, match="bank name"):
            remember(agent, bank=bad, settings=settings)


# -- no silent "no lessons" ------------------------------------------------------------------------------

def test_without_a_worker_it_says_so_once_and_reads_the_lessons_itself(
    settings: Settings, embed_model_path: Path, caplog: pytest.LogCaptureFixture, redis_client: redis.Redis,
    redis_server: RedisServer,
) -> None:
    local = settings.model_copy(update={"store_timeout": 1.0, "embed_model_path": embed_model_path,
                                        "qdrant_url": None})
    on_disk = open_local_store(local)
    on_disk.upsert([Lesson.new("team", "approach", CSV).model_copy(update={"verified": True})])
    on_disk.close()
    agent, model, probe = make_agent(local, None)
    recorder = remember(agent, bank="team", settings=local)  # the default route: the worker owning the store
    took = []
    monitor = Monitor(redis_server.port).start()  # the store requests the agent sends to an owner

    def asked() -> int:
        return sum(1 for command in monitor.commands() if command[:2] == ["RPUSH", STORE_REQUESTS_KEY])

    try:
        with caplog.at_level(logging.WARNING, logger="lessonbank"):
            for _ in range(3):
                started = time.monotonic()
                agent.run(CSV_TASK)
                took.append(time.monotonic() - started)
        said = [r.getMessage() for r in caplog.records if "no worker answered" in r.getMessage()]
        assert len(said) == 1 and "lessonbank worker" in said[0] and "LESSONBANK_QDRANT_URL" in said[0]
        assert all(CSV in seen for seen in probe.told)  # read from the path, not silently nothing
        assert took[0] >= 1.0 and asked() == 1  # the absent owner is waited for once, not asked again
        redis_client.set(STORE_OWNER_KEY, "w@host")  # a worker announces itself: asked again at once
        started = time.monotonic()
        agent.run(CSV_TASK)
        assert time.monotonic() - started >= 1.0 and CSV in probe.told[-1] and asked() == 2
    finally:
        monitor.stop()
        recorder.close()
    assert int(redis_client.hget(RECORDER_STATS_KEY, "delivered") or 0) >= 4 * 3  # action, final, run_end per run


# -- managed agents ----------------------------------------------------------------------------------

def manager_with(sub_task: str) -> tuple[CodeAgent, CodeAgent, Probe]:
    ref: list[Any] = []
    probe = Probe(ref)
    sub = CodeAgent(tools=[], model=ScriptedModel([], then=probe), name="reader",
                    description="Reads data files and answers questions about them.", verbosity_level=0)
    ref.append(sub)
    manager = CodeAgent(tools=[], model=ScriptedModel([code_reply(f"print(reader(task={sub_task!r}))"),
                                                       final_code("done")]),
                        managed_agents=[sub], instructions=USER, verbosity_level=0)
    return manager, sub, probe


def test_managed_agents_are_recorded_and_start_with_their_sub_tasks_lessons(
    settings: Settings, store: LessonStore, redis_client: redis.Redis
) -> None:
    manager, sub, probe = manager_with(CSV_TASK)
    recorder = remember(manager, bank="team", settings=settings, store=store)
    try:
        assert manager.run("Write a haiku about autumn leaves, then check the sales numbers.") == "done"
        assert probe.told and CSV in probe.told[0]  # the sub-task's lessons
        assert CSV not in system_prompt(manager.model, 0)  # type: ignore[arg-type]
        assert remember(sub) is recorder  # shared: the manager's recorder and bank
        sub_run = recorder.run_id(sub)
        assert sub_run and sub_run != recorder.run_id(manager)
        state = run_hash(redis_client, sub_run)
        assert state["bank"] == "team" and state["agent"] == "reader"
        assert json.loads(state["given"]) == [Lesson.new("team", "approach", CSV).id]
        assert run_hash(redis_client, recorder.run_id(manager) or "")["given"] == "[]"
    finally:
        recorder.close()


def test_managed_agents_can_have_banks_of_their_own(settings: Settings, store: LessonStore,
                                                    redis_client: redis.Redis) -> None:
    own = "The regional sales files are UTF-16 encoded: open them with encoding='utf-16'."
    store.upsert([Lesson.new("team/reader", "fact", own).model_copy(update={"verified": True})])
    manager, sub, probe = manager_with("Read the regional sales files and sum the amounts")
    recorder = remember(manager, bank="team", settings=settings, store=store, managed="own")
    try:
        manager.run("Prepare the report")
        assert own in probe.told[0] and CSV not in probe.told[0]
        sub_recorder = remember(sub)
        assert sub_recorder is not recorder and sub_recorder.bank == "team/reader"
        assert run_hash(redis_client, sub_recorder.run_id(sub) or "")["bank"] == "team/reader"
        sub_recorder.close()
    finally:
        recorder.close()
    with pytest.raises(ConfigurationError, match="managed must be"):
        remember(make_agent(settings, store)[0], bank="team", settings=settings, managed="mine")  # type: ignore[arg-type]


# -- the README's usage example, as written ----------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.slow
def test_the_readme_quickstart_runs_as_written(redis_url: str, embed_model_path: Path, tmp_path: Path,
                                                  openai_server: FakeOpenAI, redis_client: redis.Redis) -> None:
    usage = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    [example] = [block for block in re.findall(r"```python\n(.*?)```", usage, re.S) if "OpenAIServerModel" in block]
    openai_server.script(
        Reply(content=code_reply("import csv, io\nrows = list(csv.DictReader(io.StringIO(read_file('sales.csv')), "
                                 "delimiter=';'))\nprint(sum(int(r['amount']) for r in rows))")),
        Reply(content=final_code(42)),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({"OPENAI_BASE_URL": openai_server.url, "OPENAI_API_KEY": "local", "LESSONBANK_REDIS_URL": redis_url,
                "LESSONBANK_DATA_DIR": str(tmp_path / "data"), "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path),
                "LESSONBANK_STORE_TIMEOUT": "0.5"})
    (tmp_path / "usage.py").write_text(example)  # smolagents' @tool reads the function's source from its file
    done = subprocess.run([sys.executable, "usage.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "42"
    assert done.stderr.count("no worker answered for the lesson store") == 1  # said plainly, once
    assert "lessonbank worker" in done.stderr
    assert distill_args(redis_client, "lessonbank") != []  # the run waits, recorded, for a worker


def test_recipes_can_be_left_out_of_the_instructions(settings: Settings, store: LessonStore) -> None:
    from lessonbank.core.models import Recipe

    recipe = Recipe(code="rows = open('data/sales.csv').read().split(';')\nfinal_answer(len(rows))", task=CSV_TASK,
                    fingerprint="f")  # calls no tool the agent lacks (final_answer is one of its tools)
    store.upsert([Lesson.new("team", "approach", f"Working code for a task like: {CSV_TASK}", origin="recipe",
                             recipe=recipe).model_copy(update={"verified": True})])
    with_code, _, with_probe = make_agent(settings, store)
    prose, _, prose_probe = make_agent(settings, store)
    first = remember(with_code, bank="team", settings=settings, store=store)
    second = remember(prose, bank="team", settings=settings, store=store, recipes=False)
    try:
        with_code.run(CSV_TASK)
        prose.run(CSV_TASK)
        # next to the code, the unproven "what worked" sentence is left out; without recipes it is the approach
        assert "```python" in with_probe.told[0] and CSV not in with_probe.told[0]
        assert "```python" not in prose_probe.told[0] and CSV in prose_probe.told[0]
    finally:
        first.close()
        second.close()


def test_a_check_never_stalls_the_run_when_redis_hangs(own_redis: RedisServer, tmp_path: Path) -> None:
    """Redis stops answering during a run with check=: the records go to the spool within the recorder's short
    timeout, and recording the verdict does not add a wait of the agent client's (seconds) on top."""
    settings = Settings(_env_file=None, redis_url=own_redis.url, data_dir=tmp_path / "data", openai_base_url=None,
                        openai_api_key=None)
    checked: list[Any] = []
    agent = CodeAgent(tools=[], model=ScriptedModel([], then=final_code(41)), verbosity_level=0)
    recorder = remember(agent, bank="team", settings=settings, holdout=0.999999, seed=1,
                        judge=lambda answer: checked.append(answer) or answer == 42)
    try:
        own_redis.freeze()
        started = time.monotonic()
        assert agent.run("What is 6 times 7?") == 41
        # the run itself takes 0.3 s idle; the agent client's wait for a hung Redis stalled it 8 s
        assert time.monotonic() - started < 5.0, "the check's verdict waited for a hung Redis"
        assert checked == [41]
    finally:
        own_redis.thaw()
        recorder.close()


def test_a_checks_verdict_given_while_redis_is_away_reaches_the_run_with_its_records(
        own_redis: RedisServer, tmp_path: Path) -> None:
    """Redis refuses when a run with check= ends: the verdict is spooled after the run's close, with its records,
    and replayed with them once Redis is back; a replay of the spool file records it once."""
    # a timeout long next to what a loaded machine adds to the run itself (0.1 s idle): the bound below is the
    # close's wait and the verdict's, not the machine's speed
    settings = Settings(_env_file=None, redis_url=own_redis.url, data_dir=tmp_path / "data", openai_base_url=None,
                        openai_api_key=None, redis_timeout=2.0)
    agent = CodeAgent(tools=[], model=ScriptedModel([], then=final_code(41)), verbosity_level=0)
    recorder = remember(agent, bank="team", settings=settings, holdout=0.999999, seed=1,
                        judge=lambda answer: answer == 42)
    try:
        own_redis.stop()
        started = time.monotonic()
        assert agent.run("What is 6 times 7?") == 41
        assert time.monotonic() - started < 2 * settings.redis_timeout + 0.5 + 0.5
        run_id = recorder.run_id(agent) or ""
        spooled = [json.loads(line) for path in settings.resolved_spool_dir.glob("spool-*.jsonl")
                   for line in path.read_text().splitlines()]
        assert [op["op"] for op in spooled][-2:] == ["close", "verdict"]  # after the close, in the run's file
        own_redis.start()  # same port
        assert recorder.flush()
        client = own_redis.client()
        state = run_hash(client, run_id)
        assert state["state"] == "closed" and (state["verdict"], state["verdict_source"]) == ("failure", "check")
        assert "check" not in state  # nothing left pending for the worker to wait for
        assert [r.kind for r in run_records(client, run_id)] == ["action", "final", "run_end"]
    finally:
        recorder.close()
