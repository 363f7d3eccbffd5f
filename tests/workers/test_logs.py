"""The lines a worker logs while it distills a run say which bank and run they are about, once: those of
``lessonbank.learn`` and ``lessonbank.core`` (which know no bank and no run) too; what the gate drops is named at
DEBUG, never a secret.

Real Redis, a real in-memory Qdrant store, a real HTTP server speaking the OpenAI protocol and a real CodeAgent
run recorded by the real recorder."""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import pytest

from lessonbank.core.constants import pending_lesson_key, run_steps_key
from lessonbank.core.models import Lesson
from lessonbank.core.redact import REDACTED, WITHHELD, Redactor, Rule
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers.deps import Deps
from lessonbank.workers.observe import tracing
from lessonbank.workers.pipeline import distill_one, remember_one
from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.runs import write_run
from tests.workers.test_pipeline import get_invoice, recorded_run

TASK = "What is the total of invoice INV-1 in euros?"
KEY = "sk-abcdefghijklmn1234"
PASSWORD = "hunter2secret"
PLAN = "I will read the sales CSV files with a semicolon separator next time."
COMPUTED = "inv = get_invoice('INV-1')\ntotal = sum(l['qty'] * l['unit_price_cents'] / 100 for l in inv['lines'])"


def reply(*lessons: dict[str, object]) -> Reply:
    return Reply(content=json.dumps({"outcome": "success", "lessons": list(lessons)}))


def learn_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank.learn")]


def test_learn_lines_of_a_distillation_name_its_bank_and_run(
    deps: Deps, openai_server: FakeOpenAI, store: LessonStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A lesson of the reply that is not one, and a recipe not kept (the answer is a literal the code never computed):
    both said by lessonbank.learn, both name the bank and the run."""
    caplog.set_level(logging.INFO)
    openai_server.default = reply({"kind": "fact", "text": "Invoice lines carry unit prices in cents.", "tags": []},
                                  {"kind": "opinion", "text": "Invoices are paid in euros.", "tags": []})
    run_id = recorded_run(deps.settings, get_invoice, TASK, [f"{COMPUTED}\nprint(total)", "final_answer(49.0)"],
                          verdict=True)
    distill_one(deps, "b", run_id)
    lines = learn_lines(caplog)
    assert lines, "lessonbank.learn logged nothing: the run no longer exercises it"
    assert all(line.startswith(f"bank b run {run_id}: ") for line in lines), lines
    assert any(line.startswith(f"bank b run {run_id}: dropping lesson 1 of the reply") for line in lines)
    assert any(line.startswith(f"bank b run {run_id}: recipe not kept: it answers with '49.0'") for line in lines)


def test_core_lines_of_a_distillation_name_its_bank_and_run_once(
    deps: Deps, openai_server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """A rule of the scrubber that fails: lessonbank.core says so (and fails closed) while the run is distilled, and
    its line names the bank and the run; core's line about a malformed record, which names the run, and the
    worker's own lines are not prefixed a second time."""
    caplog.set_level(logging.INFO, logger="lessonbank")
    scrubber = Redactor()
    scrubber.rules = (*scrubber.rules, Rule("failing", re.compile("cents"), keep=lambda text, match: 1 / 0 > 0))
    openai_server.default = reply({"kind": "fact", "text": "Invoice lines carry unit prices in cents.", "tags": []})
    run_id = write_run(deps.redis, "b")
    deps.redis.hset(run_steps_key(run_id), "99", "{not a step record")
    distill_one(dataclasses.replace(deps, scrubber=scrubber), "b", run_id)
    core = [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank.core")]
    assert f"bank b run {run_id}: secret detection failed; treating the text as secret" in core, core
    assert f"run {run_id}: skipping malformed step record (field 99)" in core, core
    said = [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank")]
    assert any(line.startswith(f"bank b run {run_id}: attempt 1") for line in said), said  # the worker's own
    assert not [line for line in said if line.count(run_id) > 1 or line.count("bank b") > 1], said


def test_a_scope_prefixes_lines_that_do_not_name_it_and_keeps_their_arguments(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    learn, core = logging.getLogger("lessonbank.learn.somewhere"), logging.getLogger("lessonbank.core.somewhere")
    other, foreign = logging.getLogger("lessonbank.workers.x"), logging.getLogger("httpx")

    @tracing.traced("test scope")
    def work(bank: str, run_id: str) -> logging.LogRecord:
        learn.info("kept %d of %s", 2, "3")
        learn.info("100% of nothing")
        core.warning("it failed")
        core.warning("run %s: a record skipped", run_id)
        other.info("bank %s run %s: its own words", bank, run_id)
        other.info("bank %s: a lesson retired", bank)
        other.info("bank %sx: another bank", bank)
        foreign.info("a library's line")
        # a call whose arguments do not fit: the record is made (logging reports the error when it is formatted)
        return logging.getLogRecordFactory()("lessonbank.core.x", logging.INFO, __file__, 1, "%d of %d", (1,), None)

    assert work("b%s", "r1").msg == "bank b%%s run r1: %d of %d"
    assert tracing.traced("test scope")(lambda bank, run_id: logging.makeLogRecord({"msg": "m"}))("b", "r1").msg == "m"
    learn.info("outside any scope")
    assert [r.getMessage() for r in caplog.records] == [
        "bank b%s run r1: kept 2 of 3", "bank b%s run r1: 100% of nothing", "bank b%s run r1: it failed",
        "run r1: a record skipped", "bank b%s run r1: its own words", "bank b%s: a lesson retired",
        "bank b%s run r1: bank b%sx: another bank", "a library's line", "outside any scope",
    ]


def test_what_the_gate_and_the_distiller_dropped_is_logged_at_debug_and_no_secret(
    deps: Deps, openai_server: FakeOpenAI, store: LessonStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The gate drops a plan in the first person and a lesson with a key; the distiller drops a lesson it cannot
    read and the lessons over its maximum. At DEBUG each is named with its rule and its text; a secret in any of
    them is redacted or the text withheld: it reaches no line."""
    caplog.set_level(logging.DEBUG, logger="lessonbank")
    few = dataclasses.replace(deps, settings=deps.settings.model_copy(update={"distill_max_lessons": 2}))
    openai_server.default = reply(
        {"kind": "fact", "text": PLAN, "tags": []},
        {"kind": "fact", "text": f"The sales API takes the key {KEY} in its X-Key header.", "tags": []},
        {"kind": "opinion", "text": f"Sales files are read with the key {KEY}.", "tags": []},
        {"kind": "failure", "text": f"Log in to the sales API with password: {PASSWORD} first.", "tags": []},
    )
    run_id = write_run(deps.redis, "b")
    distill_one(few, "b", run_id)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank")]
    assert f"bank b run {run_id}: gate dropped a lesson (first_person_plan): {PLAN}" in said
    assert f"bank b run {run_id}: gate dropped a lesson (secret): {WITHHELD}" in said
    assert f"bank b run {run_id}: lesson 2 of the reply, dropped: {WITHHELD}" in said
    assert f"bank b run {run_id}: lesson 3 of the reply, dropped: Log in to the sales API with password: {REDACTED}" \
        in said
    assert not [line for line in said if KEY in line or PASSWORD in line]
    assert store.list("b") == []


def test_at_info_a_drop_is_counted_and_its_text_not_shown(
    deps: Deps, openai_server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lessonbank")
    openai_server.default = reply({"kind": "fact", "text": PLAN, "tags": []})
    run_id = write_run(deps.redis, "b")
    distill_one(deps, "b", run_id)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank")]
    assert f"bank b run {run_id}: gate dropped 1 first_person_plan" in said
    assert not [line for line in said if PLAN in line]


def test_a_remembered_lesson_the_gate_dropped_is_logged_at_debug(
    deps: Deps, store: LessonStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lessonbank")
    for pending_id, text in (("p1", PLAN), ("p2", f"The sales API takes the key {KEY} in its X-Key header.")):
        deps.redis.set(pending_lesson_key(pending_id), Lesson.new("b", "fact", text, origin="remembered").to_json())
        assert remember_one(deps, "b", pending_id) is not None
    said = [r.getMessage() for r in caplog.records if r.name.startswith("lessonbank")]
    assert f"bank b remembered lesson p1: gate dropped it (first_person_plan): {PLAN}" in said
    assert f"bank b remembered lesson p2: gate dropped it (secret): {WITHHELD}" in said
    assert not [line for line in said if KEY in line] and store.list("b") == []
