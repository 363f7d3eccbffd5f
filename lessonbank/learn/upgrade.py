"""A lesson in the current schema, complete: what ``lessonbank migrate`` writes back for a stored lesson.

Reading a lesson stored by schema 1 gives it its payloads and status cause (``core.migrate``); what only the
learning code can work out is left open there: the arguments a fix's correction changed and the tools a recipe
calls. This fills them in, and renders the text of a lesson whose text is its payload's (unchanged for a lesson
its own release rendered).

An observed shape's or failure's id is its fingerprint's, and what the fingerprint leaves out has grown (a shape's
flags' values, then its strings' written forms and its fields' words; a failure's forms its error does not name): one
stored under an earlier rule is moved to its current id (``observed_id``, ``rekeyed``), where the next run observing
it finds it, and the lesson it was stored as is superseded by it as merged (``lessonbank migrate`` moves every one;
a run observing one not moved yet moves it first: ``workers.bank_writer``).
"""

from __future__ import annotations

from lessonbank.core.models import LESSON_SCHEMA_VERSION, Lesson, recipe_id
from lessonbank.learn import failures, fixtext, needs, render, shapes, walk
from lessonbank.learn.provenance import capped

# The fingerprint rule of observed shapes and failures: raised whenever what their fingerprints leave out changes, so
# that a bank read for facts of an earlier rule (and found to hold none) is read again (``workers.rekeyed``).
RULE = "3"

# The reason an observed fact stored under an earlier fingerprint rule is superseded with (its cause is ``merged``).
REKEYED = "kept under its current fingerprint"


def complete(lesson: Lesson) -> Lesson:
    """``lesson`` with every field of the current schema filled in."""
    update: dict[str, object] = {"schema_version": LESSON_SCHEMA_VERSION}
    if lesson.fix is not None and lesson.fix.changed is None:
        update["fix"] = lesson.fix.model_copy(update={"changed": fixtext.changes(lesson.fix)})
    if lesson.recipe is not None and lesson.recipe.tools is None:
        update["recipe"] = lesson.recipe.model_copy(update={"tools": needs.called_tools(lesson.recipe)})
    done = lesson.model_copy(update=update)
    return done.model_copy(update={"text": render.text(done)})


def changed(before: Lesson, after: Lesson) -> bool:
    """Whether completing ``before`` changed anything that is stored."""
    return before.model_dump(mode="json") != after.model_dump(mode="json")


def kept_now(lesson: Lesson) -> Lesson:
    """An observed fact with its payload as the current rule keeps it (a failure's forms its error names)."""
    if lesson.origin == "observed" and lesson.failure is not None:
        return lesson.model_copy(update={"failure": failures.kept_now(lesson.failure)})
    return lesson


def observed_id(lesson: Lesson) -> str | None:
    """The id an observed shape or failure has by the current fingerprint rule; None for any other lesson, and for
    one whose stored payload is not one (a store may hold anything: it stays where it is)."""
    if lesson.origin != "observed":
        return None
    try:
        if lesson.shape is not None:
            return recipe_id(lesson.bank, shapes.fingerprint_of(lesson.shape), kind=shapes.TAG)
        if lesson.failure is not None:
            fingerprint = failures.fingerprint_of(failures.kept_now(lesson.failure))
            return recipe_id(lesson.bank, fingerprint, kind=failures.TAG)
    except render.MALFORMED:
        return None
    return None


def _order(lesson: Lesson) -> tuple[bool, int, float]:
    return lesson.status != "active", -lesson.evidence, lesson.first_seen


def _joined(into: Lesson, other: Lesson) -> Lesson:
    """``into`` with the runs of ``other`` (the same fact, stored under another id) it does not list, their
    evidence, failures and credit, and the values a shape's results held."""
    runs = [run for run in other.source_run_ids if run not in into.source_run_ids]
    if into.shape is not None and other.shape is not None:
        both = walk.merged(into.shape.structure, other.shape.structure)
        into = into.model_copy(update={"shape": into.shape.model_copy(update={"structure": both})})
    listed = {entry.run_id for entry in into.provenance}
    unlisted = max(other.evidence - len(other.source_run_ids), 0)  # past its provenance cap: counted, not listed
    return capped(into.model_copy(update={
        "evidence": into.evidence + len(runs) + unlisted,
        "source_run_ids": [*into.source_run_ids, *runs],
        "provenance": [*into.provenance, *(entry for entry in other.provenance if entry.run_id not in listed)],
        "provenance_dropped": into.provenance_dropped + other.provenance_dropped,
        "failed_runs": into.failed_runs + sum(entry.failed is True for entry in other.provenance
                                               if entry.run_id in runs),
        "verified": into.verified or other.verified,
        "given": into.given + other.given, "applied": into.applied + other.applied,
        "helpful": into.helpful + other.helpful, "harmful": into.harmful + other.harmful,
        "first_seen": min(into.first_seen, other.first_seen), "last_seen": max(into.last_seen, other.last_seen),
    }))


def rekeyed(found: list[Lesson], new_id: str) -> tuple[Lesson, list[Lesson]] | None:
    """What observed facts stored under other ids (``found``: those whose ``observed_id`` is ``new_id``, none
    superseded) are under ``new_id``, each payload as the current rule keeps it (``kept_now``): the active one with
    the most evidence (else the one with the most), with the runs, counts and values of the others of its status
    joined to it (``_joined``), its text rendered again; and the lessons it takes in. One of another status (a
    variant a user forgot, or outcomes retired) stays as it is. None for none."""
    if not found:
        return None
    first, *others = sorted(map(kept_now, found), key=_order)
    taken = [first, *(other for other in others if other.status == first.status)]
    lesson = first.model_copy(update={"id": new_id})
    for other in taken[1:]:
        lesson = _joined(lesson, other)
    return lesson.model_copy(update={"text": render.text(lesson)}), taken
