"""Trust: what vouches for a lesson or a recipe, and when one may be handed to runs.

A lesson is eligible (``eligible``) when it is active and something independent of the run that taught it
vouches for it:

- a user: they added, imported or released it;
- a verdict: a run that taught it was judged a success by a user or a check (``Provenance.vouched``; a run
  stopped at its step limit vouches for nothing);
- outcomes: runs that applied it ended well (helpful credit);
- the tool itself: an observed fix or shape holds only the run's own code and the structure of what a tool
  returned, never a value the run read; an observed failure quotes the error a tool raised, its values as
  roles, and is held (``taint``, ``quarantine``, a call its error names) when it carries what a lesson may not;
- the tool's own error, on a run a user or a check judged (failed or not): a distilled lesson that states what
  one of the run's tools raised (``framing.attested_by``); a run judged only by its own ending vouches for nothing;
- a second independent run (``agreeing_runs``): two runs each taught it without being given it, each ended
  well by its own signals with an answer it did not make up (``answer_problem``), and runs of one question
  gave one answer. Runs judged failures are no witnesses: two of them writing the same claim are not two
  runs of evidence.

A run's own signals are a weak outcome: they rank lessons and decide what to distil, and make a run one
witness, never a licence on their own. What a user without ``check=`` gets: observed fixes, shapes and failures at once,
a recipe or a distilled lesson once a second run agrees (or when they say ``lessonbank feedback RUN
--success``). Held items (``taint``, ``quarantine``) wait for ``lessons release`` whatever vouches for them.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import re
from dataclasses import dataclass

from lessonbank.core.models import RELEASED_BY_USER, USER_ORIGINS, Lesson, Provenance
from lessonbank.learn import code as pycode
from lessonbank.learn import flow
from lessonbank.learn.trim import answer_calls, ran_before_failure
from lessonbank.learn.view import RunView

VOUCHING = ("user", "check")  # whose success makes a run vouch for what it teaches
WEAK = ("signals", "llm")  # outcomes that rank and choose, and make a run a witness at most
EMPTY_ANSWERS = frozenset({"", "none", "null", "nan", "n/a", "[]", "{}", "()", "''", '""', "undefined"})
MIN_WITNESSES = 2
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
LONG_ANSWER = 80  # characters: a longer answer is a text of its own, not a value to find in the observations


@dataclass(frozen=True)
class Testimony:
    """What one run says for the lessons it teaches: whether its verdict vouches for them, whether it is a
    witness (a success by its own signals with an answer it did not make up), and hashes of its question and
    answer, so that witnesses of one question can be checked to agree."""

    vouched: bool = False
    witness: bool = False
    question: str = ""
    answer: str = ""
    checked: bool = False  # a user or a check found its answer right, however it ended
    judged: bool = False  # a user or a check judged the run, either way

    def for_attested(self) -> Testimony:
        """What the run says for a lesson a tool's own error states (``framing.attested_by``): the tool's word,
        on a run a user or a check judged (failed or not), vouches for it; a run judged only by its own ending (its
        step limit, an error) vouches for nothing."""
        return dataclasses.replace(self, vouched=self.vouched or self.judged)

    def for_recipe(self) -> Testimony:
        """What the run says for its recipe: a right answer vouches for the code that computed it, even when the
        run reached it at its step limit (its distilled account of what it did is no worked example)."""
        return dataclasses.replace(self, vouched=self.checked)

    def entry(self, entry: Provenance) -> Provenance:
        """The run's provenance entry saying what this run says."""
        return entry.model_copy(update={"vouched": self.vouched, "witness": self.witness or self.vouched,
                                        "question": self.question, "answer": self.answer})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def normal_answer(answer: str) -> str:
    """An answer as witnesses compare it: numbers as numbers (``235.40`` and ``235.4``), text by its words."""
    text = " ".join(answer.split()).strip().strip(".").lower()
    try:
        return repr(float(text.replace(",", "")))
    except ValueError:
        return text


def testimony(task: str, answer: str, outcome: str, verdict: str, source: str) -> Testimony:
    """What a run judged ``verdict`` by ``source`` says for the lessons it teaches (see ``Testimony``)."""
    checked = verdict == "success" and source in VOUCHING
    witness = verdict == "success" and source in WEAK and outcome not in ("max_steps", "error")
    return Testimony(checked and outcome != "max_steps", witness, _digest(" ".join(task.lower().split())),
                     _digest(normal_answer(answer)), checked, verdict in ("success", "failure") and source in VOUCHING)


def _numbers(text: str) -> set[str]:
    found: set[str] = set()
    for match in _NUMBER.findall(text[:50_000]):
        try:
            found.add(repr(float(match.replace(",", ""))))
        except ValueError:
            continue
    return found


def _computed(view: RunView) -> bool:
    """Whether the run's code reached ``final_answer`` with a value one of its calls gave (a tool's result, a
    value read from one), not a constant it wrote."""
    program: list[ast.stmt] = []
    for step in view.actions:
        if step.code.strip():
            program += ran_before_failure(step) if step.failed else (pycode.parse(step.code) or [])
    if not answer_calls(program):
        return False
    answering = flow.answering_calls(program)
    calls = [node for stmt in program for node in ast.walk(stmt) if isinstance(node, ast.Call)
             and id(node) in answering]
    return any(not (isinstance(call.func, ast.Name) and (call.func.id == "final_answer" or call.func.id in
                                                          pycode.PURE_CALLS)) for call in calls)


def answer_problem(view: RunView) -> str:
    """Why the run's answer cannot make it a success, whatever its signals ("" when it can): it is None or
    empty, or a constant that appears nowhere in the run's task or observations and that its code did not
    compute."""
    answer = view.final_answer
    if answer.strip().strip("'\"").strip().lower() in EMPTY_ANSWERS:
        return f"it answered {answer.strip()[:40]!r}"
    if len(answer) > LONG_ANSWER or _computed(view):
        return ""
    seen = "\n".join([view.task, *(f"{step.observation}\n{step.error_message}" for step in view.actions)])
    numbers = _numbers(answer)
    if numbers:
        missing = sorted(numbers - _numbers(seen))
        return (f"it answered {answer[:40]!r}, whose {missing[0]} nothing it observed holds and its code did not "
                "compute") if missing else ""
    words = " ".join(answer.lower().split()).strip(" .")
    return "" if words in " ".join(seen.lower().split()) else (
        f"it answered {answer[:40]!r}, which nothing it observed holds and its code did not compute")


def agreeing_runs(lesson: Lesson) -> int:
    """How many independent runs vouch for ``lesson`` or witness it (see the module); witnesses of one question
    that gave different answers do not count."""
    witnesses = [entry for entry in lesson.provenance if entry.vouched or entry.witness]
    answers: dict[str, set[str]] = {}
    for entry in witnesses:
        if entry.question:
            answers.setdefault(entry.question, set()).add(entry.answer)
    split = {question for question, given in answers.items() if len(given) > 1}
    return len({entry.run_id for entry in witnesses if entry.question not in split or entry.vouched})


def released(lesson: Lesson) -> bool:
    """A user released it from quarantine or retirement: they vouch for it."""
    return lesson.status_cause == "released" or lesson.status_reason == RELEASED_BY_USER


def eligible(lesson: Lesson) -> bool:
    """Whether ``lesson`` may be handed to runs (see the module)."""
    if lesson.status != "active" or any(mark.held for mark in lesson.taint) and not released(lesson):
        return False
    if lesson.origin in USER_ORIGINS or released(lesson) or lesson.helpful > 0:
        return True
    if lesson.origin == "observed":
        return True
    if any(entry.vouched for entry in lesson.provenance):
        return True
    if not lesson.provenance or all(entry.witness is None for entry in lesson.provenance):
        return _as_written(lesson)
    return agreeing_runs(lesson) >= MIN_WITNESSES


def _as_written(lesson: Lesson) -> bool:
    """The rule a lesson written before provenance named its witnesses was written under: a recipe, a run that
    ended well, or two runs (for a "what worked" lesson, two not judged failures)."""
    runs = lesson.evidence - (lesson.failed_runs if lesson.kind == "approach" else 0)
    return lesson.recipe is not None or lesson.verified or runs >= 2


def voucher(lesson: Lesson) -> str:
    """Who vouches for an eligible lesson, in words ("a user", "check", "2 runs that agreed")."""
    if lesson.origin in USER_ORIGINS or released(lesson):
        return "a user"
    vouched = any(entry.vouched for entry in lesson.provenance)
    if lesson.recipe is not None:
        sources = [check.split(":", 1)[1] for check in lesson.recipe.checks if check.startswith("outcome:")]
        if all(entry.witness is None for entry in lesson.provenance):  # written before runs said who vouched
            return ", ".join(dict.fromkeys(sources)) or "its outcome"
        vouching = [source for source in sources if source in VOUCHING]
        if vouching and vouched:
            return ", ".join(dict.fromkeys(vouching))
    if vouched:
        return "a user or a check"
    runs = agreeing_runs(lesson)
    return f"{runs} runs that agreed" if runs >= MIN_WITNESSES else "its outcome"


def attested(lesson: Lesson, run_id: str, said: Testimony | None) -> Lesson:
    """``lesson`` with ``run_id``'s provenance entry saying what that run says for it (as it is without one)."""
    if said is None:
        return lesson
    return lesson.model_copy(update={"provenance": [said.entry(entry) if entry.run_id == run_id else entry
                                                    for entry in lesson.provenance]})


def restated(provenance: list[Provenance], run_id: str, witness: bool) -> list[Provenance]:
    """``provenance`` with ``run_id``'s entry a witness or not (a verdict given after the run taught it)."""
    return [entry.model_copy(update={"witness": witness}) if entry.run_id == run_id else entry for entry in provenance]
