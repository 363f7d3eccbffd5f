from lessonbank.core.models import Lesson, StepRecord, ToolCallRecord, lesson_id


def test_step_record_round_trips_through_json():
    record = StepRecord(
        id="r1:0",
        bank="b",
        run_id="r1",
        kind="action",
        seq=0,
        step_number=1,
        code="print(1)",
        tool_calls=[ToolCallRecord(name="python_interpreter", arguments='{"code": "1"}')],
        observations='{"looks": "like json"}',
    )
    again = StepRecord.from_json(record.to_json())
    assert again == record
    assert isinstance(again.observations, str)
    assert again.v == 1


def test_lesson_round_trips_and_ids_are_deterministic():
    lesson = Lesson.new("bank-a", "fact", "The CSV uses ';' as separator.", run_id="r1")
    assert Lesson.from_json(lesson.to_json()) == lesson
    assert lesson.id == lesson_id("bank-a", "the csv uses ';' as separator")
    assert lesson.id != lesson_id("bank-b", "The CSV uses ';' as separator.")


def test_a_lesson_with_payloads_round_trips_and_a_record_of_schema_1_is_read_into_the_current_one():
    from lessonbank.core.models import LESSON_SCHEMA_VERSION, Change, FixPayload, ShapePayload

    fix = FixPayload(failed='w = f(date="2024-01-02")', error="ValueError", fixed='w = f(date="02.01.2024")',
                     changed=[Change(argument="date", before="2024-01-02", after="02.01.2024")], form="DD.MM.YYYY")
    shape = ShapePayload(tool="f", structure={"fields": [["rows", {"items": "int"}]], "more": True}, records=["rows"])
    for lesson in (Lesson.new("b", "fact", "a fix", origin="observed", fix=fix),
                   Lesson.new("b", "fact", "a shape", origin="observed", shape=shape)):
        again = Lesson.from_json(lesson.to_json())
        assert again == lesson and again.schema_version == LESSON_SCHEMA_VERSION
    old = {"id": "x", "bank": "b", "kind": "fact", "origin": "observed", "tags": ["shape"], "status": "superseded",
           "status_reason": "contradicted by run r7 (judged a success)", "superseded_by": "y",
           "text": "`f(...)` returns {'rows': [int, ...], ...}: its records are `result['rows']`."}
    read = Lesson.model_validate(old)
    assert read.shape == shape and read.fix is None and read.schema_version == LESSON_SCHEMA_VERSION
    assert (read.status_cause, read.status_run, read.status_reason) == ("contradicted", "r7", old["status_reason"])
    prose = Lesson.model_validate({**old, "origin": "distilled"})
    assert prose.shape is None and prose.text == old["text"]  # only an observed lesson's text is read
