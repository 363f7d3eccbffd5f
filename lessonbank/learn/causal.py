"""Per-lesson causal credit: what a lesson does to the runs it is eligible for, measured by withholding it.

A run that went well after it was given a lesson shows the two came together, not that one caused the other:
the lessons most often given are those of the easiest tasks. So, beside the run-level control arm, each lesson
gets a holdout of its own. When the instructions builder has chosen the lessons a run of the lessons arm gets,
each of them enters a draw (``withhold``) and is withheld from the run with chance ``LESSONBANK_LESSON_HOLDOUT``,
once ``LESSONBANK_LESSON_HOLDOUT_AFTER`` runs were given it (its first runs are its test) and, unless
``LESSONBANK_LESSON_HOLDOUT_USER``, not when a user added or imported it. The run's hash and summary keep the
draw (``drawn``) and what it withheld (``withheld``). Since each draw is a coin flip independent of the task,
the runs given a drawn lesson and the runs it was withheld from differ, on average, by that lesson alone.

``estimate`` compares the two groups of runs: the success rate given minus withheld, with Newcombe's hybrid
score interval (``lessonbank.learn.stats.newcombe``), and the mean tokens per run given minus withheld, with
Welch's t interval. Its verdict: "helps" when the success interval lies above zero, "hurts" when it lies below,
else "no effect yet" (until each group has ``MIN_KNOWN`` runs with a verdict, always that). The intervals are
99 %, not 95 %: the estimate is looked at again after every run and acted on the first time it excludes zero, and
with a 95 % interval such repeated looks would call about three in ten lessons that do nothing "helps" or "hurts"
within 200 runs; at 99 % and ``MIN_KNOWN`` 10, about one in twenty (``tests/learn/test_causal.py`` simulates it).
A lesson that hurts is retired with the figures as its reason (``retire_reason``; not one a user released); one
that helps is ranked higher (``rank_bonus``) and is not retired for the correlation-based reasons of
``lessonbank.learn.credit``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence

from lessonbank.core.models import USER_ORIGINS, CausalEstimate, Lesson, RunSummary
from lessonbank.learn import stats

MIN_KNOWN = 10  # runs with a verdict in each group before an estimate may say more than "no effect yet"
HELPS_BONUS = 0.1  # added to the builder's ranking score of a lesson that confidently helps
CONFIDENCE = 0.99  # see the module: the estimate is looked at after every run
METHOD = ("success rate given minus withheld, Newcombe's hybrid score interval (99 %); mean tokens per run given "
          "minus withheld, Welch's t interval (99 %)")


def drawable(lesson: Lesson, after: int, users: bool = False) -> bool:
    """Whether ``lesson`` enters a run's draw: given to ``after`` runs or more, and not a user's (unless ``users``)."""
    return lesson.given >= after and (users or lesson.origin not in USER_ORIGINS)


def withhold(lessons: Sequence[Lesson], chance: float, rng: random.Random, after: int,
             users: bool = False) -> tuple[list[str], list[str]]:
    """(ids of the lessons in the draw, ids of those withheld): each of ``lessons`` that may be drawn is withheld
    with ``chance``, independently. Nothing is drawn when ``chance`` is 0."""
    if chance <= 0:
        return [], []
    drawn = [lesson.id for lesson in lessons if drawable(lesson, after, users)]
    return drawn, [lesson_id for lesson_id in drawn if rng.random() < chance]


def arms(lesson_id: str, summaries: Sequence[RunSummary]) -> tuple[list[RunSummary], list[RunSummary]]:
    """(runs that drew the lesson and were given it, runs it was withheld from)."""
    given = [s for s in summaries
             if lesson_id in s.drawn and lesson_id not in s.withheld and lesson_id in s.given]
    return given, [s for s in summaries if lesson_id in s.withheld]


def _verdicts(runs: Sequence[RunSummary]) -> tuple[int, int]:
    """(successes, runs with a known verdict)."""
    known = [run for run in runs if run.verdict in ("success", "failure")]
    return sum(1 for run in known if run.verdict == "success"), len(known)


def _tokens(runs: Sequence[RunSummary]) -> list[float]:
    return [float(run.input_tokens + run.output_tokens) for run in runs]


def estimate(lesson_id: str, summaries: Sequence[RunSummary], now: float | None = None) -> CausalEstimate:
    """What the lesson's holdout measured over ``summaries`` (see the module)."""
    given, withheld = arms(lesson_id, summaries)
    given_successes, given_known = _verdicts(given)
    withheld_successes, withheld_known = _verdicts(withheld)
    uplift = stats.newcombe(given_successes, given_known, withheld_successes, withheld_known, CONFIDENCE)
    tokens = stats.mean_difference(_tokens(given), _tokens(withheld), CONFIDENCE)
    verdict = "no effect yet"
    if min(given_known, withheld_known) >= MIN_KNOWN and uplift.low is not None and uplift.high is not None:
        verdict = "helps" if uplift.low > 0 else "hurts" if uplift.high < 0 else verdict
    return CausalEstimate(
        given_runs=len(given), given_known=given_known, given_successes=given_successes,
        withheld_runs=len(withheld), withheld_known=withheld_known, withheld_successes=withheld_successes,
        uplift=uplift.estimate, low=uplift.low, high=uplift.high,
        tokens_given=stats.mean(_tokens(given)).estimate, tokens_withheld=stats.mean(_tokens(withheld)).estimate,
        tokens_difference=tokens.estimate, tokens_low=tokens.low, tokens_high=tokens.high,
        verdict=verdict, at=time.time() if now is None else now,
    )


def same(a: CausalEstimate | None, b: CausalEstimate | None) -> bool:
    """Whether two estimates say the same (their times aside)."""
    if a is None or b is None:
        return a is b
    return a.model_dump(exclude={"at"}) == b.model_dump(exclude={"at"})


def helps(lesson: Lesson) -> bool:
    return lesson.causal is not None and lesson.causal.verdict == "helps"


def hurts(lesson: Lesson) -> bool:
    """Its holdout shows it hurts, and no user released it since."""
    return lesson.causal is not None and lesson.causal.verdict == "hurts" and lesson.status_cause != "released"


def rank_bonus(lesson: Lesson) -> float:
    """What the builder adds to the ranking score of ``lesson``: ``HELPS_BONUS`` if it confidently helps."""
    return HELPS_BONUS if helps(lesson) else 0.0


def _points(value: float | None) -> str:
    return "?" if value is None else f"{value * 100:+.0f}"


def label(found: CausalEstimate | None) -> str:
    """``helps``, ``hurts`` or ``no effect yet, n=given/withheld`` (runs with a verdict); "" when never drawn."""
    if found is None or found.given_runs + found.withheld_runs == 0:
        return ""
    if found.verdict != "no effect yet":
        return found.verdict
    return f"no effect yet, n={found.given_known}/{found.withheld_known}"


def describe(found: CausalEstimate) -> str:
    """The estimate in one line: the verdict, each group's success rate, the difference with its interval, and
    the tokens."""
    def rate(successes: int, known: int) -> str:
        return f"{successes / known:.0%} of {known}" if known else "no runs with a verdict"

    line = (f"{label(found) or 'not drawn yet'}: succeeded {rate(found.given_successes, found.given_known)} runs "
            f"given it, {rate(found.withheld_successes, found.withheld_known)} it was withheld from")
    if found.uplift is not None:
        line += f"; {_points(found.uplift)} points (99 % interval {_points(found.low)} to {_points(found.high)})"
    if found.tokens_difference is not None:
        line += f"; tokens per run {found.tokens_difference:+.0f}"
    return line


def retire_reason(found: CausalEstimate) -> str:
    return f"runs given it did worse than runs it was withheld from: {describe(found)}"
