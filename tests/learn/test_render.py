"""The one renderer of lesson payloads, and a lesson completed in the current schema."""

from __future__ import annotations

from lessonbank.core.models import LESSON_SCHEMA_VERSION, Lesson, Recipe, ShapePayload
from lessonbank.learn import render
from lessonbank.learn.fixtext import payload
from lessonbank.learn.upgrade import changed, complete
from tests.learn.runs import fix_lesson, written_observed

FIX = payload('w = get_weather(city="Graz", date="2024-03-17")', "ValueError",
              'w = get_weather(city="Graz", date="17.03.2024")')
SHAPE = ShapePayload(tool="search", structure={"fields": [["data", {"fields": [["items", {"items": {
    "fields": [["name", "str"]], "more": True}}]], "more": False}], ["took", "..."]], "more": False},
    records=["data", "items"], call='r = search(query="mug")')


def test_a_lesson_reads_as_its_payload_renders_it() -> None:
    assert render.fix(FIX) == ('Pass `date` like "17.03.2024", not like "2024-03-17": `w = get_weather(city="Graz", '
                               'date="2024-03-17")` failed with ValueError; the corrected line '
                               '`w = get_weather(city="Graz", date="17.03.2024")` worked.')
    assert render.shape(SHAPE) == ("`search(...)` returns {'data': {'items': [{'name': str, ...}, ...]}, 'took': ...}: "
                                   "its records are `result['data']['items']`. It came back from "
                                   '`r = search(query="mug")`.')
    assert render.shape(SHAPE, with_call=False).endswith("`result['data']['items']`.")
    lesson = fix_lesson(FIX)
    assert render.text(lesson) == lesson.text == render.fix(FIX)
    # only a lesson whose text is its payload's reads as the payload: an imported or a distilled one as written
    imported = lesson.model_copy(update={"origin": "imported", "text": "Dates go DD.MM.YYYY for get_weather."})
    assert render.text(imported) == "Dates go DD.MM.YYYY for get_weather."
    recipe = Recipe(code="final_answer(1)", task="count  the\norders")
    assert render.recipe(recipe) == "Working code for a task like: count the orders"


def test_a_lesson_read_from_schema_1_is_completed_with_what_only_learn_works_out() -> None:
    old = written_observed("b", "fact", render.fix(FIX))
    assert old.fix is not None and old.fix.changed is None  # what changed: not in the old text's words
    done = complete(old)
    assert done.fix is not None and [c.argument for c in done.fix.changed or []] == ["date"]
    assert done.text == old.text and done.schema_version == LESSON_SCHEMA_VERSION and changed(old, done)
    assert not changed(done, complete(done))
    recipe = Lesson.new("b", "approach", "Working code for a task like: t", origin="recipe",
                        recipe=Recipe(code="rows = get_rows()\nfinal_answer(len(rows))", task="t"))
    assert complete(recipe).recipe.tools == ["final_answer", "get_rows"]  # type: ignore[union-attr]
