"""``lessonbank lessons show``: provenance (source runs, steps with excerpts while Redis keeps them, the
run's task), unique id prefixes, readable times and a recipe's code; real embedded store, real Redis."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner, Result
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson, Provenance, Recipe
from lessonbank.core.runs import set_verdict
from lessonbank.core.store.qdrant import LessonStore
from tests.fixtures.runs import make_steps, write_run

BANK = "team"
TASK = "Sum the sales in sales.csv"
RECIPE_CODE = "import pandas as pd\ndf = pd.read_csv('sales.csv', sep=';')\nfinal_answer(df['amount'].sum())"


def lessons_sharing_a_first_character() -> list[Lesson]:
    """Two lessons whose ids start with the same character (an ambiguous one-character prefix)."""
    seen: dict[str, Lesson] = {}
    for i in range(17):  # 16 hex digits: by the 17th, two share one
        lesson = Lesson.new(BANK, "fact", f"Report number {i} lives in reports/{i}.csv")
        if lesson.id[0] in seen:
            return [seen[lesson.id[0]], lesson]
        seen[lesson.id[0]] = lesson
    raise AssertionError("unreachable")


SEPARATOR = Lesson.new(BANK, "approach", "CSV files in the data folder use ';' as separator.", run_id="run-a",
                       steps=[0, 1], recipe=Recipe(code=RECIPE_CODE, task=TASK, checks=["syntax", "outcome:user"]))
SEPARATOR = SEPARATOR.model_copy(update={
    "source_run_ids": ["run-a", "gone-run"], "first_seen": 1_714_564_800.0, "last_seen": 1_714_568_400.0,
    "provenance": [Provenance(run_id="run-a", steps=[0, 1, 7])],
})
TWINS = lessons_sharing_a_first_character()


@pytest.fixture
def env(env: dict[str, str | None], embedder: FastEmbedEmbedder, redis_client: redis.Redis) -> dict[str, str | None]:
    """The CLI environment (tests/cli/conftest.py) with a recorded run and the lessons in its store."""
    steps = make_steps(BANK, "run-a", TASK, error_at=0)
    steps[1].observations = "columns: date;region;amount \x1b[31mred\x1b[0m " + "x" * 500
    write_run(redis_client, BANK, task=TASK, run_id="run-a", steps=steps)
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([SEPARATOR, *TWINS])
    client.close()
    return env


def show(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(cli, ["lessons", "show", "--bank", BANK, *args], env=env)


def test_show_prints_source_runs_steps_and_recipe(env: dict[str, str | None]) -> None:
    result = show(env, SEPARATOR.id[:8])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert f"text: {SEPARATOR.text}" in lines and "kind: approach" in lines
    assert "first_seen: 2024-05-01 12:00:00 UTC" in lines and "last_seen: 2024-05-01 13:00:00 UTC" in lines
    assert "sources: 2 run(s):" in lines
    run_line = next(line for line in lines if line.startswith("  run run-a: started "))
    assert run_line.endswith("UTC, outcome success")  # no verdict given
    assert f"    task: {TASK}" in lines
    first = next(line for line in lines if line.startswith("    #0 (action, step 1): "))
    assert "code: import pandas as pd df = pd.read_csv('sales.csv', sep=',')" in first
    assert "error: ParserError: Expected 1 fields, saw 3" in first
    second = next(line for line in lines if line.startswith("    #1 (action, step 2): "))
    assert "observation: columns: date;region;amount [31mred [0m" in second and "\x1b" not in result.stdout
    assert len(second) < 300 and "…" in second  # capped
    assert "    #7: not among the run's kept steps" in lines
    assert "  run gone-run: no longer kept in Redis (steps not recorded)" in lines
    assert "recipe (python; checks: syntax, outcome:user)" in lines
    assert "    df = pd.read_csv('sales.csv', sep=';')" in lines


def test_show_says_what_a_check_judged_the_source_run(env: dict[str, str | None], redis_client: redis.Redis) -> None:
    """A run that ended with an answer (outcome success) that its check judged wrong: both are shown."""
    set_verdict(redis_client, BANK, "run-a", False, "check", "", "lessonbank")
    result = show(env, SEPARATOR.id[:8])
    assert result.exit_code == 0, result.output
    run_line = next(line for line in result.stdout.splitlines() if line.startswith("  run run-a: started "))
    assert run_line.endswith("UTC, outcome success, verdict failure (check)")
    [item] = json.loads(show(env, "--json", SEPARATOR.id).stdout)
    assert item["sources"]["runs"][0]["verdict"] == "failure (check)"


def test_show_json_carries_the_sources(env: dict[str, str | None]) -> None:
    result = show(env, "--json", SEPARATOR.id)
    assert result.exit_code == 0, result.output
    [item] = json.loads(result.stdout)
    runs = {run["run_id"]: run for run in item["sources"]["runs"]}
    assert runs["run-a"]["kept"] and runs["run-a"]["task"] == TASK and runs["run-a"]["steps"] == [0, 1, 7]
    assert [e["seq"] for e in runs["run-a"]["excerpts"]] == [0, 1]
    assert not runs["gone-run"]["kept"] and item["recipe"]["code"] == RECIPE_CODE


def test_prefixes_must_be_unique_and_known(env: dict[str, str | None]) -> None:
    ambiguous = show(env, TWINS[0].id[0])
    assert ambiguous.exit_code != 0 and len(ambiguous.stderr.strip().splitlines()) == 1
    assert f"lesson id prefix {TWINS[0].id[0]!r} is ambiguous in bank 'team': " in ambiguous.stderr
    unknown = show(env, "zzzz")
    assert unknown.exit_code != 0 and unknown.stderr.strip() == "Error: no lesson zzzz in bank 'team'"
    both = show(env, TWINS[1].id[:12], TWINS[0].id)
    assert both.exit_code == 0 and both.stdout.index(TWINS[1].text) < both.stdout.index(TWINS[0].text)


def test_show_without_redis_still_shows_the_lesson(env: dict[str, str | None]) -> None:
    result = CliRunner().invoke(
        cli, ["--redis-url", "redis://127.0.0.1:1/0", "lessons", "show", "-b", BANK, SEPARATOR.id[:8]], env=env
    )
    assert result.exit_code == 0, result.output
    assert f"text: {SEPARATOR.text}" in result.stdout and "(steps unavailable: Redis at" in result.stdout
    assert "  run run-a (steps [0, 1, 7])" in result.stdout.splitlines()


def test_run_ids_and_outcomes_print_without_terminal_escapes(env: dict[str, str | None], embedder: FastEmbedEmbedder,
                                                             redis_client: redis.Redis) -> None:
    hostile = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mrun-red\x9b31m"
    write_run(redis_client, BANK, run_id="run-esc", outcome="success\x1b[2J\x07", steps=[])
    lesson = Lesson.new(BANK, "fact", "The orders API pages its results with a page parameter.")
    lesson = lesson.model_copy(update={"source_run_ids": [hostile, "run-esc", "r" * 5000]})
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([lesson])
    client.close()
    result = show(env, lesson.id)
    assert result.exit_code == 0, result.output
    assert not set(result.stdout) & set("\x1b\x07\x9b")
    lines = result.stdout.splitlines()
    assert any(line.startswith("  run ]0;PWNED [2J [31mrun-red 31m: no longer kept") for line in lines)
    assert any(line.startswith("  run run-esc: started ") and line.endswith(", outcome success [2J") for line in lines)
    long = next(line for line in lines if line.startswith("  run rrr"))
    assert len(long) < 200 and "…" in long  # a run id is capped


def test_show_counts_the_runs_past_the_provenance_cap(env: dict[str, str | None], embedder: FastEmbedEmbedder) -> None:
    capped = Lesson.new(BANK, "fact", "Region codes are two capital letters.", run_id="run-a").model_copy(
        update={"evidence": 5, "provenance_dropped": 4})
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([capped])
    client.close()
    result = show(env, capped.id[:12])
    assert result.exit_code == 0, result.output
    assert "sources: 5 run(s):" in result.stdout and "  … and 4 older run(s)" in result.stdout
    assert "provenance_dropped: 4" in result.stdout
