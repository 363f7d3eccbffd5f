"""Lessons judged by outcomes, with real processes: scripted CodeAgents under ``remember(judge=...)``, a real
``celery -A lessonbank.workers worker`` distilling and crediting through a real HTTP server speaking the OpenAI
protocol, and ``lessonbank.feedback`` from the user.

- A run that fails twice, then succeeds with a pagination loop, leaves one recipe — the loop with its final
  answer, not the failed attempts — and the next run of a similar task starts with it as a code block.
- A lesson applied by three runs that then fail is retired and no longer handed out; a lesson applied by runs
  that succeed rises.
- A run the check judged wrong and the user right, after it was distilled, leaves its recipe for the next run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from smolagents import CodeAgent, tool

import lessonbank
from lessonbank.core.constants import RUN_DISTILLED
from lessonbank.core.models import Lesson
from lessonbank.core.settings import Settings
from lessonbank.core.store.remote import connect_store
from tests.fixtures.celery_worker import CeleryWorker, worker_env
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import run_state
from tests.fixtures.scripted_model import ScriptedModel, code_reply

pytestmark = pytest.mark.slow

QUEUE = "e2e-learning"
TASK = "How many orders were placed on {date}? Answer with the number only."
PAGES, PER_PAGE = 3, 2


@tool
def list_orders(date: str, page: int = 1, single_page: bool = False) -> dict:
    """List the orders placed on one day.

    Args:
        date: The day, as YYYY-MM-DD.
        page: Which page of results to return.
        single_page: Return the results as one page.
    """
    if page < 1 or page > PAGES:
        raise ValueError(f"no page {page}")
    orders = [{"id": f"{date}-{page}-{i}"} for i in range(PER_PAGE)]
    return {"orders": orders, "page": page, "pages": PAGES}


LOOP = ("count = 0\npage = 1\nwhile True:\n    data = list_orders(date='{date}', page=page)\n"
        "    count += len(data['orders'])\n    if page >= data['pages']:\n        break\n    page += 1\nprint(count)")


def fails_twice_then_loops(date: str) -> list[str]:
    return [
        code_reply(f"data = list_orders(date='{date}', page=0)"),
        code_reply(f"data = list_orders(date='{date}')\nprint(data['items'])"),
        code_reply(LOOP.format(date=date)),
        code_reply("final_answer(count)"),
    ]


def one_call(date: str, flag: str = "single_page=True") -> list[str]:
    return [code_reply(f"data = list_orders(date='{date}', {flag})\nfinal_answer(len(data['orders']))")]


def right(answer: Any) -> bool:
    return answer == PAGES * PER_PAGE


@pytest.fixture
def worker(redis_url: str, openai_server: FakeOpenAI, embed_model_path: Path, tmp_path: Path) -> Iterator[CeleryWorker]:
    openai_server.default = Reply(content=lessons_json())  # the LLM writes nothing: what follows is deterministic
    env = worker_env(redis_url, QUEUE, tmp_path / "data", openai_server.url, embed_model_path)
    worker = CeleryWorker(env, QUEUE, tmp_path / "worker.log").start()
    yield worker
    worker.stop()


@pytest.fixture
def agent_settings(redis_url: str, tmp_path: Path, embed_model_path: Path) -> Settings:
    return Settings(_env_file=None, redis_url=redis_url, queue=QUEUE, data_dir=tmp_path / "data",
                    embed_model_path=embed_model_path, store_timeout=15, qdrant_url=None)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        time.sleep(0.2)


def told(model: ScriptedModel, call: int) -> str:
    """The system prompt and the task message of the model's call ``call``: what the run was told."""
    return "\n\n".join(str(m.content[0]["text"]) for m in model.calls[call]["messages"][:2])


class Session:
    """One agent with memory; each run gets its own scripted replies."""

    def __init__(self, bank: str, settings: Settings, client: redis.Redis, **remember: Any) -> None:
        self.model = ScriptedModel([])
        self.agent = CodeAgent(tools=[list_orders], model=self.model, max_steps=6, verbosity_level=0)
        self.recorder = lessonbank.remember(self.agent, bank=bank, settings=settings, **remember)
        self.client = client

    def run(self, date: str, replies: list[str]) -> tuple[str, str]:
        """(run id, what it was told: system prompt and task); waits until the worker distilled it."""
        first = len(self.model.calls)
        self.model.replies = self.model.replies[: len(self.model.calls)] + replies
        self.agent.run(TASK.format(date=date))
        run_id = self.recorder.run_id(self.agent) or ""
        wait_for(lambda: run_state(self.client, run_id).get("state") == RUN_DISTILLED, f"distillation of {run_id}")
        return run_id, told(self.model, first)


def test_a_run_that_fails_twice_then_loops_leaves_one_recipe_for_the_next_run(
    worker: CeleryWorker, agent_settings: Settings, redis_client: redis.Redis
) -> None:
    session = Session("orders", agent_settings, redis_client, judge=right)
    run_id, _ = session.run("2024-03-05", fails_twice_then_loops("2024-03-05"))
    assert run_state(redis_client, run_id)["verdict"] == "success"
    store = connect_store(agent_settings)
    (recipe,) = [lesson for lesson in store.list("orders") if lesson.recipe is not None]
    assert recipe.recipe is not None
    code = recipe.recipe.code
    assert "while True:" in code and "final_answer(count)" in code
    assert "page=0" not in code and "['items']" not in code and "print(" not in code
    assert recipe.recipe.params == ["2024-03-05"] and "outcome:check" in recipe.recipe.checks

    loop = [code_reply(LOOP.format(date="2024-04-01")), code_reply("final_answer(count)")]
    _, prompt = session.run("2024-04-01", loop)
    assert "```python\n" + code.replace("2024-03-05", "2024-04-01") in prompt  # the same task but for its date
    assert "with this task's values put in:" in prompt and "2024-03-05" not in prompt  # never the other task's value
    session.recorder.close()


WRONG = "The orders API returns every order of a day at once when list_orders is called with single_page=True."
RIGHT = "The orders API returns its orders in 'pages': call list_orders with page=1, 2, ... up to that number."


def test_a_lesson_that_fails_three_times_is_retired_and_one_that_helps_rises(
    worker: CeleryWorker, agent_settings: Settings, redis_client: redis.Redis
) -> None:
    store = connect_store(agent_settings)
    wrong, good = Lesson.new("credit", "approach", WRONG, origin="added"), Lesson.new(
        "credit", "fact", RIGHT, origin="added")
    store.upsert([wrong, good])
    session = Session("credit", agent_settings, redis_client)  # no check: the user says how runs went

    for number, date in enumerate(("2024-05-01", "2024-05-02", "2024-05-03")):
        run_id, prompt = session.run(date, one_call(date))
        assert WRONG in prompt  # it is still handed out...
        assert lessonbank.feedback(run_id, success=False, note="only 2 orders counted", settings=agent_settings)
        wait_for(lambda n=number: store.get("credit", [wrong.id])[0].harmful == n + 1, "harmful credit")  # type: ignore[misc]
    stored = store.get("credit", [wrong.id])[0]
    assert stored.status == "retired" and (stored.given, stored.applied, stored.harmful) == (3, 3, 3)
    assert "harmful in 3 of 3 runs" in stored.status_reason
    assert store.get("credit", [good.id])[0].harmful == 0  # given, but not applied: no blame

    for date in ("2024-05-04", "2024-05-05"):
        run_id, prompt = session.run(date, [code_reply(LOOP.format(date=date)), code_reply("final_answer(count)")])
        assert WRONG not in prompt and RIGHT in prompt  # ...until it is retired
        assert lessonbank.feedback(run_id, success=True, settings=agent_settings)
    wait_for(lambda: store.get("credit", [good.id])[0].helpful == 2, "helpful credit")
    risen = store.get("credit", [good.id])[0]
    assert risen.utility > 0.5 > stored.utility and risen.status == "active"
    session.recorder.close()


def test_your_right_after_the_check_said_wrong_leaves_the_recipe_for_the_next_run(
    worker: CeleryWorker, agent_settings: Settings, redis_client: redis.Redis
) -> None:
    """The check was wrong (it wanted another count): the run was distilled as a failure and kept no recipe. The
    user's "right", given after that, has the worker keep it, and the next run of a similar task starts with it."""
    session = Session("late", agent_settings, redis_client, judge=lambda answer: answer == 5)
    loop = [code_reply(LOOP.format(date="2024-06-01")), code_reply("final_answer(count)")]
    run_id, _ = session.run("2024-06-01", loop)
    assert run_state(redis_client, run_id)["verdict"] == "failure"
    store = connect_store(agent_settings)
    assert [lesson for lesson in store.list("late") if lesson.recipe is not None] == []
    assert lessonbank.feedback(run_id, success=True, settings=agent_settings)
    wait_for(lambda: any(lesson.recipe is not None for lesson in store.list("late")), "the recipe of the late right")
    (recipe,) = [lesson for lesson in store.list("late") if lesson.recipe is not None]
    assert recipe.recipe is not None and "outcome:user" in recipe.recipe.checks and recipe.verified
    _, prompt = session.run("2024-06-02", [code_reply(LOOP.format(date="2024-06-02")),
                                           code_reply("final_answer(count)")])
    assert "```python\n" + recipe.recipe.code.replace("2024-06-01", "2024-06-02") in prompt
    session.recorder.close()
