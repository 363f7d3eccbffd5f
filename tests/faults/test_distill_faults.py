"""The distilling LLM and the lesson store failing under a real worker.

Every LLM fault ends as lessons stored, a retry that then stores them, a run distilled without the LLM's
lessons (a reply still unusable after its repair, the reason kept on the run), or a dead letter with a reason:
never a run left without an outcome, never a secret in the bank. The worker reaches the fake LLM
through a relay that can refuse connections. Retries are capped at 2 (3 attempts), backoff 1 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import lessonbank
from lessonbank.core.constants import DROPPED_KEY, LLM_STATS_KEY, job_key
from lessonbank.workers import deadletters
from tests.faults.conftest import Report
from tests.faults.helpers import Service, by_task, deliveries, duplicate_lessons, wait_until
from tests.fixtures.openai_server import Reply, error, lessons_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUEUE = "faults-distill"
ATTEMPTS = 3  # max_retries 2
SEED = 20261202  # sent as LESSONBANK_LLM_SEED: every call of the worker carries it
GOOD = lessons_json(
    ("fact", "The sales.csv file is semicolon-delimited; read it with pandas.read_csv(path, sep=';')."),
    ("failure", "pandas.read_csv with the default comma separator fails on sales.csv with a ParserError."),
)
SECRET = "sk-proj-Zq3vN8xW2mK7pL4tR9yB6cJ1"
CLEAN = "Authenticate to the billing API with the key from the BILLING_KEY environment variable."


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, embed_model_path: Path) -> Iterator[Service]:
    service = Service(tmp_path_factory.mktemp("faults-distill"), embed_model_path, QUEUE, relay=True,
                      llm_seed=SEED).start()
    try:
        yield service
    finally:
        service.stop()


def invalid(lessons: list[dict[str, object]]) -> Reply:
    return Reply(content=json.dumps({"outcome": "success", "lessons": lessons}))


@dataclass
class Case:
    """One LLM behaviour and the outcome it must lead to."""

    replies: list[Reply]
    state: str  # distilled | dead
    lessons: int = 0
    attempts: int = 1
    requests: int = 1
    reason: str = ""  # in the dead letter, or in the run's llm_error when distilled without the LLM's lessons
    dropped_secret: int = 0  # lessons the quality gate dropped for carrying a secret
    waited: float = 0.0  # seconds the retry must wait (Retry-After, capped)


CASES: dict[str, Case] = {
    "slow past the timeout": Case([Reply(content=GOOD, delay=4)], "dead", attempts=ATTEMPTS, requests=ATTEMPTS,
                                  reason="timed out after 2s"),
    "500s then an answer": Case([error(500, "overloaded"), error(502, "bad gateway"), Reply(content=GOOD)],
                                "distilled", lessons=2, attempts=3, requests=3),
    "500s for good": Case([error(500, "overloaded")], "dead", attempts=ATTEMPTS, requests=ATTEMPTS,
                          reason="LLM answered 500: overloaded"),
    "429 with Retry-After": Case([error(429, "rate limited", headers={"Retry-After": "1"}), Reply(content=GOOD)],
                                 "distilled", lessons=2, attempts=2, requests=2, waited=1.0),
    "429 asking for an hour": Case([error(429, "quota", headers={"Retry-After": "3600"}), Reply(content=GOOD)],
                                   "distilled", lessons=2, attempts=2, requests=2, waited=1.0),  # capped at 1 s
    "truncated JSON": Case([Reply(content=GOOD[:60])], "distilled", requests=2, reason="invalid after one repair"),
    "cut-off response body": Case([Reply(body=b'{"id": "chatcmpl-1", "object": "chat.comp'), Reply(content=GOOD)],
                                  "distilled", lessons=2, attempts=2, requests=2),
    "a 1 MB reply": Case([Reply(content=lessons_json(("fact", "sales " * 200_000))), Reply(content=GOOD)],
                         "distilled", lessons=2, requests=2),
    "wrong kinds": Case([invalid([{"kind": "tip", "text": "Use sep=';' for sales.csv files.", "tags": []}])],
                        "distilled", requests=2, reason="no lesson in the reply has a valid kind"),
    "wrong kind, then repaired": Case(
        [invalid([{"kind": "hint", "text": "Use sep=';' for sales.csv files.", "tags": []}]), Reply(content=GOOD)],
        "distilled", lessons=2, requests=2),
    "empty lesson text": Case([invalid([{"kind": "fact", "text": "", "tags": []}])], "distilled", requests=2,
                              reason="no lesson in the reply has a valid kind"),
    "empty reply": Case([Reply(content="")], "distilled", requests=2, reason="the reply is empty"),
    "a secret in a lesson": Case(
        [Reply(content=lessons_json(("fact", f"Call the billing API with the key {SECRET} in the header."),
                                    ("approach", CLEAN)))],
        "distilled", lessons=1, dropped_secret=1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_llm_fault_ends_stored_retried_or_dead_lettered(svc: Service, name: str, report: Report) -> None:
    case, task, bank = CASES[name], f"Sum the sales ({name})", "llm-" + name.replace(" ", "-")
    svc.llm.reset()
    svc.llm.handler = by_task({task: case.replies})
    secrets_before = int(svc.client.hget(DROPPED_KEY, "secret") or 0)
    unusable_before = int(svc.client.hget(LLM_STATS_KEY, "unusable") or 0)
    run_id = svc.submit(bank, task=task)
    state = svc.wait(run_id, timeout=60)

    letter = svc.dead_letter(run_id)
    lessons = svc.lessons(bank, include_inactive=True)
    requests = svc.requests_for(task)
    outcome = (state["state"], len(lessons), int(state.get("distill_attempts", 0)), len(requests))
    assert outcome == (case.state, case.lessons, case.attempts, case.requests), outcome
    assert [r.get("seed") for r in requests] == [SEED] * len(requests)  # LESSONBANK_LLM_SEED, every call
    assert deliveries(svc.client, run_id) == case.attempts  # one delivery per attempt, no duplicate
    if case.state == "dead":
        assert letter is not None and letter.bank == bank and letter.attempts == case.attempts
        assert case.reason in letter.reason, letter.reason
    else:
        counts = json.loads(state["lessons"])
        assert letter is None
        assert (case.reason in state.get("llm_error", "")) and (bool(case.reason) == ("llm_error" in state)), state
        # counted for `lessonbank status` once per such run
        assert int(svc.client.hget(LLM_STATS_KEY, "unusable") or 0) - unusable_before == bool(case.reason)
        assert counts["added"] == case.lessons, counts
        assert int(svc.client.hget(DROPPED_KEY, "secret") or 0) - secrets_before == case.dropped_secret
        assert all(lesson.source_run_ids == [run_id] for lesson in lessons)
    assert all(SECRET not in lesson.text for lesson in lessons)
    if case.waited:  # the retry came no sooner than the server asked (capped by the longest backoff)
        assert requests[1]["_at"] - requests[0]["_at"] >= case.waited
    if name == "a 1 MB reply":  # what the worker sent back asking for a repair: a bounded excerpt, not 1 MB
        assert len(json.dumps(requests[1])) < 40_000
        assert svc.worker is not None and "sales sales sales" not in svc.worker.log()
    if name == "a secret in a lesson":
        assert [lesson.text for lesson in lessons] == [CLEAN]
        assert svc.worker is not None and SECRET not in svc.worker.log()
    report(f"LLM: {name}", faults=1, runs=1, deliveries=deliveries(svc.client, run_id),
           duplicate_tasks=deliveries(svc.client, run_id) - case.attempts, llm_calls=len(requests),
           duplicate_lessons=len(lessons) - len({lesson.text for lesson in lessons}))


def test_llm_connection_refused_dead_letters_then_retry_stores(svc: Service, report: Report) -> None:
    assert svc.relay is not None
    task, bank = "Sum the sales (LLM refused)", "llm-refused"
    svc.llm.reset()
    svc.llm.handler = by_task({task: [Reply(content=GOOD)]})
    svc.relay.close()
    try:
        run_id = svc.submit(bank, task=task)
        assert svc.wait(run_id)["state"] == "dead"
    finally:
        svc.relay.open()
    letter = svc.dead_letter(run_id)
    assert letter is not None and letter.attempts == ATTEMPTS and "LLM unreachable" in letter.reason
    assert svc.requests_for(task) == [] and svc.lessons(bank) == []

    deadletters.retry(svc.client, run_id, QUEUE)
    assert svc.wait(run_id, states=("distilled",))["state"] == "distilled"
    assert svc.dead_letter(run_id) is None
    assert len(svc.requests_for(task)) == 1 and len(svc.lessons(bank)) == 2
    report("LLM port refusing connections, then a dead-letter retry", faults=1, runs=1,
           deliveries=deliveries(svc.client, run_id), duplicate_tasks=deliveries(svc.client, run_id) - ATTEMPTS - 1,
           llm_calls=len(svc.requests_for(task)), duplicate_lessons=duplicate_lessons(svc, bank))


def test_store_owner_unavailable_task_retries_then_stores(svc: Service, report: Report) -> None:
    """The worker's main process (which owns the embedded store) is SIGSTOPped while a pool process
    distills: the store calls time out, the task is retried, and after SIGCONT it stores the lessons
    from the checkpointed LLM output. Meanwhile an agent starts with empty instructions, quickly."""
    worker = svc.worker
    assert worker is not None and worker.process is not None
    task, bank = "Sum the sales (store away)", "store-away"
    release = svc.llm.released_event()
    svc.llm.reset()
    svc.llm.handler = by_task({task: [Reply(content=GOOD, block=release)]})
    run_id = svc.submit(bank, task=task)
    svc.llm.wait_for_requests(1)
    os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        release.set()
        # the pool process fails to reach the store (3 s) and schedules the retry; the keeper that would send
        # it is in the stopped process
        job = job_key(f"distill:{run_id}")
        wait_until(lambda: svc.client.hget(job, "retries") == b"1" and not svc.client.hexists(job, "holder"), 20,
                   "the retry to be scheduled")
        agent_settings = svc.settings.model_copy(update={"store_timeout": 1.0})
        started = time.monotonic()
        assert lessonbank.lessons_block(task, bank, settings=agent_settings).text == ""
        assert time.monotonic() - started < agent_settings.store_timeout + 10  # not the socket's 30 s
        assert svc.state(run_id)["state"] == "closed"
    finally:
        os.kill(worker.process.pid, signal.SIGCONT)
    state = svc.wait(run_id)
    assert state["state"] == "distilled" and state["distill_attempts"] == "2"
    assert len(svc.requests_for(task)) == 1  # the retry reused the LLM's checkpointed output
    lessons = svc.lessons(bank)
    assert len(lessons) == 2 and all(lesson.evidence == 1 for lesson in lessons)
    wait_until(lambda: re.search(r"ServiceUnavailable: .*lesson store owner", worker.log()), 10,
               "the retry's reason in the log")
    report("the store owner (worker main process) SIGSTOPped mid-distillation", faults=1, runs=1,
           deliveries=deliveries(svc.client, run_id), duplicate_tasks=deliveries(svc.client, run_id) - 2,
           llm_calls=len(svc.requests_for(task)), duplicate_lessons=duplicate_lessons(svc, bank))
