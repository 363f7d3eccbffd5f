"""``lessonbank instructions --agent-kind calls``: the block an agent that calls tools by name would get."""

from __future__ import annotations

from click.testing import CliRunner
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.store.qdrant import LessonStore
from tests.learn.runs import written_observed
from tests.test_agent_kind import CATALOG_SHAPE, CHAIR_TASK, MUG_TASK


def test_the_agent_kind_option_previews_a_calling_agents_block(env: dict[str, str | None],
                                                               embedder: FastEmbedEmbedder) -> None:
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([written_observed("shop", "fact", CATALOG_SHAPE, verified=True,
                                                           task=MUG_TASK)])
    client.close()
    runner = CliRunner()
    assert "--agent-kind [code|calls]" in runner.invoke(cli, ["instructions", "--help"]).output
    code = runner.invoke(cli, ["instructions", "--bank", "shop", CHAIR_TASK], env=env)
    calls = runner.invoke(cli, ["instructions", "--bank", "shop", "--agent-kind", "calls", CHAIR_TASK], env=env)
    assert code.exit_code == 0 and calls.exit_code == 0, (code.output, calls.output)
    assert "for record in result['data']['items']" in code.stdout
    assert "the list under `data` > `items`" in calls.stdout and "for record in" not in calls.stdout
    wrong = runner.invoke(cli, ["instructions", "--bank", "shop", "--agent-kind", "python", CHAIR_TASK], env=env)
    assert wrong.exit_code != 0 and "'python' is not one of 'code', 'calls'" in wrong.output
