"""A stored lesson whose payload this release cannot read (``tests/workers/test_malformed_lessons``), on a real store
written by the embedded engine or by qdrant-client's local mode: ``lessons list|search|show`` and ``report`` show
every other lesson, show that one as not read with why (``unreadable`` in ``--json``), name it on stderr and exit 1;
the demo's listing names it; ``status`` and ``banks export`` count and keep it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from qdrant_client import QdrantClient

from lessonbank.cli.demo import _show_lessons
from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson, RunSummary
from lessonbank.core.store.edge import EdgeLessonStore
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.core.summary import save_summary
from tests.workers.test_fingerprints_upgraded import BANK, stored_earlier
from tests.workers.test_malformed_lessons import stored_malformed

NOT_READ = "could not be read: its payload is not one this release reads (ValueError: "
GOOD_TEXT = "'state': str ('late' | 'ok')"


@pytest.fixture(params=["edge", "qdrant_local"])
def stored(request: pytest.FixtureRequest, env: dict[str, str | None],
           embedder: FastEmbedEmbedder) -> tuple[Lesson, Lesson]:
    """(a lesson that reads, one whose stored payload does not) in the store the CLI opens."""
    path = Path(str(env["LESSONBANK_QDRANT_PATH"]))
    store: EdgeLessonStore | LessonStore
    if request.param == "edge":
        store = EdgeLessonStore(path, embedder)
        store.open()
    else:
        store = LessonStore(QdrantClient(path=str(path)), embedder)
        store.ensure_collection()
    good = stored_earlier(store, "r1", "yes", ["late", "ok"])
    broken = stored_malformed(store)
    store.close()
    return good, broken


def run(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def assert_named(result: Result, broken: Lesson, shown: str) -> None:
    """Exit 1; on stderr one line naming the lesson with why, then what the command did with the others."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-2].startswith(f"bank {BANK!r}: lesson {broken.id} could not be read: its payload is not one this "
                                "release reads (ValueError: ")
    assert lines[-1] == f"Error: 1 lesson(s) could not be read; every other one is {shown}"


@pytest.mark.parametrize("command", [["lessons", "list"], ["lessons", "search", "check_loan late loans"]])
def test_lessons_list_and_search_show_every_other_lesson_and_name_the_unreadable_one(
        env: dict[str, str | None], stored: tuple[Lesson, Lesson], command: list[str]) -> None:
    good, broken = stored
    result = run(env, *command, "--bank", BANK)
    assert_named(result, broken, "listed")
    (good_line,) = [line for line in result.stdout.splitlines() if line.startswith(good.id)]
    assert GOOD_TEXT in good_line
    (broken_line,) = [line for line in result.stdout.splitlines() if line.startswith(broken.id)]
    assert f"({NOT_READ}" in broken_line
    as_json = run(env, *command, "--bank", BANK, "--json")
    assert_named(as_json, broken, "listed")
    items = {item["id"]: item for item in json.loads(as_json.stdout)}
    assert set(items) == {good.id, broken.id} and "unreadable" not in items[good.id]
    assert items[broken.id]["unreadable"].startswith(NOT_READ.removeprefix("could not be read: "))
    assert items[broken.id]["shape"] == broken.model_dump(mode="json")["shape"]  # as stored


def test_lessons_show_prints_the_unreadable_lesson_as_stored_with_why(
        env: dict[str, str | None], stored: tuple[Lesson, Lesson]) -> None:
    good, broken = stored
    result = run(env, "lessons", "show", "--bank", BANK, broken.id[:8], good.id[:8])
    assert_named(result, broken, "shown")
    lines = result.stdout.splitlines()
    assert f"text: {broken.text}" in lines
    assert any(line.startswith("unreadable: its payload is not one this release reads (ValueError: ") for line in lines)
    assert sum(line.startswith("unreadable: ") for line in lines) == 1 and f"id: {good.id}" in lines
    assert any(line.startswith("text: ") and GOOD_TEXT in line for line in lines)
    as_json = run(env, "lessons", "show", "--bank", BANK, broken.id, "--json")
    assert_named(as_json, broken, "shown")
    (item,) = json.loads(as_json.stdout)
    assert item["id"] == broken.id and "ValueError" in item["unreadable"]


def test_report_reports_every_other_lesson_and_the_unreadable_one_as_such(
        env: dict[str, str | None], stored: tuple[Lesson, Lesson], redis_client: redis.Redis, tmp_path: Path) -> None:
    good, broken = stored
    for i in range(2):  # runs that drew both in the per-lesson holdout: the causal table lists both
        save_summary(redis_client, RunSummary(run_id=f"run-{i}", bank=BANK, started_at=time.time() - 60 + i,
                                              drawn=[good.id, broken.id], withheld=[broken.id] if i else []))
    text = run(env, "report", "--bank", BANK)
    assert_named(text, broken, "reported")
    assert NOT_READ in " ".join(text.stdout.split()) and broken.id[:8] in text.stdout
    as_json = run(env, "report", "--bank", BANK, "--json", "--out", str(tmp_path / "report"))
    assert_named(as_json, broken, "reported")
    document = json.loads(as_json.stdout)
    assert [item["id"] for item in document["unreadable"]] == [broken.id]
    rows = {row["id"]: row for row in document["lessons"]}
    assert set(rows) == {good.id, broken.id} and GOOD_TEXT in rows[good.id]["text"]
    assert rows[broken.id]["text"].startswith(f"({NOT_READ}") and "ValueError" in rows[broken.id]["unreadable"]
    causal = {row["id"]: row["text"] for row in document["causal"]["lessons"]}
    assert causal[broken.id].startswith(f"({NOT_READ}") and GOOD_TEXT in causal[good.id]
    written = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    assert written["unreadable"] == document["unreadable"]
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert broken.id[:8] in page and NOT_READ in page


def test_status_and_banks_export_count_and_keep_the_unreadable_lesson(
        env: dict[str, str | None], stored: tuple[Lesson, Lesson], tmp_path: Path) -> None:
    good, broken = stored
    status = run(env, "status", "--json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["lessons"] == {BANK: 2}
    exported = run(env, "banks", "export", "--all", "--out", str(tmp_path / "backup"))
    assert exported.exit_code == 0, exported.output
    fresh = {**env, "LESSONBANK_QDRANT_PATH": str(tmp_path / "restored")}
    imported = run(fresh, "banks", "import", str(tmp_path / "backup"))
    assert imported.exit_code == 0, imported.output
    shown = run(fresh, "lessons", "show", "--bank", BANK, broken.id, "--json")
    (item,) = json.loads(shown.stdout)
    assert item["shape"] == broken.model_dump(mode="json")["shape"]  # kept as it was


def test_the_demo_names_an_unreadable_lesson_and_shows_the_others(
        stored: tuple[Lesson, Lesson], env: dict[str, str | None], embedder: FastEmbedEmbedder,
        capsys: pytest.CaptureFixture[str]) -> None:
    good, broken = stored
    store = EdgeLessonStore(Path(str(env["LESSONBANK_QDRANT_PATH"])), embedder)
    store.open()
    try:
        _show_lessons(store.list(BANK))
    finally:
        store.close()
    out = capsys.readouterr().out
    assert f"  [fact] lesson {broken.id} {NOT_READ}" in out
    assert GOOD_TEXT in " ".join(out.split())
