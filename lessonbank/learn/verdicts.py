"""Whether a run did its job, and what that lets its lessons be: the rules, over the run's view and verdict.

Sources by trust: a user (``feedback``) or the check on the final answer, then the run's own signals (how it
ended), then the LLM (only when nobody else can). A run judged a failure by a user, a check or its own ending
is no evidence that what it did works; a success a user or a check judged, reached by the run itself, vouches
for what it teaches. A success by the run's own signals vouches for nothing (``lessonbank.learn.trust``), and
an answer that is None, empty or made up is never one.
"""

from __future__ import annotations

from lessonbank.learn.trust import VOUCHING, answer_problem
from lessonbank.learn.view import RunView

JUDGING = ("user", "check", "signals")  # whose failure makes a run no evidence that what it did works
RECIPE_SOURCES = JUDGING  # whose success keeps a recipe (one a signal kept waits for a second run, ``trust``)


def judged_failed(verdict: str, source: str) -> bool:
    """Whether a user, a check or the run's own ending judged the run a failure: what it did is no evidence
    that it works (counted on the lessons it teaches, ``Lesson.failed_runs``)."""
    return verdict == "failure" and source in JUDGING


def vouches(outcome: str, verdict: str, source: str) -> bool:
    """Whether the run's distilled lessons may be handed out at once: a success a user or a check judged,
    reached by the run itself. A run stopped at its step limit whose forced answer the check found right
    floundered to the end; its lessons wait for evidence like any others."""
    return verdict == "success" and source in VOUCHING and outcome != "max_steps"


def signals(run: RunView) -> str:
    """What the run's own ending says: ``failure`` (exception, max steps, no final answer), ``success``
    (a final answer and no error in the last action step) or ``unknown``."""
    outcome = run.outcome
    if outcome in ("error", "max_steps", "interrupted", "abandoned"):
        return "failure"
    if outcome != "success":
        return "unknown"
    actions = run.actions
    last = actions[-1] if actions else None
    return "failure" if last is not None and last.failed else "success"


def judge(recorded: tuple[str, str], run: RunView) -> tuple[str, str]:
    """(verdict, source), most trusted source first: the user or the check (``recorded``), then the run's
    signals; a run whose answer is None, empty or made up (``trust.answer_problem``) failed by its signals."""
    verdict, source = recorded
    if verdict != "unknown":
        return verdict, source
    by_signals = signals(run)
    if by_signals == "success" and answer_problem(run):
        return "failure", "signals"
    return (by_signals, "signals") if by_signals != "unknown" else ("unknown", "none")


def by_llm(judged: tuple[str, str], outcome: str, run: RunView) -> tuple[str, str]:
    """The verdict once the LLM judged the run too (``outcome``): its word only when nobody else's is known, and
    never a success whose answer is None, empty or made up."""
    verdict, source = judged
    if source != "none" or outcome not in ("success", "failure"):
        return verdict, source
    return ("unknown", "none") if outcome == "success" and answer_problem(run) else (outcome, "llm")
