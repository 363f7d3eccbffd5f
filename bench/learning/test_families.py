"""Tests of the tool-families benchmark without an LLM: families, variants, checkers, tools, executor, figures.

Part of the default ``pytest`` run (``testpaths``); alone:

    python -m pytest -q -p no:cacheprovider bench/learning/test_families.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from families import HELD_OUT_SEED, TUNING_SEEDS, Family, all_families, answer_number, check, tools_for  # noqa: E402
from families_text import export_text  # noqa: E402

FAMILIES = all_families()
SEEDS = [*TUNING_SEEDS, HELD_OUT_SEED]


def tool(family: Family, seed: int, name: str, index: int = 0) -> Any:
    variant = family.variant(index, seed)
    return next(f for f in family.tools(variant.world) if f.__name__ == name), variant


def test_six_families_each_with_several_tools_and_different_questions() -> None:
    assert len(FAMILIES) >= 6
    assert len({f.trap for f in FAMILIES.values()}) == len(FAMILIES)
    for family in FAMILIES.values():
        assert len(family.tools(family.variant(0, 1).world)) >= 2, family.name
        kinds = [q.kind for q in family.questions]
        assert len(set(kinds)) == len(kinds) >= 6, family.name
        assert "difference" in kinds and any(len(q.tools) == 2 for q in family.questions), family.name
        for question in family.questions:
            assert len(question.wordings) >= 2, (family.name, question.kind)
            assert len(set(question.wordings)) == len(question.wordings)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_variants_are_deterministic_and_every_run_asks_another_question(name: str) -> None:
    family = FAMILIES[name]
    runs = len(family.questions)
    variants = family.variants(runs, 1)
    assert [v.prompt for v in family.variants(runs, 1)] == [v.prompt for v in variants]
    assert len({v.kind for v in variants}) == runs  # every kind once before any repeats
    assert all(v.prompt.endswith("Answer with the number only.") and "{" not in v.prompt for v in variants)
    for other in (2, HELD_OUT_SEED):
        assert all(a.world != b.world for a, b in zip(variants, family.variants(runs, other), strict=True))
    assert HELD_OUT_SEED not in TUNING_SEEDS


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_checker_accepts_the_answer_and_rejects_the_trap(name: str, seed: int) -> None:
    family = FAMILIES[name]
    for variant in family.variants(len(family.questions), seed):
        assert check(variant, variant.answer) and check(variant, f"{variant.answer:.2f}")
        assert check(variant, str(round(variant.answer, 2)))
        assert not check(variant, family.trapped_answer(variant)), (name, seed, variant.kind)
        assert not check(variant, None) and not check(variant, f"{variant.answer} or {variant.answer + 7}")


@pytest.mark.parametrize(("answer", "number"), [
    (12, 12.0), ("12", 12.0), ("12,345", 12345.0), ("1,234.50", 1234.5), ("-3.5", -3.5), ("\u22123", -3.0),
    ("12,5", None), ("1,23,456", None), ("1 and 2", None), ("", None), (None, None), (True, None),
    (float("nan"), None), ("about 4 euros", 4.0), ({"total": 3}, 3.0), ({"a": 1, "b": 2}, None),
])
def test_answer_number(answer: Any, number: float | None) -> None:
    assert answer_number(answer) == number


def test_an_hour_may_be_stated_as_a_clock_time_where_the_answer_is_an_hour() -> None:
    events = FAMILIES["events"]
    hours = [v for v in events.variants(6, 1) if v.kind in ("maximum", "lookup")]
    counts = [v for v in events.variants(6, 1) if v.kind == "count_above"]
    assert len(hours) == 2 and counts
    for variant in hours:
        hour = int(variant.answer)
        assert check(variant, f"{hour}:00") and check(variant, f" {hour:02d}:30:00 ") and check(variant, str(hour))
        assert not check(variant, f"{(hour + 1) % 24}:00") and not check(variant, f"{hour}:00 or {hour + 1}:00")
    for variant in counts:  # elsewhere "4:00" is not a number
        assert not check(variant, f"{int(variant.answer)}:00")


def test_the_data_hints_at_each_trap() -> None:
    list_transactions, ledger = tool(FAMILIES["ledger"], 1, "list_transactions")
    assert {"settled", "void"} <= {t["status"] for t in list_transactions(ledger.fields["a"])}
    get_daily_stats, traffic = tool(FAMILIES["traffic"], 1, "get_daily_stats")
    days = get_daily_stats(traffic.fields["a"])
    assert all(isinstance(d["visits"], str) for d in days) and any("," in d["visits"] for d in days)
    list_expenses, expenses = tool(FAMILIES["expenses"], 1, "list_expenses")
    rows = list_expenses(expenses.fields["a"])
    assert {r["currency"] for r in rows} - {"EUR"} and all("rate_to_eur" in r for r in rows)
    search_tickets, tickets = tool(FAMILIES["tickets"], 1, "search_tickets")
    page = search_tickets(tickets.fields["a"])
    assert page["truncated"] is True and page["returned"] == len(page["tickets"]) == 10
    everything = search_tickets(tickets.fields["a"], limit=100)
    assert everything["truncated"] is False and len(everything["tickets"]) > 10
    export_orders, exports = tool(FAMILIES["exports"], 1, "export_orders")
    text = export_orders(exports.fields["a"])
    assert text.startswith("\ufeffAmount;Order;") and "," in text.splitlines()[1].split(";")[0]
    list_events, events = tool(FAMILIES["events"], 1, "list_events")
    listed = list_events(events.fields["a"])
    assert all(e["start_utc"].endswith("Z") and e["utc_offset"][0] in "+-" for e in listed)


def test_a_european_export_reads_back_with_the_right_settings() -> None:
    import csv
    import io

    orders = [{"amount": 12.5, "order": "O-1", "customer": "Ana", "date": "2024-03-09"},
              {"amount": 990.0, "order": "O-2", "customer": "Ben", "date": "2024-12-31"}]
    rows = list(csv.DictReader(io.StringIO(export_text(orders).lstrip("\ufeff")), delimiter=";"))
    assert [float(r["Amount"].replace(",", ".")) for r in rows] == [12.5, 990.0]
    assert rows[1]["Date"] == "31.12.2024"
    naive = list(csv.DictReader(io.StringIO(export_text(orders))))
    assert "Amount" not in naive[0]  # the byte-order mark and ';' break the default reading


GIVEAWAYS = {
    "ledger": ("void", "status", "cancel", "settled", "exclude"),
    "traffic": ("string", "text", "comma", "separator", "thousand", "parse"),
    "expenses": ("currency", "rate", "convert", "eur", "exchange"),
    "tickets": ("truncat", "10", "default", "page", "all ", "more"),
    "exports": ("bom", "semicolon", ";", "comma", "decimal", "utf", "delimit"),
    "events": ("utc", "offset", "timezone", "time zone", "local", "zone"),
}


def test_tool_docstrings_are_silent_about_the_traps() -> None:
    assert set(GIVEAWAYS) == set(FAMILIES)
    for family in FAMILIES.values():
        for agent_tool in tools_for(family, family.variant(0, 1)):
            text = (agent_tool.description + " " + " ".join(i["description"] for i in agent_tool.inputs.values()))
            assert not [w for w in GIVEAWAYS[family.name] if w in text.lower()], (family.name, text)


def test_tools_refuse_what_they_do_not_know_with_a_clear_error() -> None:
    get_account, ledger = tool(FAMILIES["ledger"], 1, "get_account")
    assert get_account(ledger.fields["a"].lower())["account"] == ledger.fields["a"]
    with pytest.raises(ValueError, match=r"no account 'ACC-0'; known: ACC-"):
        get_account("ACC-0")
    search_tickets, tickets = tool(FAMILIES["tickets"], 1, "search_tickets")
    for bad in ("ten", 0):
        with pytest.raises(ValueError, match="limit must be"):
            search_tickets(tickets.fields["a"], limit=bad)
    # an argument with a default is nullable in the tool's schema: None is the default, not an error
    assert search_tickets(tickets.fields["a"], limit=None) == search_tickets(tickets.fields["a"])
    agent_tool = next(t for t in tools_for(FAMILIES["tickets"], tickets) if t.name == "search_tickets")
    assert agent_tool.inputs["limit"].get("nullable") is True


def test_every_wording_names_the_tools_its_question_needs() -> None:
    for family in FAMILIES.values():
        for question in family.questions:
            for wording in question.wordings:
                assert all(name in wording for name in question.tools), (family.name, question.kind, wording)


def test_tool_docstrings_say_what_form_the_result_takes() -> None:
    forms = {"list": "a list with one dict per", "dict": "a dict", "str": "one str"}
    for family in FAMILIES.values():
        for function in family.tools(family.variant(0, 1).world):
            returns = function.__annotations__["return"]
            assert forms[returns if isinstance(returns, str) else returns.__name__] in function.__doc__, (
                family.name, function.__name__)


def test_questions_that_mix_tools_need_the_second_tool() -> None:
    family = FAMILIES["expenses"]
    variant = next(v for v in family.variants(6, 1) if v.kind == "mixed")
    list_expenses, get_budget = family.tools(variant.world)
    team = variant.fields["a"]
    spent = sum(e["amount"] * e["rate_to_eur"] for e in list_expenses(team))
    assert variant.answer == pytest.approx(get_budget(team)["budget"] - spent, abs=1e-6)
    assert variant.tools == ("get_budget", "list_expenses") and "get_budget" in variant.prompt


# -- the remote-style executor --------------------------------------------------------------------------------


def test_a_code_agent_on_the_traceback_executor_sees_tracebacks_and_never_the_local_executors_text() -> None:
    from family_agents import AUTHORIZED_IMPORTS, TracebackExecutor
    from smolagents import CodeAgent

    from tests.fixtures.scripted_model import ScriptedModel, code_reply

    family = FAMILIES["ledger"]
    variant = next(v for v in family.variants(6, 1) if v.kind == "total")
    account = variant.fields["a"]
    executor = TracebackExecutor("ledger", variant.world, AUTHORIZED_IMPORTS)
    model = ScriptedModel([
        code_reply(f"rows = list_transactions('{account}')\ntotal = sum(r['Amount'] for r in rows)"),
        code_reply("import os"),
        code_reply("total = sum(r['amount'] for r in rows if r['status'] != 'void')\nprint(len(rows))"),
        code_reply("final_answer(round(total, 2))"),
    ])
    agent = CodeAgent(tools=tools_for(family, variant), model=model, executor=executor, max_steps=5,
                      verbosity_level=-1, additional_authorized_imports=AUTHORIZED_IMPORTS)
    try:
        answer = agent.run(variant.prompt)
    finally:
        agent.cleanup()
    assert check(variant, answer)
    first, second, third = (str(step.error or "") for step in agent.memory.steps[1:4])
    assert "Executing code yielded an error:\nKeyError\n'Amount'\nTraceback (most recent call last):" in first
    assert 'File "<cell 1>", line 2' in first and "Code execution failed" not in first
    assert "ImportError" in second and "not allowed in this sandbox" in second
    assert third == "" and agent.memory.steps[3].observations.startswith("Execution logs:\n")
    assert executor.process is None  # cleanup stopped the kernel


def test_a_step_that_runs_too_long_is_stopped_and_the_next_one_gets_a_fresh_kernel() -> None:
    from family_agents import TracebackExecutor
    from smolagents.utils import AgentError

    family = FAMILIES["traffic"]
    variant = family.variant(0, 1)
    executor = TracebackExecutor("traffic", variant.world, ["json"], timeout=2.0)
    executor.send_tools({})
    try:
        with pytest.raises(AgentError, match="TimeoutError"):
            executor("while True:\n    pass")
        output = executor(f"len(get_daily_stats('{variant.fields['a']}'))")
        assert output.output == "7" and not output.is_final_answer
    finally:
        executor.cleanup()


# -- arms, plan, servers ------------------------------------------------------------------------------------------


def test_the_plan_runs_core_arms_everywhere_and_pairs_every_arm_of_a_run_index() -> None:
    import families_run as fr
    from family_agents import ARMS

    args = fr.parse_args(["--runs", "2"])
    pairs = fr.planned(args)
    assert {(f.name, a.name) for f, a in pairs} >= {(f, a) for f in FAMILIES for a in fr.CORE_ARMS}
    assert {f.name for f, a in pairs if a.name == "tca-memory"} == set(fr.PLAN["tca-memory"])
    for arm, families in fr.PLAN.items():
        assert set(families) <= set(FAMILIES) and arm in ARMS
        assert fr.PLAN.get(ARMS[arm].baseline, families) == families  # a memory arm's baseline runs beside it
    order = [(f.name, i, a.name) for f, i, a in fr.run_order(pairs, 2)]
    assert len(order) == 2 * len(pairs) and order[0][:2] == order[1][:2] == (next(iter(FAMILIES)), 0)
    assert order.index(("ledger", 1, "none")) > max(order.index(("ledger", 0, a.name)) for _, a in pairs
                                                    if ("ledger", 0, a.name) in order)
    # run index by run index: every family's first run comes before any family's second
    assert max(i for i, (_, index, _) in enumerate(order) if index == 0) < order.index(("ledger", 1, "none"))
    assert len({fr.bank_name(f, a) for f, a in pairs}) == len(pairs)
    with pytest.raises(SystemExit):
        fr.parse_args(["--families", "nope"])


def test_each_arm_builds_its_agent() -> None:
    from family_agents import ARMS, Endpoints, TracebackExecutor, make_agent
    from smolagents import CodeAgent, ToolCallingAgent

    family = FAMILIES["tickets"]
    variant = family.variant(0, 1)
    endpoints = Endpoints("http://127.0.0.1:9/v1", "http://127.0.0.1:8/v1", "m")
    tca = make_agent(endpoints, ARMS["tca-memory"], family, variant, 7)
    assert isinstance(tca, ToolCallingAgent) and "tool_choice" not in tca.model.kwargs  # smolagents': "required"
    assert {"search_tickets", "get_project", "python_interpreter"} <= set(tca.tools)
    found = tca.tools["python_interpreter"](code=f"r = search_tickets(project={variant.fields['a']!r}, limit=100)\n"
                                                 "print(r['returned'])")
    assert found.startswith(f"Stdout:\n{len(variant.world['projects'][variant.fields['a']]['tickets'])}\n")
    named = tca.tools["python_interpreter"](code=f"r = functions.search_tickets(project={variant.fields['a']!r}, "
                                                 "limit=100)\nprint(r['returned'])")  # as the format names it
    assert named == found
    assert tca.model.client_kwargs["base_url"] == endpoints.tool_url
    tb = make_agent(endpoints, ARMS["tb-memory"], family, variant, 7)
    assert isinstance(tb, CodeAgent) and isinstance(tb.python_executor, TracebackExecutor)
    plain = make_agent(endpoints, ARMS["none"], family, variant, 7)
    assert type(plain.python_executor).__name__ == "LocalPythonExecutor"
    assert plain.model.client_kwargs["base_url"] == endpoints.code_url and "tool_choice" not in plain.model.kwargs


SMOLAGENTS_MESSAGES = [
    {"role": "system", "content": "You are an expert assistant."},
    {"role": "user", "content": "New task:\nHow many tickets?"},
    {"role": "assistant", "content": "Calling tools:\n[{'id': 'call_1', 'type': 'function', 'function': {'name': "
                                     "'search_tickets', 'arguments': {'project': 'DELT', 'limit': 100}}}]"},
    {"role": "user", "content": "Observation:\n{'project': 'DELT', 'tickets': [{'id': 'DELT-1', 'points': 3}]}"},
]
TOOL_SCHEMAS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {key: {"type": "string"}}, "required": [key]}}}
    for name, key in (("search_tickets", "project"), ("final_answer", "answer"))]


def test_the_tool_server_shows_results_unescaped_and_earlier_calls_as_the_model_writes_them() -> None:
    import tool_server

    prompt = tool_server.render(SMOLAGENTS_MESSAGES, TOOL_SCHEMAS)
    assert "{'project': 'DELT', 'tickets': [{'id': 'DELT-1', 'points': 3}]}" in prompt and "&#39;" not in prompt
    assert ('<|im_start|>assistant\nfunctions.search_tickets:\n{"project": "DELT", "limit": 100}<|im_end|>\n'
            in prompt)
    assert "\nfunctions.final_answer:\n" in prompt and prompt.endswith("<|im_start|>assistant\n")
    said = tool_server.render([{"role": "assistant", "content": "Calling tools: maybe"}], TOOL_SCHEMAS)
    assert said.startswith("<|im_start|>assistant\nmessage:\nCalling tools: maybe<|im_end|>")


class FakeLlama:
    """Answers ``create_completion`` with the given texts in turn, and keeps what it was asked."""

    verbose = False

    def __init__(self, *texts: str) -> None:
        self.texts, self.asked, self.seeds = list(texts), [], []  # type: ignore[var-annotated]

    def set_seed(self, seed: int) -> None:
        self.seeds.append(seed)

    def create_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.asked.append(kwargs)
        return {"id": f"c{len(self.asked)}", "created": 0, "model": "m", "usage": {"prompt_tokens": 1},
                "choices": [{"text": self.texts.pop(0), "logprobs": None}]}


def test_the_tool_server_answers_a_required_call_with_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    formats = pytest.importorskip("llama_cpp.llama_chat_format",
                                  reason="the local model's extra (lessonbank llm setup)")
    import tool_server

    server = tool_server.ToolServer(Path("model.gguf"), 1234, alias="m")
    command = server.command()
    assert command[1].endswith("tool_server.py") and "llama_cpp.server" not in command
    assert command[-2:] == ["--chat_format", tool_server.CHAT_FORMAT] and "--model_alias" in command
    tool_server.register()
    handler = formats.get_chat_completion_handler(tool_server.CHAT_FORMAT)
    llama = FakeLlama("final_answer", '{"answer": "7"}')
    response = handler(llama=llama, messages=SMOLAGENTS_MESSAGES, tools=TOOL_SCHEMAS, tool_choice="required",
                       seed=42, temperature=0.7, max_tokens=600)
    (call,) = response["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "final_answer", "arguments": '{"answer": "7"}'} and llama.seeds == [42]
    choose, arguments = llama.asked
    # the tool is chosen as the arguments are written: sampled at the agent's temperature, not greedily
    assert choose["temperature"] == 0.7 and choose["prompt"].endswith("<|im_start|>assistant\nfunctions.")
    assert choose["max_tokens"] is None and choose["stop"] == [":"]
    assert '"search_tickets:"' in choose["grammar"]._grammar and '"final_answer:"' in choose["grammar"]._grammar
    assert arguments["prompt"] == choose["prompt"] + "final_answer:\n" and arguments["temperature"] == 0.7
    assert '"\\"answer\\""' in arguments["grammar"]._grammar and arguments["max_tokens"] == 600
    named = FakeLlama('{"project": "DELT"}')  # a named function: no choice to make
    response = handler(llama=named, messages=SMOLAGENTS_MESSAGES, tools=TOOL_SCHEMAS,
                       tool_choice={"type": "function", "function": {"name": "search_tickets"}})
    assert response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "search_tickets"
    assert len(named.asked) == 1 and named.asked[0]["prompt"].endswith("functions.search_tickets:\n")
    seen: list[Any] = []  # any other choice: llama-cpp-python's own format, seeded
    monkeypatch.setattr(formats, "chatml_function_calling", lambda **kw: seen.append(kw["tool_choice"]) or "ok")
    assert handler(llama=FakeLlama(), messages=[], tools=TOOL_SCHEMAS, tool_choice="auto", seed=1) == "ok"
    assert seen == ["auto"]


# -- figures ---------------------------------------------------------------------------------------------------------


def _row(family: str, arm: str, index: int, correct: bool, tokens: int = 1000) -> dict[str, Any]:
    return {"family": family, "arm": arm, "run_index": index, "correct": correct, "steps": 3, "input_tokens": tokens,
            "kind": "total" if index % 2 else "mixed"}


def test_figures_count_runs_after_the_first_success_paired_with_the_baseline() -> None:
    from family_report import format_tables, sign_test, summarize, wilson

    runs = [_row("f", "none", i, ok) for i, ok in enumerate([False, True, False, False, False])]
    runs += [_row("f", "memory", i, ok, 400) for i, ok in enumerate([False, True, True, True, True])]
    runs += [_row("g", "none", i, ok) for i, ok in enumerate([True, True, False])]
    runs += [_row("g", "memory", i, ok, 500) for i, ok in enumerate([True, False, False])]
    summary = summarize(runs, {"none": "none", "memory": "none"})
    f_memory = summary["families"]["f"]["memory"]
    assert f_memory["marks"] == "-++++" and f_memory["first_success"] == 2
    assert f_memory["after_first"]["successes"] == 3 == f_memory["after_first"]["runs"]
    paired = f_memory["paired_after_first"]
    assert paired["baseline"]["successes"] == 0 and paired["wins"] == 3 and paired["token_ratio"] == 0.4
    pooled = summary["pooled"]["memory"]["paired_after_first"]
    assert (pooled["arm"]["successes"], pooled["arm"]["runs"], pooled["baseline"]["successes"]) == (3, 5, 1)
    verdicts = {t["target"]: t["verdict"] for t in summary["targets"]}
    assert verdicts["success after first success >= 80%"] == "MISSED"  # 3/5
    assert verdicts["success >= 2.0x none on the same runs"] == "met"
    assert verdicts["input tokens <= 0.6x none on the same runs"] == "met"
    assert verdicts["f: not below none"] == "met" and verdicts["g: not below none"] == "MISSED"
    first = next(t for t in summary["targets"] if t["target"].startswith("first success"))
    assert first["figure"] == "f run 2 vs run 2, g run 1 vs run 1"
    assert "MISSED" in format_tables(summary)
    assert summary["by_kind"]["memory"] == {"mixed": "3/5", "total": "2/3"}
    low, high = wilson(3, 3)
    assert 0.43 < low < 0.44 and high == 1.0 and wilson(0, 0) == (0.0, 0.0)
    assert sign_test(3, 0) == 0.25 and sign_test(0, 0) == 1.0


# -- regimes: what lessonbank hears about a run, by arm ---------------------------------------------------------


@pytest.fixture
def redis_url(tmp_path: Path) -> Any:
    from common import redis_server

    with redis_server(tmp_path / "redis") as url:
        yield url


def _settings(redis_url: str, tmp_path: Path) -> Any:
    from lessonbank.core.settings import Settings

    return Settings(redis_url=redis_url, queue="families-test", data_dir=tmp_path / "data", store_timeout=0.5,
                    redis_timeout=2.0, lesson_holdout=0.0)


@pytest.mark.parametrize(("arm_name", "right", "verdict"), [
    ("memory", True, (b"success", b"check")), ("memory", False, (b"failure", b"check")),
    ("memory-nocheck", True, (None, None)), ("memory-late", True, (None, None)),
])
def test_only_the_checked_arm_hands_lessonbank_a_verdict_with_the_run(
        monkeypatch: pytest.MonkeyPatch, redis_url: str, tmp_path: Path, arm_name: str, right: bool,
        verdict: tuple[bytes | None, bytes | None]) -> None:
    import family_agents
    import redis
    from family_agents import ARMS, Endpoints, run_once
    from smolagents import CodeAgent

    from lessonbank.core.constants import run_key
    from tests.fixtures.scripted_model import ScriptedModel, final_code

    family = FAMILIES["tickets"]
    variant = family.variant(0, 1)
    answer = variant.answer if right else family.trapped_answer(variant)

    def scripted(endpoints: Any, arm: Any, family: Family, variant: Any, seed: int) -> CodeAgent:
        return CodeAgent(tools=tools_for(family, variant), model=ScriptedModel([final_code(answer)]), max_steps=2,
                         verbosity_level=-1)

    monkeypatch.setattr(family_agents, "make_agent", scripted)
    monkeypatch.setattr(family_agents, "evict_prompt_cache", lambda url, endpoints: None)
    settings = _settings(redis_url, tmp_path)
    row = run_once(Endpoints("http://127.0.0.1:9/v1", "", "m"), ARMS[arm_name], family, variant, "families-t",
                   settings)
    assert row["correct"] is right and row["run_id"]
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 60
    while not client.exists(run_key(row["run_id"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.hmget(run_key(row["run_id"]), ["verdict", "verdict_source"]) == list(verdict)


def test_the_late_arm_gives_its_verdict_through_the_cli_after_the_run(
        monkeypatch: pytest.MonkeyPatch, redis_url: str, tmp_path: Path) -> None:
    import family_agents
    import redis

    from lessonbank.core.constants import run_key

    settings = _settings(redis_url, tmp_path)
    client = redis.Redis.from_url(redis_url)
    client.hset(run_key("run-late-1"), mapping={"bank": "families-memory-late-tickets", "state": "distilled"})
    monkeypatch.setattr(family_agents, "CREDIT_TIMEOUT", 1.0)  # no worker here to credit it
    said = family_agents.late_feedback(client, "run-late-1", False, settings)
    assert said == "failure, credit not seen within 1 s"
    assert client.hmget(run_key("run-late-1"), ["verdict", "verdict_source"]) == [b"failure", b"user"]
    assert client.llen(settings.queue) == 1  # the credit task the verdict queued for the distilled run
    assert family_agents.late_feedback(client, "no-such-run", True, settings).startswith("feedback failed (1)")


def test_the_held_out_seed_never_carries_on_a_tuning_seeds_results_or_banks(tmp_path: Path) -> None:
    import families_run as fr

    workdir = tmp_path / "families-x.work"
    fr.claim_workdir(workdir, 2)
    fr.claim_workdir(workdir, 2)  # the same seed carries on
    with pytest.raises(SystemExit, match="holds the banks of seed 2, not 4711"):
        fr.claim_workdir(workdir, HELD_OUT_SEED)
    legacy = tmp_path / "families-old.work"
    (legacy / "redis").mkdir(parents=True)
    with pytest.raises(SystemExit, match="unknown seed"):
        fr.claim_workdir(legacy, HELD_OUT_SEED)
    fr.claim_workdir(tmp_path / "families-new.work", HELD_OUT_SEED)
    results = tmp_path / "families-x.json"
    results.write_text('{"args": {"seed": 2, "runs": 4, "lesson_holdout": 0.0}, "runs": []}')
    args = fr.parse_args(["--seed", str(HELD_OUT_SEED), "--runs", "4"])
    args.lesson_holdout = 0.0
    with pytest.raises(SystemExit, match="other seed"):
        fr.load_previous(results, args)
    args = fr.parse_args(["--seed", "2", "--runs", "4"])
    args.lesson_holdout = 0.1
    with pytest.raises(SystemExit, match="other lesson_holdout"):
        fr.load_previous(results, args)


def test_the_report_never_writes_into_the_results_file_it_reads(tmp_path: Path, capsys: Any) -> None:
    import json

    from family_report import main

    results = tmp_path / "families-r.json"
    runs = [_row("f", "none", i, ok) for i, ok in enumerate([False, True])]
    runs += [_row("f", "memory", i, ok, 400) for i, ok in enumerate([True, True])]
    results.write_text(json.dumps({"args": {"seed": 3}, "runs": runs}))
    before = results.read_bytes()
    assert main([str(results)]) == 0 and "Targets:" in capsys.readouterr().out
    summary = tmp_path / "summary.json"
    assert main([str(results), "--summary", str(summary)]) == 0
    assert results.read_bytes() == before
    written = json.loads(summary.read_text())
    assert written["runs"] == 4 and written["summary"]["families"]["f"]["memory"]["marks"] == "++"
    with pytest.raises(SystemExit):
        main([str(results), "--summary", str(results)])
    assert results.read_bytes() == before
