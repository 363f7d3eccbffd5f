"""``lessonbank banks list|delete`` and ``lessons forget --purge``: deleting for good, on a real redis-server and a
real embedded store. After a bank is deleted, nothing in Redis names it or its runs; purged lessons leave a
tombstone (no text) that keeps the same text from being learnt again until the user allows it."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import pytest
import redis
from qdrant_client import QdrantClient

from lessonbank.core import purge, runs
from lessonbank.core.constants import CREDIT_TASK, DEFAULT_QUEUE, bank_deleted_key, bank_lock_key, pending_lesson_key
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson, Recipe, RunSummary, lesson_id, recipe_id
from lessonbank.core.publish import publish
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.summary import save_summary
from lessonbank.workers import deadletters
from tests.cli.test_lessons import failed, ok, run
from tests.fixtures.recorded import queued_tasks
from tests.fixtures.redis_server import free_port
from tests.fixtures.runs import make_steps, write_run

GONE = "acme-7f3e"  # a name found nowhere else
KEPT = "globex"
GONE_TEXTS = [
    "Acme invoices list amounts in cents in the field amount_cents_7f3e; divide by 100.",
    "The acme warehouse API pages with cursor_7f3e and returns at most 50 items per page.",
]
GONE_RECIPE_CODE = "import pandas as pd\ndf = pd.read_csv('acme_7f3e.csv')\nfinal_answer(df['amount_7f3e'].sum())"
KEPT_TEXT = "Globex reports are UTF-16 encoded; open them with encoding='utf-16'."


def bank_lessons(bank: str, texts: list[str]) -> list[Lesson]:
    return [Lesson.new(bank, "fact", text) for text in texts]


def seed_bank(client: redis.Redis, bank: str) -> list[str]:
    """Everything a bank leaves in Redis: open and finished runs with steps, a checkpoint, summaries, a dead
    letter, a pending remembered lesson, queued distill and credit tasks, a tombstone."""
    closed = write_run(client, bank, task=f"Sum the {bank} invoices")
    open_run = write_run(client, bank, state="open")
    dead = write_run(client, bank, state="dead")
    runs.save_checkpoint(client, closed, json.dumps({"lessons": [{"kind": "fact", "text": f"{bank} checkpoint"}]}))
    for run_id in (closed, dead):
        save_summary(client, RunSummary(run_id=run_id, bank=bank, task=f"{bank} task", started_at=time.time()))
    deadletters.add(client, dead, bank, "LLM answered 400", 1)
    closing = uuid.uuid4().hex
    steps = make_steps(bank, closing, f"Count the {bank} orders")
    for step in steps[:-1]:
        runs.record_step(client, runs.RunRef(bank, closing), step.seq, step.to_json(), time.time())
    runs.close_run(client, runs.RunRef(bank, closing), steps[-1].seq, steps[-1].to_json(), "success", time.time(),
                   DEFAULT_QUEUE)
    publish(client, DEFAULT_QUEUE, CREDIT_TASK, [bank, closed])
    pending = Lesson.new(bank, "fact", f"The {bank} export is zipped.", origin="remembered")
    client.set(pending_lesson_key(uuid.uuid4().hex), pending.to_json(), ex=3600)
    purge.add_tombstones(client, bank, [lesson_id(bank, f"{bank} purged lesson")])
    return [closed, open_run, dead, closing]


def everything_in(client: redis.Redis) -> dict[str, bytes]:
    """Every key and its whole content (queue messages with their bodies decoded)."""
    contents: dict[str, bytes] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        kind = client.type(key).decode()
        if kind == "string":
            value = client.get(key) or b""
        elif kind == "hash":
            value = b"\n".join(k + b"=" + v for k, v in client.hgetall(key).items())
        elif kind == "list":
            items = client.lrange(key, 0, -1)
            value = b"\n".join(items + [base64.b64decode(json.loads(i)["body"]) for i in items if i.startswith(b"{")])
        elif kind == "set":
            value = b"\n".join(client.smembers(key))
        else:
            value = b"\n".join(m for m, _ in client.zrange(key, 0, -1, withscores=True))
        contents[key] = value
    return contents


@pytest.fixture
def two_banks(env: dict[str, str | None], embedder: FastEmbedEmbedder, redis_client: redis.Redis,
              ) -> tuple[dict[str, str | None], list[str], list[str]]:
    recipe = Recipe(code=GONE_RECIPE_CODE, task="Sum the acme invoices", fingerprint="7f3e7f3e7f3e7f3e")
    gone = [*bank_lessons(GONE, GONE_TEXTS),
            Lesson.new(GONE, "approach", "Working code for a task like: Sum the acme 7f3e invoices", recipe=recipe,
                       origin="recipe").model_copy(update={"id": recipe_id(GONE, recipe.fingerprint)})]
    gone[1] = gone[1].model_copy(update={"status": "forgotten"})
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([*gone, *bank_lessons(KEPT, [KEPT_TEXT])])
    client.close()
    return env, seed_bank(redis_client, GONE), seed_bank(redis_client, KEPT)


def test_banks_list_shows_lessons_and_runs(two_banks: tuple[dict[str, str | None], list[str], list[str]]) -> None:
    env, _, _ = two_banks
    listed = json.loads(ok(env, "banks", "list", "--json").stdout)
    assert listed == [{"bank": GONE, "lessons": 2, "runs": 2}, {"bank": KEPT, "lessons": 1, "runs": 2}]
    text = ok(env, "banks", "list").stdout.splitlines()
    assert text[0].split() == ["bank", "lessons", "runs"] and text[1].split() == [repr(GONE), "2", "2"]


def test_delete_a_bank_leaves_nothing_of_it_in_redis(two_banks: tuple[dict[str, str | None], list[str], list[str]],
                                                     redis_client: redis.Redis) -> None:
    env, gone_runs, kept_runs = two_banks
    before = everything_in(redis_client)
    declined = run(env, "banks", "delete", GONE, input="n\n")
    assert declined.exit_code != 0 and f"Delete bank '{GONE}' for good: 3 lesson(s), 4 run(s)" in declined.stdout
    assert everything_in(redis_client) == before and len(json.loads(ok(env, "lessons", "list", "-b", GONE,
                                                                        "--json").stdout)) == 2

    out = ok(env, "banks", "delete", GONE, "--yes").stdout
    assert out.strip() == (f"Deleted bank '{GONE}': 3 lesson(s), 4 run(s), 1 dead letter(s), 1 pending lesson(s), "
                           "2 queued task(s).")
    contents = everything_in(redis_client)
    deleted_at = contents.pop(bank_deleted_key(GONE))  # when it went: a run found gone went with it, not lost
    assert abs(float(deleted_at) - time.time()) < 60
    for key, value in contents.items():
        for needle in [GONE, *gone_runs]:
            assert needle not in key and needle.encode() not in value, (needle, key)
    assert bank_lock_key(GONE) not in contents
    # the other bank keeps everything
    assert all(needle in "".join(contents) or any(needle.encode() in v for v in contents.values())
               for needle in [KEPT, *kept_runs])
    assert sorted(args for _, args in queued_tasks(redis_client)) == sorted([[KEPT, kept_runs[3]],
                                                                             [KEPT, kept_runs[0]]])
    assert [item["bank"] for item in json.loads(ok(env, "banks", "list", "--json").stdout)] == [KEPT]
    assert json.loads(ok(env, "lessons", "list", "-b", GONE, "--all", "--json").stdout) == []
    assert KEPT_TEXT in ok(env, "lessons", "list", "-b", KEPT).stdout
    assert ok(env, "banks", "delete", GONE, "--yes").stdout.strip() == f"Bank '{GONE}' held nothing; nothing deleted."


def test_delete_a_bank_leaves_none_of_its_texts_in_the_store_files(
        two_banks: tuple[dict[str, str | None], list[str], list[str]]) -> None:
    env, _, _ = two_banks
    ok(env, "banks", "delete", GONE, "--yes")
    files = [path for path in Path(str(env["LESSONBANK_QDRANT_PATH"])).rglob("*") if path.is_file()]
    assert files and any(KEPT_TEXT.encode() in path.read_bytes() for path in files)  # the search is meaningful
    for path in files:
        data = path.read_bytes()
        for needle in [*GONE_TEXTS, GONE_RECIPE_CODE, GONE]:
            assert needle.encode() not in data, (needle, path)


def test_a_worker_holding_the_bank_makes_delete_wait_then_fail(two_banks: tuple[dict[str, str | None], list[str],
                                                                                list[str]],
                                                               redis_client: redis.Redis) -> None:
    env, _, _ = two_banks
    redis_client.set(bank_lock_key(GONE), "a-worker-token", ex=60)
    held = {**env, "LESSONBANK_LLM_TIMEOUT": "1", "LESSONBANK_DISTILL_LOCK_TIMEOUT": "1"}
    failed(held, "banks", "delete", GONE, "--yes", match=f"bank '{GONE}' stayed locked by a worker for 1s")
    assert redis_client.get(bank_lock_key(GONE)) == b"a-worker-token"
    assert len(json.loads(ok(env, "lessons", "list", "-b", GONE, "--json").stdout)) == 2  # nothing deleted


def test_purge_leaves_a_tombstone_until_the_user_allows_the_text(
        two_banks: tuple[dict[str, str | None], list[str], list[str]], redis_client: redis.Redis,
        tmp_path: Path) -> None:
    env, _, _ = two_banks
    text = GONE_TEXTS[0]
    purged = lesson_id(GONE, text)
    out = ok(env, "lessons", "forget", "--bank", GONE, "--purge", purged[:8], "--yes").stdout
    assert "Purged 1 lesson(s) for good" in out and f"lessons unforget --bank {GONE} ID" in out
    assert purged not in ok(env, "lessons", "list", "-b", GONE, "--all").stdout
    assert purge.purged_ids(redis_client, GONE, [purged]) == {purged}
    assert {"id": purged} in json.loads(ok(env, "lessons", "purged", "-b", GONE, "--json").stdout)
    assert not any(text.encode() in v for v in everything_in(redis_client).values())  # the id only, not the text

    failed(env, "lessons", "add", "-b", GONE, text, match=f"this lesson ({purged}) was purged from bank '{GONE}'")
    source = tmp_path / "again.jsonl"
    source.write_text("\n".join(json.dumps({"kind": "fact", "text": t}) for t in (text, KEPT_TEXT)))
    result = ok(env, "lessons", "import", "-b", GONE, str(source))
    assert "Imported 1 lesson(s)" in result.stdout and f"lesson {purged} skipped: it was purged" in result.stderr
    assert text not in ok(env, "lessons", "list", "-b", GONE).stdout

    assert "1 purged lesson(s) may be learnt again." in ok(env, "lessons", "unforget", "-b", GONE, purged[:10]).stdout
    assert purge.purged_ids(redis_client, GONE, [purged]) == set()
    assert f"Added lesson {purged}" in ok(env, "lessons", "add", "-b", GONE, text).stdout


def test_purge_by_query_and_allow(two_banks: tuple[dict[str, str | None], list[str], list[str]],
                                  redis_client: redis.Redis) -> None:
    env, _, _ = two_banks
    text = GONE_TEXTS[1]  # forgotten: not found by a query, which searches active lessons
    declined = run(env, "lessons", "forget", "-b", KEPT, "--purge", "-q", "UTF-16 reports", input="n\n")
    assert declined.exit_code != 0 and KEPT_TEXT in ok(env, "lessons", "list", "-b", KEPT).stdout
    ok(env, "lessons", "forget", "-b", KEPT, "--purge", "-q", "UTF-16 reports", "-n", "1", input="y\n")
    assert json.loads(ok(env, "lessons", "list", "-b", KEPT, "--all", "--json").stdout) == []
    ok(env, "lessons", "forget", "-b", GONE, "--purge", lesson_id(GONE, text), "--yes")
    assert f"Added lesson {lesson_id(GONE, text)}" in ok(env, "lessons", "add", "-b", GONE, "--allow", text).stdout
    assert purge.tombstones(redis_client, GONE) == sorted([lesson_id(GONE, f"{GONE} purged lesson")])


def test_urls_are_printed_with_their_passwords_masked(tmp_path: Path) -> None:
    url = f"redis://user:hunter2@127.0.0.1:{free_port()}/0"
    environment = {"LESSONBANK_REDIS_URL": url, "LESSONBANK_DATA_DIR": str(tmp_path), "LESSONBANK_BANK": None}
    for args in (["status"], ["dead-letters", "list"], ["dead-letters", "retry", "--all"], ["lessons", "purged"],
                 ["spool", "replay"]):
        result = run(environment, *args)
        assert result.exit_code == 1 and "hunter2" not in result.output, (args, result.output)
        assert "redis://user:**@127.0.0.1" in result.output, (args, result.output)
    from lessonbank.cli.context import fail

    message = fail("cannot reach", "Connection to http://k:s3cret@qdrant:6333/x?y=1 refused\nmore").message
    assert message == "cannot reach: Connection to http://k:**@qdrant:6333/x?y=1 refused"
