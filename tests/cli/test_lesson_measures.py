"""``lessonbank lessons show`` prints what a lesson's per-lesson holdout measured and the tool versions it was learnt
on; ``lessons list --status stale`` shows the lessons whose tool changed, with the reason."""

from __future__ import annotations

from click.testing import CliRunner, Result
from qdrant_client import QdrantClient

from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import CausalEstimate, Lesson, Recipe, ToolFingerprint
from lessonbank.core.store.qdrant import LessonStore

BANK = "team"
CODE = "inv = get_invoice(invoice_id='INV-1')\nfinal_answer(inv['amount'])"
OLD = ToolFingerprint(name="get_invoice", signature="get_invoice(invoice_id: string) -> object", doc="d1")
MEASURED = CausalEstimate(given_runs=40, given_known=40, given_successes=36, withheld_runs=12, withheld_known=12,
                          withheld_successes=4, uplift=0.567, low=0.2, high=0.8, verdict="helps")
RECIPE = Lesson.new(BANK, "approach", "Fetch the invoice, answer its amount.", recipe=Recipe(code=CODE)).model_copy(
    update={"tool_versions": [OLD], "status": "stale", "status_cause": "tool_changed",
            "status_reason": "get_invoice's signature changed: new argument currency"})
HELPS = Lesson.new(BANK, "fact", "Invoice amounts are in cents.").model_copy(update={"causal": MEASURED})


def invoke(env: dict[str, str | None], embedder: FastEmbedEmbedder, *args: str) -> Result:
    client = QdrantClient(path=str(env["LESSONBANK_QDRANT_PATH"]))
    LessonStore(client, embedder).upsert([RECIPE, HELPS])
    client.close()
    return CliRunner().invoke(cli, ["lessons", *args, "--bank", BANK], env=env)


def test_list_status_stale_shows_the_lessons_whose_tool_changed(env: dict[str, str | None],
                                                                 embedder: FastEmbedEmbedder) -> None:
    result = invoke(env, embedder, "list", "--status", "stale")
    assert result.exit_code == 0, result.output
    assert RECIPE.id in result.output and HELPS.id not in result.output
    assert "[stale: get_invoice's signature changed: new argument currency]" in result.output


def test_show_prints_the_causal_figures_and_the_tool_versions(env: dict[str, str | None],
                                                              embedder: FastEmbedEmbedder) -> None:
    shown = invoke(env, embedder, "show", HELPS.id)
    assert shown.exit_code == 0, shown.output
    assert ("causal: helps: succeeded 90% of 40 runs given it, 33% of 12 it was withheld from; +57 points "
            "(99 % interval +20 to +80)") in shown.output
    recipe = CliRunner().invoke(cli, ["lessons", "show", RECIPE.id, "--bank", BANK], env=env)
    assert "learnt on: get_invoice(invoice_id: string) -> object" in recipe.output
    assert "causal: never withheld from a run yet" in recipe.output
