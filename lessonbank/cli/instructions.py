"""``lessonbank instructions``: the lessons block a run of a bank would get for a task (printed without
control characters)."""

from __future__ import annotations

import click

from lessonbank.cli.context import CliContext, bank_option, fail, pass_cli
from lessonbank.cli.provenance import clean
from lessonbank.cli.store_access import cli_store
from lessonbank.instructions import compose_instructions
from lessonbank.learn.calls import AGENT_KINDS, AgentKind


@click.command("instructions")
@bank_option
@click.option(
    "--max-lessons", type=click.IntRange(1, 50), default=8, show_default=True, help="At most this many lessons."
)
@click.option(
    "--max-chars", type=click.IntRange(200), default=2000, show_default=True, help="Length budget of the block."
)
@click.option("--tool", "tools", multiple=True,
              help="A tool of the agent (repeatable): then code about tools it lacks (a recipe, a fix, a shape) is "
                   "left out, as for that agent's runs.")
@click.option("--agent-kind", type=click.Choice(AGENT_KINDS), default="code", show_default=True,
              help="How the agent uses tools: code (a CodeAgent: results are values in its code) or calls (a "
                   "ToolCallingAgent: tools called by name; the block then holds calls and words, no code).")
@click.argument("task")
@pass_cli
def instructions(cli: CliContext, bank: str, max_lessons: int, max_chars: int, tools: tuple[str, ...],
                 agent_kind: AgentKind, task: str) -> None:
    """Print the lessons block a run of the bank would be given for TASK (a preview: nothing is recorded)."""
    if not task.strip():
        raise fail("TASK must not be empty")
    with cli_store(cli) as store:
        text, given = compose_instructions(
            store, task, bank, max_lessons=max_lessons, max_chars=max_chars, min_relevance=cli.settings.min_relevance,
            tools={*tools, "final_answer"} if tools else None, agent_kind=agent_kind,
        )
    if not given:
        click.echo(f"No lessons of bank {bank!r} bear on this task.", err=True)
        return
    click.echo(clean(text, keep_newlines=True))  # lesson text is data: no terminal escapes
