"""A lesson's provenance past its cap (``provenance.capped``), through real distillation and credit: the runs it no
longer lists still count in its evidence, and a late verdict on one of them still counts in its failures."""

from __future__ import annotations

import pytest

from lessonbank.core import runs
from lessonbank.core.models import Lesson
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.learn import provenance
from lessonbank.workers.deps import Deps
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import write_run

APPROACH = ("approach", "Read sales.csv with sep=';' and decimal=',' before summing the revenue column.")


def test_a_late_verdict_on_a_run_past_the_cap_still_counts(deps: Deps, openai_server: FakeOpenAI, store: LessonStore,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from lessonbank.workers.verdicts import credit_one

    monkeypatch.setattr(provenance, "MAX_PROVENANCE", 2)
    openai_server.default = Reply(content=lessons_json(APPROACH))
    for run_id in ("r1", "r2", "r3"):
        distill_one(deps, "b", write_run(deps.redis, "b", run_id=run_id))

    def taught() -> Lesson:
        (lesson,) = [lesson for lesson in store.list("b") if lesson.kind == "approach"]
        return lesson

    lesson = taught()
    assert [p.run_id for p in lesson.provenance] == ["r1", "r3"] and lesson.source_run_ids == ["r1", "r3"]
    assert (lesson.evidence, lesson.provenance_dropped, lesson.failed_runs) == (3, 1, 0)
    runs.set_verdict(deps.redis, "b", "r2", False, "user", "wrong total", "q")  # r2 is listed no more
    credit_one(deps, "b", "r2")
    assert (taught().evidence, taught().failed_runs) == (3, 1)
    runs.set_verdict(deps.redis, "b", "r2", True, "user", "", "q")
    credit_one(deps, "b", "r2")
    assert (taught().evidence, taught().failed_runs) == (3, 0)
