"""The loop closed with real processes: run 1 learns, the worker distills, run 2 starts knowing it.

A CodeAgent (scripted model) reads a semicolon CSV, fails with the default separator, succeeds with
``delimiter=';'``; a check finds its answer right. A real ``celery -A workers worker`` process distills the
run through a real HTTP server speaking the OpenAI protocol and stores the lesson in the embedded Qdrant
store it owns. Run 2, in this (other) process, starts with instructions holding that lesson, read over Redis
from the worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from smolagents import CodeAgent, tool

import lessonbank
from lessonbank.core.constants import RUN_DISTILLED
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import connect_store
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state
from tests.fixtures.scripted_model import ScriptedModel, code_reply

pytestmark = pytest.mark.slow

BANK = "csv-reports"
LESSON = (  # grounded: every name and value in it is in what run 1 did or saw
    "The sales CSV files use ';' as the field separator: read them with "
    "csv.DictReader(io.StringIO(text), delimiter=';')."
)
TASK = "What is the total of the 'amount' column in {path}?"


@pytest.fixture
def sales_csv(tmp_path: Path) -> Path:
    path = tmp_path / "sales.csv"
    path.write_text("date;region;amount\n2024-01-01;north;10\n2024-01-02;south;32\n")
    return path


@pytest.fixture
def worker(redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path) -> Iterator[CeleryWorker]:
    env = worker_env(redis_url, "e2e", tmp_path / "data", openai_server.url, embed_model_path)
    worker = CeleryWorker(env, "e2e", tmp_path / "worker.log").start()
    yield worker
    worker.stop()


@pytest.fixture
def agent_settings(redis_url: str, tmp_path: Path, embed_model_path: Path) -> Settings:
    """The agent process's settings: same Redis, queue and data dir as the worker; no Qdrant URL."""
    return Settings(
        _env_file=None,
        redis_url=redis_url,
        queue="e2e",
        data_dir=tmp_path / "data",
        embed_model_path=embed_model_path,
        store_timeout=15,
        qdrant_url=None,
    )


def wait_distilled(client: redis.Redis, run_id: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run_state(client, run_id).get("state") == RUN_DISTILLED:
            return
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} not distilled in {timeout}s: {run_state(client, run_id)}")


@tool
def read_text_file(path: str) -> str:
    """Return the text content of a file.

    Args:
        path: Path of the file to read.
    """
    return Path(path).read_text()


def read_csv_code(path: Path, delimiter: str | None) -> str:
    reader = (
        "csv.DictReader(io.StringIO(text))"
        if delimiter is None
        else f"csv.DictReader(io.StringIO(text), delimiter={delimiter!r})"
    )
    return code_reply(
        f"import csv, io\ntext = read_text_file(path={str(path)!r})\nrows = list({reader})\n"
        "total = sum(int(r['amount']) for r in rows)\nprint(total)"
    )


def run_one(path: Path) -> list[str]:
    """The first run's trajectory: the default separator fails, ';' works."""
    return [read_csv_code(path, None), read_csv_code(path, ";"), code_reply("final_answer(total)")]


def run_two(path: Path) -> list[str]:
    """The second run asks its memory first, then reads the file right the first time."""
    return [
        code_reply("print(recall_lessons(query='csv separator', limit=3))"),
        read_csv_code(path, ";"),
        code_reply("final_answer(total)"),
    ]


def test_run_two_knows_what_run_one_learnt(
    worker: CeleryWorker,
    openai_server: FakeOpenAI,
    agent_settings: Settings,
    redis_client: redis.Redis,
    sales_csv: Path,
) -> None:
    openai_server.script(Reply(content=lessons_json(("fact", LESSON))))
    task = TASK.format(path=sales_csv)

    model = ScriptedModel(run_one(sales_csv) + run_two(sales_csv))
    agent = CodeAgent(
        tools=[read_text_file, *lessonbank.memory_tools(BANK, settings=agent_settings)],
        model=model,
        additional_authorized_imports=["csv", "io"],
        instructions="Answer with a number.",
        max_steps=5,
    )
    # the check vouches for run 1: its own signals alone would make it one witness, waiting for a second run
    recorder = lessonbank.remember(agent, bank=BANK, settings=agent_settings, check=lambda answer: answer == 42)

    # Run 1: the bank is empty, so no lessons; the first step fails on the separator.
    assert agent.run(task) == 42
    first_prompt = model.calls[0]["messages"][0].content[0]["text"]
    first_task = model.calls[0]["messages"][1].content[0]["text"]
    assert "Answer with a number." in first_prompt and "## Lessons from earlier runs" not in first_prompt + first_task
    assert any(getattr(step, "error", None) for step in agent.memory.steps)
    run_one_id = recorder.run_id(agent)
    assert run_one_id
    wait_distilled(redis_client, run_one_id)

    # The worker made one chat-completion call for the run, carrying the failure and the fix.
    [request] = openai_server.chat_requests()
    transcript = "\n".join(str(m["content"]) for m in request["messages"])
    assert "delimiter=';'" in transcript and "KeyError" in transcript

    # Run 2: its task comes with the lesson (the user's instructions as they were), and recall_lessons returns it.
    calls_before = len(model.calls)
    assert agent.run(task) == 42
    second_prompt = model.calls[calls_before]["messages"][0].content[0]["text"]
    second_task = model.calls[calls_before]["messages"][1].content[0]["text"]
    assert "Answer with a number." in second_prompt and "## Lessons from earlier runs" not in second_prompt
    assert second_task.startswith(f"New task:\n{task}") and "delimiter=';'" in second_task
    assert "## Lessons from earlier runs" in second_task
    recall_observation = next(step.observations for step in agent.memory.steps if getattr(step, "observations", None))
    assert "delimiter=';'" in recall_observation
    assert recorder.run_id(agent) != run_one_id

    # Another bank gets nothing, through the builder and through the recall tool.
    assert lessonbank.lessons_block(task, "other-bank", settings=agent_settings).text == ""
    other_recall = lessonbank.memory_tools("other-bank", settings=agent_settings)[0]
    assert "delimiter" not in other_recall(query="csv separator")

    # The lesson is in the store the worker owns, once, with run 1 as its source.
    store = connect_store(agent_settings)
    [lesson] = [lesson for lesson in store.list(BANK) if lesson.recipe is None and "shape" not in lesson.tags]
    assert lesson.kind == "fact" and run_one_id in lesson.source_run_ids
    [recipe] = [lesson for lesson in store.list(BANK) if lesson.recipe is not None]  # run 1 ended well
    assert recipe.recipe is not None and "delimiter=';'" in recipe.recipe.code
    assert store.list("other-bank") == []
