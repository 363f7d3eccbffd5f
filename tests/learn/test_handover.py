"""What a fix or a call line of one question hands to another: the change, with neutral names and this task's values,
never that question's expression, names or values; from recorded steps of a CodeAgent and of a ToolCallingAgent."""

from __future__ import annotations

import json

import pytest

from lessonbank.core.models import Lesson, Recipe, StepRecord, ToolCallRecord, ToolResultRecord
from lessonbank.core.redact import Redactor
from lessonbank.core.specimen import specimen
from lessonbank.instructions import format_lessons
from lessonbank.learn import adapt, failures, fixes, handover, render, shapes
from lessonbank.learn.consolidate import Observed, counted_failed, observed_lesson
from lessonbank.learn.fixtext import payload
from tests.learn.runs import view

TOOLS = {"get_daily_stats": "Visits of a site, a list with one dict per day.",
         "get_site": "A site's team and weekly goal, one dict."}
DIFFERENCE = ("Using get_daily_stats, how many more visits did web-pioneer get in total than web-juniper? Answer with "
              "the number only.")
TWO_TOOLS = ("How far above its weekly goal (get_site) were the visits of web-ember over the last seven days "
             "(get_daily_stats)? Answer with the number only.")
TOTAL = ("Using get_daily_stats, how many visits did site web-tundra get in total over the days it lists? Answer with "
         "the number only.")
DAYS = [{"date": "2024-05-01", "visits": "6,559", "signups": "12"}, {"date": "2024-05-02", "visits": "764",
                                                                         "signups": "3"}]


def action(seq: int, code: str, observations: str = "", failed_at: str = "", error: str = "") -> StepRecord:
    message = f"Code execution failed at line '{failed_at}' due to: {error}" if failed_at else ""
    return StepRecord(id=f"r:{seq}", bank="b", run_id="r", kind="action", seq=seq, code=code,
                      observations=observations, error_type="AgentExecutionError" if message else "",
                      error_message=message)


def lessons_of(steps: list[StepRecord], task: str, judged_right: bool, tools: list[str]) -> list[Lesson]:
    """The fixes and shapes a run of ``steps`` leaves, as the worker keeps them (a run judged wrong vouches for none
    and counts as failed)."""
    run = view(steps, task, tools=tools)
    facts = [Observed("fix", fix.fingerprint, fix.steps, fix=fix.payload, task=task)
             for fix in fixes.extract(run, Redactor())]
    facts += [Observed("shape", shape.fingerprint, shape.steps, shape=shape.payload, task=task)
              for shape in shapes.extract(run, task)]
    return [counted_failed(observed_lesson("b", fact, "r", judged_right), "r", not judged_right) for fact in facts]


def traffic_code_run() -> list[StepRecord]:
    """A CodeAgent's run of the difference question: it read the last day only (``[-1]``), its ``int`` failed on a
    number written with a comma, its corrected line ran, and its answer was wrong."""
    pioneer = "total_visits_pioneer = get_daily_stats(site=\"web-pioneer\")[-1]['visits']"
    wrong = "total_visits_juniper = int(get_daily_stats(site=\"web-juniper\")[-1]['visits'])"
    right = "total_visits_juniper = int(get_daily_stats(site=\"web-juniper\")[-1]['visits'].replace(',', ''))"
    last = "difference = total_visits_pioneer - total_visits_juniper"
    return [
        action(0, f"{pioneer}\n{wrong}\n{last}\nfinal_answer(difference)", failed_at=wrong,
               error="ValueError: invalid literal for int() with base 10: '6,559'"),
        action(1, f"{pioneer}\n{right}\n{last}\nfinal_answer(difference)", failed_at=last,
               error="TypeError: unsupported operand type(s) for -: 'str' and 'int'"),
        StepRecord(id="r:2", bank="b", run_id="r", kind="final", seq=2, action_output="2"),
    ]


def site_code_run() -> list[StepRecord]:
    """A CodeAgent's run of the two-tool question: it called each tool and printed what it returned."""
    days = 'days_ember = get_daily_stats(site="web-ember")\nprint(days_ember)'
    code = 'goal_ember = get_site(site="web-ember")\nprint(goal_ember)'
    observed = "Execution logs:\n" + repr({"site": "web-ember", "team": "growth", "weekly_goal": "85,000"})
    return [action(0, days, observations="Execution logs:\n" + repr(DAYS)), action(1, code, observations=observed)]


def test_a_fix_from_a_failed_code_agent_run_hands_over_the_conversion_not_its_line() -> None:
    fix_lessons = lessons_of(traffic_code_run(), DIFFERENCE, judged_right=False, tools=list(TOOLS))
    (fix,) = [lesson for lesson in fix_lessons if lesson.fix is not None]
    assert "[-1]" in fix.fix.fixed and not fix.verified  # what the run kept: its own line, from a run judged wrong
    site = lessons_of(site_code_run(), TWO_TOOLS, judged_right=True, tools=list(TOOLS))
    assert [lesson.shape.call for lesson in site if lesson.shape] == ['days_ember = get_daily_stats(site="web-ember")',
                                                                     'goal_ember = get_site(site="web-ember")']
    block, given = format_lessons([fix, *site], task=TOTAL, tools=TOOLS)
    assert fix in given
    # the conversion, on each record of the call's result, with this task's site, said to be an example to adapt
    assert (f"- {render.ADAPT_UNVERIFIED}: `result = get_daily_stats(site=\"web-tundra\")`, then for each `record` in "
            "`result`, convert the value first: `int(record['visits'].replace(',', ''))`; written any other way it "
            "failed with ValueError. (seen in 1 run)") in block
    # never that question's selection, names or values, nor a line to write as it is
    for theirs in ("[-1]", "total_visits", "juniper", "pioneer", "difference", "For this task"):
        assert theirs not in block, theirs
    # the other question's get_site call is no line for a question that does not use get_site; its get_daily_stats
    # call, from a question that used get_site too, is an example to adapt
    assert "get_site(site=" not in block and "goal_ember" not in block and "web-ember" not in block
    alone, _ = format_lessons(site, task=TOTAL, tools=TOOLS)  # without the fix, whose call is already the call
    assert (f'- {render.ADAPT_OTHER}: write `result = get_daily_stats(site="web-tundra")`, then use its records: '
            "`for record in result:`.") in alone
    assert "get_site(site=" not in alone and "days_ember" not in alone and "web-ember" not in alone
    # nor for a question that uses both tools: still that run's conversion only, with this task's site
    both = TWO_TOOLS.replace("web-ember", "web-ash")
    block, _ = format_lessons([fix, *site], task=both, tools=TOOLS)
    assert '`result = get_daily_stats(site="web-ash")`, then for each `record` in `result`, convert' in block
    assert "juniper" not in block and "[-1]" not in block and "goal_ember" not in block


def test_a_fix_of_a_question_that_used_other_tools_is_no_line_for_this_task() -> None:
    """A fix from a run judged right, but of a question that used a tool this one will not: an example to adapt."""
    line = "goal = int(get_site(site=\"web-ember\")['weekly_goal'])"
    fixed = "goal = int(get_site(site=\"web-ember\")['weekly_goal'].replace(',', ''))"
    fix = observed_lesson("b", Observed("fix", "f", (0, 1), fix=payload(line, "ValueError", fixed), task=TWO_TOOLS),
                          "r", True)
    uses_one = "Using get_site, what is the weekly goal of web-ash? Answer with the number only."
    assert f"- {render.ADAPT_OTHER}: `result = get_site(site=\"web-ash\")`, then convert the value first: " \
           "`int(result['weekly_goal'].replace(',', ''))`" in format_lessons([fix], task=uses_one, tools=TOOLS)[0]
    uses_both = "By how much did web-ash beat its weekly goal (get_site) in visits (get_daily_stats)?"
    assert "- For this task: `result = get_site(site=\"web-ash\")`, then convert" in format_lessons(
        [fix], task=uses_both, tools=TOOLS)[0]
    # the same question, other site: its line whole, with this task's site
    same = format_lessons([fix], task=TWO_TOOLS.replace("web-ember", "web-ash"), tools=TOOLS)[0]
    assert "- For this task: Write `goal = int(get_site(site=\"web-ash\")['weekly_goal'].replace(',', ''))`" in same


def catalog_code_run(query: str) -> list[StepRecord]:
    result = {"status": "ok", "data": {"items": [{"name": f"{query} a", "price": 12.5}], "total": 1}, "took_ms": 3}
    code = f'products_with_{query} = search_catalog(query="{query}")\nprint(products_with_{query})'
    return [action(0, code, observations="Execution logs:\n" + repr(result))]


def catalog_tool_calling_run(query: str) -> list[StepRecord]:
    result = {"status": "ok", "data": {"items": [{"name": f"{query} a", "price": 12.5}], "total": 1}, "took_ms": 3}
    return [StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, observations=repr(result),
                       tool_calls=[ToolCallRecord(name="search_catalog", arguments=json.dumps({"query": query}))],
                       tool_results=[ToolResultRecord(name="search_catalog", specimen=specimen(result))])]


CATALOG = "Using search_catalog, how many '{}' products cost less than {} euros? Answer with the number only."


def test_the_call_that_got_a_result_is_given_with_a_neutral_name_and_this_tasks_value() -> None:
    (shape,) = lessons_of(catalog_code_run("lamp"), CATALOG.format("lamp", 30), judged_right=True,
                          tools=["search_catalog"])
    assert shape.shape is not None and shape.shape.call == 'products_with_lamp = search_catalog(query="lamp")'
    block, _ = format_lessons([shape], task=CATALOG.format("mug", 22), tools={"search_catalog": "Search products."})
    assert ('- For this task: write `result = search_catalog(query="mug")`, then use its records: `for record in '
            "result['data']['items']:`.") in block
    assert "lamp" not in block and "products_with" not in block and "30" not in block


def test_a_tool_calling_agents_shape_is_given_without_its_questions_value() -> None:
    (shape,) = lessons_of(catalog_tool_calling_run("lamp"), CATALOG.format("lamp", 30), judged_right=True,
                          tools=["search_catalog"])
    block, given = format_lessons([shape], task=CATALOG.format("mug", 22), tools={"search_catalog": "Search."})
    assert given == [shape] and "its records are `result['data']['items']`" in block
    assert "lamp" not in block and "30" not in block


def tool_calling_traffic_run() -> list[StepRecord]:
    """A ToolCallingAgent's run of the difference question: a call with an argument the tool does not take failed,
    the same call without it ran; its answer was wrong."""
    message = ("Error executing tool 'get_daily_stats' with arguments {'site': 'web-juniper', 'days': 7}: TypeError: "
               "get_daily_stats() got an unexpected keyword argument 'days'\nPlease try again or use another tool")
    return [
        StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, error_type="AgentToolExecutionError",
                   error_message=message),
        StepRecord(id="r:1", bank="b", run_id="r", kind="action", seq=1, observations=repr(DAYS),
                   tool_calls=[ToolCallRecord(name="get_daily_stats", arguments=json.dumps({"site": "web-juniper"}))],
                   tool_results=[ToolResultRecord(name="get_daily_stats", specimen=specimen(DAYS))]),
        StepRecord(id="r:2", bank="b", run_id="r", kind="final", seq=2, action_output="2"),
    ]


def test_a_tool_calling_agents_fix_is_the_call_with_this_tasks_value() -> None:
    lessons = lessons_of(tool_calling_traffic_run(), DIFFERENCE, judged_right=False, tools=list(TOOLS))
    (fix,) = [lesson for lesson in lessons if lesson.fix is not None]
    assert fix.fix.failed == 'get_daily_stats(site="web-juniper", days=7)'
    block, _ = format_lessons(lessons, task=TOTAL, tools=TOOLS)
    assert (f'- {render.ADAPT_UNVERIFIED}: write `result = get_daily_stats(site="web-tundra")`; written any other way '
            "it failed with TypeError.") in block
    assert "juniper" not in block and "pioneer" not in block and "For this task: Write" not in block


@pytest.mark.parametrize(("failed", "fixed", "kind", "call", "loop", "written"), [
    ("t = int(get_daily_stats(site='a')[-1]['visits'])", "t = int(get_daily_stats(site='a')[-1]['visits'].replace("
     "',', ''))", "conversion", "get_daily_stats(site='a')", "result", "int(record['visits'].replace(',', ''))"),
    ("t = sum(int(d['visits']) for d in days)", "t = sum(int(d['visits'].replace(',', '')) for d in days)",
     "conversion", "", "result", "int(record['visits'].replace(',', ''))"),
    ("total = df['Revenue'].sum()", "total = df['revenue'].sum()", "key", "", "", "result['revenue']"),
    ("items = r['items']", "items = r['data']['items']", "key", "", "", "result['data']['items']"),
    ("t = get_weather(city='Lyon')['max']", "t = get_weather(city='Lyon')['records'][0]['max_c']", "key",
     "get_weather(city='Lyon')", "result['records']", "record['max_c']"),
    ("t = sum(x['amount'] for x in inv['lines'])", "t = sum(x['amount'] / 100 for x in inv['lines'])",
     "conversion", "", "result['lines']", "record['amount'] / 100"),
    ('w = get_weather(city="Lyon", date="2024-01-02")', 'w = get_weather(city="Lyon", date="02.01.2024")', "call",
     'get_weather(city="Lyon", date="02.01.2024")', "", 'get_weather(city="Lyon", date="02.01.2024")'),
])
def test_what_a_fix_hands_over_is_the_change_with_neutral_names(failed: str, fixed: str, kind: str, call: str,
                                                                 loop: str, written: str) -> None:
    found = handover.handover(payload(failed, "ValueError", fixed))
    assert found is not None and (found.kind, found.call, found.loop, found.fixed) == (kind, call, loop, written)


@pytest.mark.parametrize(("failed", "fixed"), [
    ("n = len(details['members'])", "if 'members' in details:"),  # another statement: nothing to hand over
    ("a = f(x)[0] + g(y)[1]", "a = f(x)[0]['v'] + g(y)[1]['v']"),  # two places at once, two calls
])
def test_a_change_that_cannot_be_said_without_the_questions_line_is_not_handed_over(failed: str, fixed: str) -> None:
    assert handover.handover(payload(failed, "KeyError", fixed)) is None
    fix = observed_lesson("b", Observed("fix", "f", (0, 1), fix=payload(failed, "KeyError", fixed), task="Task one?"),
                          "r", True)
    assert format_lessons([fix], task="Task two?")[0] == ""


def test_the_same_question_with_other_values_is_told_from_another_question() -> None:
    assert handover.same_question("What was the highest temperature in Graz on 2024-01-02?",
                                  "What was the highest temperature in Rome on 2024-05-06?")
    assert handover.same_question(CATALOG.format("lamp", 30), CATALOG.format("mug", 22))
    assert not handover.same_question(DIFFERENCE, TOTAL)
    assert not handover.same_question("", "")


def test_a_recipes_names_holding_another_questions_value_get_this_tasks() -> None:
    """A recipe given with this task's values also names its results with them: ``count_below_22_euros`` beside
    ``< 25`` told the model two thresholds."""
    code = ("products_with_lamp = search_catalog(query='lamp')\ncount_below_22_euros = sum((1 for record in "
            "products_with_lamp['data']['items'] if record['price'] < 22))\nfinal_answer(count_below_22_euros)")
    example = adapt.recipe_example(Recipe(code=code, task=CATALOG.format("lamp", 22)), CATALOG.format("chair", 25))
    assert example is not None and example.placed
    assert "count_below_25_euros" in example.code and "products_with_chair" in example.code
    assert "22" not in example.code and "lamp" not in example.code


def test_a_recipe_of_a_question_that_used_another_tool_is_not_given() -> None:
    """Run with this task's values, the two-tool question's code computes that question's answer (the visits minus
    the weekly goal) for a question about the visits alone."""
    code = ("result = get_daily_stats(site='web-ember')\nweekly_goal = get_site(site='web-ember')['weekly_goal']\n"
            "total_visits = sum((int(record['visits'].replace(',', '')) for record in result))\n"
            "final_answer(total_visits - int(weekly_goal.replace(',', '')))")
    recipe = Lesson.new("b", "approach", f"Working code for a task like: {TWO_TOOLS}", origin="recipe").model_copy(
        update={"recipe": Recipe(code=code, task=TWO_TOOLS), "verified": True})
    assert format_lessons([recipe], task=TOTAL, tools=TOOLS) == ("", [])
    block, given = format_lessons([recipe], task=TWO_TOOLS.replace("web-ember", "web-ash"), tools=TOOLS)
    assert given == [recipe] and "get_site(site='web-ash')" in block and "web-ember" not in block
    assert "written for that task" not in block  # the same question with another site
    reworded = "Over the last seven days (get_daily_stats), by how much did web-ash beat its weekly goal (get_site)?"
    block, given = format_lessons([recipe], task=reworded, tools=TOOLS)
    assert given == [recipe] and "with this task's values put in; written for that task: an example to adapt" in block
    # a question with one more value of its kind: its computation cannot be this one's, only how it read its data
    two = "By how much did web-ash and web-oak together beat their weekly goal (get_site, get_daily_stats)?"
    block, given = format_lessons([recipe], task=two, tools=TOOLS)
    assert given == [recipe] and "How code of another question got its data and read it" in block
    assert ("result = get_daily_stats(site=<site>)\nweekly_goal = get_site(site=<site>)['weekly_goal']\n"
            "for record in result:\n    visits = int(record['visits'].replace(',', ''))\n```") in block
    assert "final_answer" not in block and "sum(" not in block and "total_visits" not in block


RAIN = "Using get_rainfall, how much rain fell in {} in {}? Answer with the number only."


def test_a_call_line_says_which_argument_its_tools_failures_were_passed_another_way() -> None:
    """One run's call failed on a month written one way; another run's call, with the month written another way,
    got records. The call line given to a third question says the form is what set them apart; without the
    failure in the block, or with the same form, the line is given as before."""
    line = 'rain = get_rainfall(town="Kells", month="2024-03")'
    failed = [action(0, f"{line}\nprint(rain)", failed_at=line,
                     error="ValueError: bad month '2024-03': write the month as MM/YYYY")]
    (failure,) = failures.extract(view(failed, RAIN.format("Kells", "2024-03"), tools=["get_rainfall"]))
    assert failure.payload.forms == {"month": "9999-99"}  # the error names the month only, not the town
    avoid = observed_lesson("b", Observed(failures.TAG, failure.fingerprint, (0,), failure=failure.payload), "r1",
                            verified=False)
    got = [action(0, 'rain = get_rainfall(town="Birr", month="07/2024")\nprint(rain)',
                  observations="Execution logs:\n" + repr({"town": "Birr", "days": [{"day": 1, "mm": 2.5}]}))]
    (shape,) = lessons_of(got, RAIN.format("Birr", "2024-07"), judged_right=True, tools=["get_rainfall"])
    tools = {"get_rainfall": "Rain of a town, a dict with one record per day."}
    block, _ = format_lessons([shape, avoid], task=RAIN.format("Ennis", "2024-11"), tools=tools)
    assert ('- For this task: write `result = get_rainfall(town="Ennis", month="11/2024")` (pass `month` written like '
            '"99/9999", as here: written like "9999-99" it raised ValueError), then use its records: `for record in '
            "result['days']:`.") in block
    alone, _ = format_lessons([shape], task=RAIN.format("Ennis", "2024-11"), tools=tools)
    assert 'write `result = get_rainfall(town="Ennis", month="11/2024")`, then use' in alone
    assert handover.form_change('result = get_rainfall(town="Ennis", month="2024-11")', [failure.payload]) == ""
    assert handover.form_change('result = get_snow(town="Ennis", month="11/2024")', [failure.payload]) == ""
