"""A lesson in the current schema, complete: what ``lessonbank migrate`` writes back for a stored lesson.

Reading a lesson stored by schema 1 gives it its payloads and status cause (``core.migrate``); what only the
learning code can work out is left open there: the arguments a fix's correction changed and the tools a recipe
calls. This fills them in, and renders the text of a lesson whose text is its payload's (unchanged for a lesson
its own release rendered).
"""

from __future__ import annotations

from lessonbank.core.models import LESSON_SCHEMA_VERSION, Lesson
from lessonbank.learn import fixtext, needs, render


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
