"""Per-lesson causal credit (``lessonbank.learn.causal``): the draw, the estimate, its verdict and what it is
worth under the repeated looks the worker gives it."""

from __future__ import annotations

import random

from lessonbank.core.models import Lesson, RunSummary
from lessonbank.learn import causal, stats


def lesson(text: str = "Read the export with encoding='latin-1'.", given: int = 10,
           origin: str = "distilled") -> Lesson:
    return Lesson.new("b", "fact", text).model_copy(update={"given": given, "origin": origin})


def run(n: int, lesson_id: str, given: bool, success: bool, tokens: int = 100) -> RunSummary:
    return RunSummary(run_id=f"r{n}", bank="b", arm="lessons", started_at=float(n), ended_at=float(n) + 1,
                      verdict="success" if success else "failure", verdict_source="check", input_tokens=tokens,
                      given=[lesson_id] if given else [], drawn=[lesson_id], withheld=[] if given else [lesson_id])


def test_the_draw_leaves_out_new_and_user_lessons_and_withholds_with_its_chance() -> None:
    old, new, user = lesson(), lesson("A new lesson.", given=1), lesson("A user's.", origin="added")
    rng = random.Random(1)
    withheld = 0
    for _ in range(1000):
        drawn, out = causal.withhold([old, new, user], 0.2, rng, after=5)
        assert drawn == [old.id] and set(out) <= {old.id}
        withheld += len(out)
    assert 150 < withheld < 250  # 0.2 of 1000
    assert causal.withhold([old, new, user], 0.2, rng, after=5, users=True)[0] == [old.id, user.id]
    assert causal.withhold([old], 0.0, rng, after=0) == ([], [])


def test_a_lesson_that_helps_hurts_or_does_nothing_gets_its_verdict() -> None:
    x = lesson().id
    helps = [run(n, x, given=n % 5 != 0, success=n % 5 != 0 or n % 2 == 0) for n in range(200)]
    found = causal.estimate(x, helps, now=0.0)
    assert found.verdict == "helps" and found.low is not None and found.low > 0
    assert found.given_runs == 160 and found.withheld_runs == 40 and found.tokens_difference == 0
    hurts = [run(n, x, given=n % 5 != 0, success=n % 5 == 0 or n % 2 == 0) for n in range(200)]
    assert causal.estimate(x, hurts).verdict == "hurts"
    idle = [run(n, x, given=n % 5 != 0, success=n % 2 == 0) for n in range(200)]
    assert causal.label(causal.estimate(x, idle)) == "no effect yet, n=160/40"
    few = helps[:40]  # 8 withheld runs: fewer than MIN_KNOWN
    assert causal.estimate(x, few).verdict == "no effect yet"
    assert causal.label(causal.estimate(x, [])) == ""


def test_a_run_that_did_not_draw_the_lesson_is_in_neither_group() -> None:
    x = lesson().id
    outside = RunSummary(run_id="o", bank="b", arm="lessons", started_at=0, ended_at=1, verdict="success",
                         given=[x])  # given before it was drawn, or in a bank without the holdout
    given, withheld = causal.arms(x, [outside, run(1, x, True, True), run(2, x, False, False)])
    assert [s.run_id for s in given] == ["r1"] and [s.run_id for s in withheld] == ["r2"]


def test_a_useless_lesson_is_rarely_called_helpful_or_harmful_under_repeated_looks() -> None:
    """The worker re-estimates after every run: over 200 runs a lesson with no effect gets a verdict in about one
    case in twenty, where a 95 % interval would give about one in four. (``estimate``'s rule on running counts.)"""
    def called(confidence: float, seeds: int = 300) -> float:
        found = 0
        for seed in range(seeds):
            rng, counts = random.Random(seed), [0, 0, 0, 0]  # successes and runs given, then withheld
            for _ in range(200):
                side = 0 if rng.random() >= 0.2 else 2
                counts[side] += rng.random() < 0.7
                counts[side + 1] += 1
                if min(counts[1], counts[3]) >= causal.MIN_KNOWN:
                    interval = stats.newcombe(*counts, confidence=confidence)
                    low, high = interval.low or 0.0, interval.high or 0.0
                    if low > 0 or high < 0:
                        found += 1
                        break
        return found / seeds

    assert called(causal.CONFIDENCE) < 0.1
    assert called(0.95) > 0.15  # what the repeated looks would cost at 95 %


def test_helping_lessons_rank_higher_and_hurting_ones_are_retired_unless_released() -> None:
    x = lesson()
    helps = [run(n, x.id, given=n % 5 != 0, success=n % 5 != 0 or n % 2 == 0) for n in range(200)]
    helping = x.model_copy(update={"causal": causal.estimate(x.id, helps)})
    assert causal.helps(helping) and causal.rank_bonus(helping) == causal.HELPS_BONUS and causal.rank_bonus(x) == 0
    hurts = [run(n, x.id, given=n % 5 != 0, success=n % 5 == 0 or n % 2 == 0) for n in range(200)]
    hurting = x.model_copy(update={"causal": causal.estimate(x.id, hurts)})
    assert causal.hurts(hurting) and "withheld from" in causal.retire_reason(hurting.causal)  # type: ignore[arg-type]
    assert not causal.hurts(hurting.model_copy(update={"status_cause": "released"}))
