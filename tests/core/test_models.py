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
