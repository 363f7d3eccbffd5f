"""``lessonbank runs forget``: a run's lessons are taken out of the bank by what they rest on, through the real
pipeline (real Redis, a real embedded store on disk, a real HTTP server speaking the OpenAI protocol) and the
real command."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
import redis
from click.testing import CliRunner, Result
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core import summary
from lessonbank.core.constants import run_key, run_steps_key
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.workers.deps import Deps
from lessonbank.workers.llm import ChatLLM
from lessonbank.workers.pipeline import distill_one
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json
from tests.fixtures.runs import write_run

BANK = "team"
ONLY = ("fact", "The sales CSV files are separated by ';': read them with pandas.read_csv(path, sep=';').")
SHARED = ("failure", "The billing API hangs without a timeout: always pass timeout=10 to requests.get.")


class Bank:
    """Three runs distilled by the worker's pipeline into the embedded store the CLI opens: the first teaches ONLY
    and SHARED, the other two SHARED again."""

    def __init__(self, env: dict[str, str | None], deps: Deps) -> None:
        self.env, self.deps = env, deps

    def lessons(self) -> dict[str, Lesson]:
        """Every lesson of the bank, by text, as ``lessons export --all`` writes them."""
        result = invoke(self.env, "lessons", "export", "--bank", BANK, "--all")
        assert result.exit_code == 0, result.output
        found = [Lesson.model_validate_json(line) for line in result.output.splitlines() if line.strip()]
        return {lesson.text: lesson for lesson in found}


@pytest.fixture
def bank(env: dict[str, str | None], settings: Settings, embedder: FastEmbedEmbedder, redis_client: redis.Redis,
         openai_server: FakeOpenAI) -> Iterator[tuple[Bank, list[str]]]:
    openai_server.script(Reply(content=lessons_json(ONLY, SHARED)), Reply(content=lessons_json(SHARED)),
                         Reply(content=lessons_json(SHARED)))
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    store = LessonStore(client, embedder)
    llm = ChatLLM(openai.OpenAI(base_url=openai_server.url, api_key="k", max_retries=0, timeout=30), "fake")
    deps = Deps(settings=settings, redis=redis_client, store=store, llm=llm, scrubber=Redactor())
    run_ids = [write_run(redis_client, BANK, task=f"Sum the sales in sales-{n}.csv") for n in range(3)]
    for run_id in run_ids:
        assert distill_one(deps, BANK, run_id) is not None
    client.close()
    yield Bank(env, deps), run_ids


def invoke(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def test_forgetting_a_run_removes_what_rests_on_it_alone_and_its_part_of_the_rest(
        env: dict[str, str | None], bank: tuple[Bank, list[str]], redis_client: redis.Redis) -> None:
    store, (first, second, third) = bank
    before = store.lessons()
    only, shared = before[ONLY[1]], before[SHARED[1]]
    assert only.evidence == 1 and shared.evidence == 3 and shared.source_run_ids == [first, second, third]
    report = json.loads(invoke(env, "report", "--bank", BANK, "--json").output)
    assert report["runs"] == 3 and report["causal"]["method"].startswith("success rate given minus withheld")

    result = invoke(env, "runs", "forget", first, "--bank", BANK, "--yes", "--json")
    assert result.exit_code == 0, result.output
    done = json.loads(result.output)
    assert done["purged"] == [only.id] and done["updated"] == [shared.id] and done["summary"] is True

    after = store.lessons()
    assert ONLY[1] not in after  # gone from the store, not hidden
    kept = after[SHARED[1]]
    assert kept.evidence == 2 and kept.source_run_ids == [second, third]
    assert first not in {p.run_id for p in kept.provenance} and kept.status == "active"
    assert json.loads(invoke(env, "report", "--bank", BANK, "--json").output)["runs"] == 2
    assert summary.load_summary(redis_client, BANK, first) is None
    assert redis_client.hexists(run_key(first), "forgotten") and redis_client.exists(run_steps_key(first))

    again = invoke(env, "runs", "forget", first, "--bank", BANK, "--yes", "--json")
    assert again.exit_code == 0 and json.loads(again.output)["purged"] == []  # nothing more: idempotent
    assert store.lessons()[SHARED[1]].evidence == 2


def test_purge_drops_the_runs_records_and_a_later_distillation_does_nothing(
        env: dict[str, str | None], bank: tuple[Bank, list[str]], redis_client: redis.Redis) -> None:
    store, (first, second, _) = bank
    result = invoke(env, "runs", "forget", second, "--bank", BANK, "--purge", "--yes")
    assert result.exit_code == 0, result.output
    assert "0 lesson(s) removed, 1 lost its part" in result.output and "records purged" in result.output
    assert not redis_client.exists(run_steps_key(second))
    assert set(redis_client.hkeys(run_key(second))) >= {b"forgotten"} and not redis_client.hexists(run_key(second),
                                                                                                   b"task")
    assert distill_one(store.deps, BANK, second) is None  # a redelivered task of the run writes nothing
    assert store.lessons()[SHARED[1]].evidence == 2


def test_a_run_no_record_knows_is_refused_with_a_clear_error(env: dict[str, str | None],
                                                             bank: tuple[Bank, list[str]]) -> None:
    store, (first, _, _) = bank
    result = invoke(env, "runs", "forget", "no-such-run", "--bank", BANK, "--yes")
    assert result.exit_code != 0 and "no run no-such-run in bank 'team'" in result.output
    other = invoke(env, "runs", "forget", first, "--bank", "other", "--yes")
    assert other.exit_code != 0 and "belongs to bank 'team'" in other.output
    assert len(store.lessons()) == 2  # nothing changed


def test_the_python_api_forgets_a_run_as_the_command_does(env: dict[str, str | None], bank: tuple[Bank, list[str]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import lessonbank
    from lessonbank.core.exceptions import UnknownRun

    store, (first, _, _) = bank
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    with lessonbank.Bank(BANK) as api:
        report = api.forget_run(first)
        assert len(report.purged) == 1 and len(report.updated) == 1 and report.summary
        assert ONLY[1] not in store.lessons() and store.lessons()[SHARED[1]].evidence == 2
        with pytest.raises(UnknownRun):
            api.forget_run("no-such-run")
