"""Smoke test of the learning benchmark's tasks: variants, tools' data, checkers, figures (no LLM, no services).

Part of the default ``pytest`` run (``testpaths``); alone:

    python -m pytest -q -p no:cacheprovider bench/learning/test_tasks.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import trap_tasks as tt  # noqa: E402
from report import format_tables, summarize  # noqa: E402
from trap_tasks import ALL_TASKS, TASKS, matches, tools_for  # noqa: E402


def test_at_least_five_tasks_each_with_distinct_variants() -> None:
    assert len(TASKS) >= 5
    for task in ALL_TASKS.values():
        variants = task.variants()
        assert len(variants) >= 4, task.name
        assert len({v.prompt for v in variants}) == len(variants), f"{task.name}: a variant repeats a prompt"
        assert len({str(v.answer) for v in variants}) >= 3, f"{task.name}: answers barely vary"
        assert [v.prompt for v in task.variants()] == [v.prompt for v in variants], "variants are not deterministic"


def test_another_seed_gives_other_variants_behind_the_same_trap_and_seed_0_is_the_usual_set() -> None:
    from harness import run_seed

    for task in ALL_TASKS.values():
        usual, other = task.variants(), task.variants(seed=1)
        assert [v.prompt for v in task.variants(seed=0)] == [v.prompt for v in usual]
        assert [v.prompt for v in task.variants(seed=1)] == [v.prompt for v in other], "not deterministic"
        assert all(a.world != b.world for a, b in zip(usual, other, strict=True)), task.name
    assert run_seed("invoice_cents", 2) == run_seed("invoice_cents", 2, 0) == 9_810_201  # the seeds results used
    assert run_seed("invoice_cents", 2, 1) != run_seed("invoice_cents", 2)


@pytest.mark.parametrize("name", sorted(tt.REWORDINGS))
def test_reworded_variants_ask_the_same_question_in_other_words_than_the_run_before(name: str) -> None:
    from lessonbank.learn import fixtext

    task = ALL_TASKS[name]
    usual, reworded = task.variants(seed=7), task.variants(seed=7, reworded=True)
    assert [(v.key, v.answer, v.world) for v in reworded] == [(v.key, v.answer, v.world) for v in usual]
    assert reworded[0] == usual[0] and reworded[4] == usual[4]  # wording 0 is the usual prompt
    for before, after, plain in zip(reworded, reworded[1:], usual[1:], strict=False):
        assert after.prompt != before.prompt and "{" not in after.prompt
        # every value of the usual prompt is in the reworded one: the same question
        assert set(fixtext.WORD.findall(plain.prompt)) & set(plain.key.replace("<", " ").split()) <= set(
            fixtext.WORD.findall(after.prompt))
        assert after.prompt.endswith("Answer with the number only.")
    with pytest.raises(ValueError, match="no other wordings"):
        ALL_TASKS["paged_orders"].variants(reworded=True)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(ALL_TASKS))
def test_checker_accepts_the_answer_and_rejects_the_trap(name: str, seed: int) -> None:
    task = ALL_TASKS[name]
    for variant in task.variants(seed=seed):
        assert task.check(variant, variant.answer)
        assert task.check(variant, str(variant.answer))
        assert not task.check(variant, None)
        assert not task.check(variant, trapped_answer(name, variant))


def trapped_answer(name: str, variant: tt.Variant) -> object:
    """The answer an agent that falls into the trap gives, computed from the data the tools serve."""
    world = variant.world
    if name == "paged_orders":
        return len(tt.orders_page(world, variant.key, 1)["orders"])
    if name == "invoice_cents":
        return sum(line["qty"] * line["unit_price_cents"] for line in tt.invoice_record(world, variant.key)["lines"])
    if name == "date_format":
        return world["min_c"]  # the trap itself raises; the checker must still reject a wrong number
    if name == "nested_catalog":
        return tt.catalog_search(world, world["query"])["data"]["total"]
    if name == "stock_packs":
        return sum(row["qty"] for row in tt.stock_record(world, variant.key))
    if name == "semver_latest":
        return max(r["version"] for r in tt.release_list(world, variant.key)["releases"])
    raise AssertionError(f"no trapped answer for {name}")


def test_the_data_hints_at_each_trap() -> None:
    orders = TASKS["paged_orders"].variants()[0]
    first = tt.orders_page(orders.world, orders.key, 1)
    assert first["pages"] > 1 and first["next"] == "page=2"
    assert sum(len(tt.orders_page(orders.world, orders.key, p)["orders"]) for p in range(1, first["pages"] + 1)) \
        == orders.answer
    invoice = TASKS["invoice_cents"].variants()[0]
    lines = tt.invoice_record(invoice.world, invoice.key)["lines"]
    assert all(isinstance(line["unit_price_cents"], int) for line in lines)
    assert sum(line["qty"] * line["unit_price_cents"] for line in lines) / 100 == pytest.approx(invoice.answer)
    weather = TASKS["date_format"].variants()[0]
    with pytest.raises(ValueError, match="expected DD.MM.YYYY"):
        tt.weather_record(weather.world, weather.world["city"], weather.world["iso"])
    year, month, day = weather.world["iso"].split("-")
    record = tt.weather_record(weather.world, weather.world["city"], f"{day}.{month}.{year}")
    assert record["records"][0]["max_c"] == weather.answer
    catalog = TASKS["nested_catalog"].variants()[0]
    found = tt.catalog_search(catalog.world, catalog.world["query"])
    assert "items" not in found and found["data"]["total"] > len(found["data"]["items"])
    stock = TASKS["stock_packs"].variants()[0]
    assert all(row["unit"].split()[-1].isdigit() for row in tt.stock_record(stock.world, stock.key))
    releases = ALL_TASKS["semver_latest"].variants()[0]
    listed = [r["version"] for r in tt.release_list(releases.world, releases.key)["releases"]]
    assert listed == sorted(listed) and listed[-1] != releases.answer


GIVEAWAYS = {
    "paged_orders": ("pages", "next", "paginat", "per page", "all pages"),
    "invoice_cents": ("cent", "divide", "/ 100"),
    "date_format": ("dd", "yyyy", "format"),
    "nested_catalog": ("nested", "items", "data", "total"),
    "stock_packs": ("unit", "pack", "box", "case", "tray", "multiply"),
    "semver_latest": ("sort", "semver", "order", "text"),
}


def test_tool_docstrings_are_silent_about_the_traps() -> None:
    assert set(GIVEAWAYS) == set(ALL_TASKS)
    for task in ALL_TASKS.values():
        for tool in tools_for(task, task.variants()[0]):
            text = (tool.description + " " + " ".join(i["description"] for i in tool.inputs.values())).lower()
            assert not [word for word in GIVEAWAYS[task.name] if word in text], (task.name, text)


def test_tools_serve_the_variant() -> None:
    task = TASKS["stock_packs"]
    variant = task.variants()[1]
    [get_stock] = tools_for(task, variant)
    assert {row["sku"] for row in get_stock(sku=variant.key)} == {variant.key}
    with pytest.raises(ValueError, match="unknown sku"):
        get_stock(sku="NOPE-1")


@pytest.mark.parametrize(("answer", "expected", "ok"), [
    ("12", 12, True), (12.0, 12, True), ("125.47 EUR", 125.47, True), ("125,47", 125.47, True),
    ("12 or 13", 12, False), ("", 12, False), (True, 1, False), ("1.10.0", "1.10.0", True),
    ("'1.10.0'", "1.10.0", True), ("1.9.4", "1.10.0", False),
])
def test_matches(answer: object, expected: float | str, ok: bool) -> None:
    assert matches(answer, expected, 0.005) is ok


def test_summary_marks_missed_when_memory_does_not_beat_the_baseline() -> None:
    def row(arm: str, index: int, correct: bool) -> dict[str, object]:
        return {"task": "t", "arm": arm, "run_index": index, "correct": correct, "steps": 3, "input_tokens": 100,
                "output_tokens": 10, "seconds": 1.0}

    runs = [row("none", 0, False), row("none", 1, True), row("memory", 0, False), row("memory", 1, True)]
    summary = summarize(runs, ["none", "memory"], ["t"], 2)
    assert summary["verdicts"]["memory"]["later_runs"] == "MISSED"
    assert summary["by_run_index"]["memory"]["2"]["success_rate"] == 1.0
    runs[1]["correct"] = False
    summary = summarize(runs, ["none", "memory"], ["t"], 2)
    assert summary["verdicts"]["memory"]["by_task_later_runs"]["t"] == "beats baseline"
    assert "beats baseline" in format_tables(summary, ["none", "memory"], {})


def test_the_first_call_probe_gives_one_fix_in_each_form_and_reads_the_date_passed() -> None:
    import first_call as fc

    variants = TASKS["date_format"].variants(2, seed=1)
    solved, task = variants
    iso, dotted = task.world["iso"], fc.dotted(task.world["iso"])
    for kind in fc.KINDS:
        lesson = fc.fix_lesson(solved, kind)
        stored, shown, only = (fc.block(lesson, task.prompt, form) for form in ("stored", "shown", "only"))
        assert f'"{dotted}"' in stored and solved.world["iso"] not in stored  # with the task's own date
        assert stored.index(iso + '"') < stored.rindex(dotted + '"')  # kept: the failing line first
        assert shown.index(dotted + '"', shown.index("write")) < shown.rindex(iso + '"')  # the line to write first
        assert iso not in only and dotted in only
        assert fc.block(lesson, task.prompt, "task") == stored  # the same block, given after the task
        assert fc.block(lesson, task.prompt, "task-only") == only  # what the instructions builder gives
        context = fc.block(lesson, task.prompt, "task-only", fc.context_lessons(solved))
        assert context.index("```python") < context.index("Write `") < context.index("returns {'city'")
        assert iso not in context and context.count(dotted) >= 2  # the recipe's call and the fix's, no failing date
        without = fc.block(lesson, task.prompt, "task-recipe", fc.context_lessons(solved))
        assert "```python" in without and "returns {'city'" in without and "Write `" not in without
        last = fc.block(lesson, task.prompt, "task-fixlast", fc.context_lessons(solved))
        assert last.index("returns {'city'") < last.index("Write `") and sorted(last) == sorted(context)
        assert fc.block(lesson, task.prompt, "task-args") == fc.block(lesson, task.prompt, "task-args-last") == only
        pointed = fc.block(lesson, task.prompt, "task-inrecipe", fc.context_lessons(solved))
        assert "Write `" not in pointed and "For this task: the code above passes " in pointed and iso not in pointed
        rest = fc.block(lesson, task.prompt, "task-runrecipe", fc.context_lessons(solved))
        assert rest.replace(" and the rest of the code above: pass ", ": pass ") == context
    from smolagents import CodeAgent

    from tests.fixtures.scripted_model import ScriptedModel, final_code

    agent = CodeAgent(tools=[], model=ScriptedModel([final_code("1")]))
    agent.run("Say 1.", additional_args=fc.ARGS)  # the probe's task-args-last form writes smolagents' note itself
    assert agent.task == "Say 1." + fc.NOTE
    assert fc.classify(f'w = get_weather(city="X", date="{dotted}")\nprint(w)', task) == "right date"
    assert fc.classify(f'w = get_weather("X", "{iso}")', task) == "ISO date"
    assert fc.classify("w = get_weather(city, d)", task) == "other"
    assert fc.classify("print(1)", task) == "no call"
    results = [{"seed_set": 1, "run_index": 1, "kind": "asked", "form": form, "first_call": call, "record": False}
               for form, call in (("stored", "ISO date"), ("task", "right date"))]
    summary = fc.summarize(results, ["stored", "task"])
    assert summary["pairs task vs stored"] == {"n": 1, "task right, stored not": 1, "stored right, task not": 0}
    assert summary["pairs task vs stored, right answer"]["n"] == 1 and summary["all/task"]["right answer"] == 0
    assert summary["all/task"]["right date"] == 1 and summary["all/stored"]["ISO date"] == 1


def test_an_arm_with_one_bank_shares_it_across_tasks_and_runs_them_run_index_first() -> None:
    from harness import ARMS
    from run import bank_name, run_order

    tasks = [ALL_TASKS["invoice_cents"], ALL_TASKS["date_format"]]
    per_task, shared, plain = ARMS["memory"], ARMS["memory-one-bank"], ARMS["none"]
    assert {bank_name(shared, t) for t in tasks} == {"learning-memory-one-bank"}
    assert len({bank_name(per_task, t) for t in tasks}) == 2
    order = [(t.name, i, a.name) for t, i, a in run_order(tasks, 2, [plain, shared])]
    assert order == [("invoice_cents", 0, "none"), ("invoice_cents", 0, "memory-one-bank"),
                     ("date_format", 0, "none"), ("date_format", 0, "memory-one-bank"),
                     ("invoice_cents", 1, "none"), ("invoice_cents", 1, "memory-one-bank"),
                     ("date_format", 1, "none"), ("date_format", 1, "memory-one-bank")]
    assert [(t.name, i) for t, i, _ in run_order(tasks, 2, [per_task])] == [
        ("invoice_cents", 0), ("invoice_cents", 1), ("date_format", 0), ("date_format", 1)]
