"""The README's report screenshot: the demo's agent run many times with a control arm, then its report.

    python scripts/report_example.py --out docs/report.png

The same services as ``lessonbank demo`` (Redis, a worker owning a fresh store, the local LLM unless
``OPENAI_BASE_URL`` is set) and the same scripted agent: without a lesson about the ``;`` separator it
fails once and recovers, with one it reads the file right at once. Each run waits for its
distillation, so the next one starts with what the bank learnt. A seeded fraction of the runs is
held out (``remember(..., holdout=...)``): they get no lessons and form the report's control arm.
The report (HTML, JSON, PNGs) is written next to the screenshot's name, and headless Chromium
(Debian's ``chromium``) takes the screenshot of the page.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from lessonbank.agent import remember
from lessonbank.cli.context import CliContext
from lessonbank.cli.report import report
from lessonbank.core.connections import create_redis
from lessonbank.core.constants import RUN_DISTILLED
from lessonbank.core.settings import Settings
from lessonbank.demo import BANK, SALES_CSV, TASK, make_agent, right_total, run_once, services, wait_distilled


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    """A headless Chromium screenshot of ``page`` (a local file) into ``png``."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise click.ClickException("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
        )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--runs", type=click.IntRange(2, 200), default=16, show_default=True, help="Agent runs.")
@click.option("--holdout", type=click.FloatRange(0.0, 1.0), default=0.5, show_default=True,
              help="Fraction of the runs held out without lessons (the control arm).")
@click.option("--seed", type=int, default=14, show_default=True, help="Seed of the holdout draw.")
@click.option("--model", "model_key", type=click.Choice(["0.5b", "1.5b"]), default="1.5b", show_default=True,
              help="Local model that distills (unused with OPENAI_BASE_URL).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("docs/report.png"),
              show_default=True, help="Screenshot to write; the report goes to a folder beside it.")
@click.option("--size", default="1200x2600", show_default=True, help="Browser window, WIDTHxHEIGHT pixels.")
@click.option("--timeout", type=float, default=1200.0, show_default=True, help="Seconds to wait per distillation.")
def main(runs: int, holdout: float, seed: int, model_key: str, out: Path, size: str, timeout: float) -> None:
    """Run the demo's agent RUNS times with a control arm and screenshot the bank's report."""
    width, _, height = size.lower().partition("x")
    if not (width.isdigit() and height.isdigit()):
        raise click.BadParameter(f"expected WIDTHxHEIGHT in pixels (1200x2600), got {size!r}", param_hint="--size")
    with services(Settings(), model_key, click.echo) as env:
        csv_path = env.workdir / "sales.csv"
        csv_path.write_text(SALES_CSV)
        agent = make_agent(env, False, csv_path)
        recorder = remember(agent, bank=BANK, settings=env.settings, judge=right_total, holdout=holdout, seed=seed)
        client = create_redis(env.settings, "cli")
        for number in range(1, runs + 1):
            view = run_once(agent, TASK.format(path=csv_path), recorder)
            state = wait_distilled(client, view.run_id, timeout, lambda _: None)
            click.echo(f"run {number}: {len(view.steps)} steps, {view.errors} errors, "
                       f"{'with' if view.instructions else 'without'} lessons, {state}")
            if state != RUN_DISTILLED:
                raise click.ClickException(f"run {number} was not distilled ({state}); worker log: {env.worker_log}")
        folder = out.with_suffix("")
        # the report a user gets: `lessonbank report --bank BANK --out FOLDER`, on the services' settings
        report.main(["--bank", BANK, "--out", str(folder)], obj=CliContext(settings=env.settings),
                    standalone_mode=False)
    screenshot(folder / "report.html", out, int(width), int(height))
    click.echo(f"screenshot: {out}")


if __name__ == "__main__":
    sys.exit(main())
