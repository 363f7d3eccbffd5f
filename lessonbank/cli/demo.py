"""``lessonbank demo``: the whole product on this machine, offline, in one command."""

from __future__ import annotations

import re
import textwrap

import click
import redis

from lessonbank import local_llm
from lessonbank.agent import remember
from lessonbank.cli.context import CliContext, data_dir_failure, fail, pass_cli
from lessonbank.core.connections import create_redis
from lessonbank.core.constants import RUN_DISTILLED
from lessonbank.core.exceptions import LessonbankError
from lessonbank.core.models import Lesson
from lessonbank.core.store.protocol import LessonStoreProtocol
from lessonbank.core.store.remote import connect_store
from lessonbank.demo import (
    BANK,
    SALES_CSV,
    TASK,
    DemoEnvironment,
    RunView,
    make_agent,
    right_total,
    run_once,
    services,
    wait_distilled,
)
from lessonbank.learn import render
from lessonbank.learn.adapters.codeagent import LAST_OUTPUT, error_text, logs

RULE = "─" * 78


def _show_run(number: int, view: RunView) -> None:
    click.secho(f"\nRun {number}  (run id {view.run_id})", bold=True)
    if view.instructions:
        click.echo("  was given these lessons from the bank, after its task:")
        click.echo(textwrap.indent(view.instructions, "    │ ", predicate=lambda line: True))
    else:
        click.echo("  started with no lessons (empty bank)")
    for step in view.steps:
        click.echo(f"  step {step.number}: {_key_line(step.code)[:72]}")
        if step.error:
            click.secho(f"          error: {_error_line(step.error)[:100]}", fg="red")
        elif step.observation.strip():
            click.echo(f"          output: {_printed(step.observation)[:90]}")
    click.echo(
        f"  answer: {view.answer!r}   steps: {len(view.steps)}   errors: {view.errors}   "
        f"tokens: {view.input_tokens} in / {view.output_tokens} out   time: {view.seconds:.1f} s"
    )


def _key_line(code: str) -> str:
    """The line of a code action worth showing: the one doing the work, else the last."""
    lines = [line.strip() for line in code.strip().splitlines() if line.strip()]
    for line in lines:
        if "DictReader" in line or "splitlines" in line:
            return line
    return lines[-1] if lines else ""


def _error_line(error: str) -> str:
    """The gist of an agent error: the innermost exception named in its message."""
    line = error_text(error)
    line = line.splitlines()[0] if line else ""
    exceptions = list(re.finditer(r"\b\w+(?:Error|Exception): ", line))
    return line[exceptions[-1].start():] if exceptions else line


def _printed(observation: str) -> str:
    """What the step printed (smolagents' 'Execution logs'), else the value its code ended with."""
    text = logs(observation) or observation.partition(LAST_OUTPUT)[2].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _show_lessons(lessons: list[Lesson]) -> None:
    if not lessons:
        click.echo("  (no lessons)")
    for lesson in lessons:
        counts = f"evidence {lesson.evidence}, helpful {lesson.helpful}, harmful {lesson.harmful}"
        if lesson.recipe is not None:
            click.echo(f"  [recipe] {counts}, status {lesson.status}: the code of a run that ended well")
            click.echo(textwrap.indent(lesson.recipe.code, "    │ ", predicate=lambda line: True))
            continue
        said, unreadable = render.readable(lesson)
        if unreadable:
            click.echo(f"  [{lesson.kind}] lesson {lesson.id} could not be read: {unreadable}")
            continue
        text = textwrap.fill(said, 72, initial_indent="    ", subsequent_indent="    ")
        click.echo(f"  [{lesson.kind}] {counts}, status {lesson.status}\n{text}")


def _distill(env: DemoEnvironment, client: redis.Redis, run_id: str, number: int, timeout: float) -> None:
    click.echo(f"\nDistilling run {number} with {env.llm_label} (the worker makes one LLM call, more on CPU)...")
    state = wait_distilled(client, run_id, timeout, lambda s: click.echo(f"  ... {s:.0f} s"))
    if state != RUN_DISTILLED:
        from lessonbank.workers import deadletters

        letter = deadletters.get(client, run_id)
        reason = letter.reason if letter else f"state {state!r} after {timeout:.0f} s"
        raise fail(f"run {number} was not distilled: {reason} (worker log: {env.worker_log})")


@click.command("demo")
@click.option(
    "--model", "model_key", type=click.Choice(sorted(local_llm.MODELS)), default=None,
    help="Local model that distills (default: LESSONBANK_LOCAL_LLM_MODEL, 1.5b). Unused when OPENAI_BASE_URL or "
         "OPENAI_API_KEY is set.",
)
@click.option(
    "--agent", "agent_kind", type=click.Choice(["scripted", "llm"]), default="scripted", show_default=True,
    help="scripted: the agent follows a fixed trajectory; llm: the agent's steps come from the same LLM.",
)
@click.option("--timeout", type=float, default=1200.0, show_default=True, help="Seconds to wait per distillation.")
@pass_cli
def demo(obj: CliContext, model_key: str | None, agent_kind: str, timeout: float) -> None:
    """Run an agent twice on a task with a trap; the second run starts with what the first learnt.

    Starts (or reuses) Redis and starts a worker. The LLM is yours when OPENAI_BASE_URL and/or
    OPENAI_API_KEY is set (LESSONBANK_DISTILL_MODEL names the model): nothing is built or fetched. Only
    when neither is set does it run a local LLM (a 1 GB download and a build the first time, said before
    it starts). Stops everything it started at the end or on Ctrl-C.
    """
    settings = obj.settings
    click.secho(RULE + "\nlessonbank demo: memory across runs for a smolagents CodeAgent\n" + RULE, bold=True)
    click.echo(f"Task: total the 'amount' column of a CSV file. The trap: its separator is ';'.\nBank: {BANK}\n")
    try:
        with services(settings, model_key or settings.local_llm_model, click.echo) as env:
            csv_path = env.workdir / "sales.csv"
            csv_path.write_text(SALES_CSV)
            task = TASK.format(path=csv_path)
            agent = make_agent(env, agent_kind == "llm", csv_path)
            recorder = remember(agent, bank=BANK, settings=env.settings, judge=right_total)
            client = create_redis(env.settings, "cli")
            if agent_kind == "scripted":
                click.secho(
                    "\nThe agent follows a SCRIPTED trajectory (no LLM calls of its own): it tries the default "
                    "separator\nunless its instructions mention ';'. Distillation uses the real LLM "
                    f"({env.llm_label}).", fg="yellow",
                )
            first = run_once(agent, task, recorder)
            _show_run(1, first)
            _distill(env, client, first.run_id, 1, timeout)
            store = connect_store(env.settings)
            click.secho(f"\nLessons in bank {BANK!r} after run 1:", bold=True)
            _show_lessons(store.list(BANK))

            second = run_once(agent, task, recorder)
            _show_run(2, second)
            _distill(env, client, second.run_id, 2, timeout)
            click.secho(f"\nLessons in bank {BANK!r} after run 2:", bold=True)
            _show_lessons(store.list(BANK))
            _summary(first, second)
            _write_report(env, client, store)
            click.echo(f"\nLogs: {env.workdir}")
    except KeyboardInterrupt:
        click.echo("\ninterrupted: everything the demo started has been stopped")
        raise SystemExit(130) from None
    except LessonbankError as e:
        raise fail(str(e).splitlines()[0]) from e
    except OSError as e:  # the demo's files all live in the data dir: its folder, logs, models, report
        in_data_dir = str(e.filename or "").startswith(str(settings.data_dir))
        raise (data_dir_failure(settings, e) if in_data_dir else fail("the demo failed", e)) from e


def _write_report(env: DemoEnvironment, client: redis.Redis, store: LessonStoreProtocol) -> None:
    """The bank's report (two runs; ``remember(..., holdout=...)`` adds a control arm) into the demo's folder."""
    from lessonbank.core.summary import load_summaries
    from lessonbank.report import build_report, render_plots, report_tables, write_report

    document = build_report(BANK, load_summaries(client, BANK), store.list(BANK, limit=1000, include_inactive=True),
                            None)
    out = env.workdir / "report"
    write_report(out, document, report_tables(document), render_plots(document))
    click.echo(f"\nReport of bank {BANK!r}: {out / 'report.html'} (more runs: lessonbank report --bank B --out DIR)")
    click.echo("Next: give your own agent memory with lessonbank.remember(agent, bank=..., judge=...) — see the "
               "README's Usage section.")


def _summary(first: RunView, second: RunView) -> None:
    click.secho("\n" + RULE + "\nBefore / after\n" + RULE, bold=True)
    rows = [
        ("lessons at start", "0" if not first.instructions else "some",
         str(second.instructions.count("\n- ") + second.instructions.count("```python"))),
        ("steps", str(len(first.steps)), str(len(second.steps))),
        ("errors", str(first.errors), str(second.errors)),
        ("tokens (in+out)", str(first.input_tokens + first.output_tokens),
         str(second.input_tokens + second.output_tokens)),
        ("time", f"{first.seconds:.1f} s", f"{second.seconds:.1f} s"),
        ("answer", repr(first.answer), repr(second.answer)),
    ]
    click.echo(f"  {'':18}{'run 1':>14}{'run 2':>14}")
    for label, before, after in rows:
        click.echo(f"  {label:18}{before:>14}{after:>14}")
