"""The cheapest benchmark runs and writes its JSON (benchmarks themselves are not part of the suite)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from tests.fixtures.openai_server import FakeOpenAI, Reply

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_retrieval_quality_writes_its_figures(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "retrieval_quality.py"), "--pairs", "6", "--no-distractors",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "retrieval_quality.json").read_text())
    assert result["pairs"] == 6 and result["lessons_in_bank"] == 6
    for method in ("dense", "hybrid", "builder"):
        assert set(result[method]) >= {"recall@1", "recall@5", "mrr"}
        assert 0.0 <= result[method]["recall@1"] <= result[method]["recall@5"] <= 1.0
    assert result["hybrid"]["recall@5"] > 0.5  # six unrelated lessons: the right one ranks near the top
    assert {r["figure"] for r in result["rows"]} >= {"retrieval recall@5 (hybrid)", "retrieval MRR (hybrid)"}
    assert result["machine"]["cpus"] and "recall@5" in proc.stdout


def run_bench(script: str, tmp_path: Path, *args: str, timeout: int = 600) -> dict:  # type: ignore[type-arg]
    proc = subprocess.run([sys.executable, str(REPO / "bench" / script), *args, "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads((tmp_path / script.replace(".py", ".json")).read_text()))


def test_instructions_latency_measures_the_agent_path_and_its_baseline(tmp_path: Path) -> None:
    result = run_bench("instructions_latency.py", tmp_path, "--sizes", "300", "--queries", "3", "--repeats", "1",
                       "--real", "100", "--previous-up-to", "300")
    (size,) = result["sizes"]
    assert size["lessons"] == 300 and size["agent_heavy_modules"] == []  # the agent loads no engine or model
    for key in ("agent_path_ms", "in_process_ms", "agent_paired_embedding_ms", "in_process_paired_embedding_ms",
                "bare_query_ms", "previous_engine_ms"):
        assert size[key]["n"] == 3 and size[key]["p50"] > 0
    assert size["task_embedding_ms"]["n"] == 6  # each call on either path paired with one embedding
    assert set(size["task_embedding_unpaired_ms"]) == {"1", "default"}
    assert size["delete_bank"]["lessons"] == 50 and 0 < size["same_lessons_as_previous"] <= 1
    latency, delete = result["rows"][:2], result["rows"][2]
    assert [r["figure"].split(", ")[-1] for r in latency] == ["agent -> Redis -> owner", "in process"]
    assert all("task embedding" in r["baseline"] and "(1 thread, as the store embeds), paired" in r["baseline"]
               for r in latency)
    assert delete["figure"].startswith("delete_bank of 50 lessons") and delete["value"].endswith(" s")
    assert (tmp_path / "instructions_latency.png").is_file()


def test_prompt_tokens_counts_real_tokens_against_the_target(tmp_path: Path) -> None:
    from lessonbank.core.settings import Settings
    from lessonbank.local_llm import MODELS

    model = Settings(_env_file=None).data_dir / "models" / MODELS["0.5b"].filename
    if not model.is_file():
        pytest.skip(f"no Qwen2.5 GGUF at {model} (lessonbank llm fetch --model 0.5b)")
    result = run_bench("prompt_tokens.py", tmp_path)
    now, before = result["realistic"]["now"], result["realistic"]["before"]
    assert 1000 < now["prompt_tokens"] < before["prompt_tokens"] and result["schema_tokens"] > 100
    assert now["transcript_estimate"] >= now["transcript_tokens"]
    assert result["rows"][0]["met"] in ("yes", "MISSED") and result["rows"][0]["target"] == "<= 3,000"


def test_worker_throughput_runs_a_real_worker(tmp_path: Path) -> None:
    result = run_bench("worker_throughput.py", tmp_path, "--concurrency", "1", "2", "--runs", "3", "--repeats", "1",
                       "--no-one-bank", timeout=900)
    assert [case["concurrency"] for case in result["cases"]] == [1, 2]
    assert all(case["states"] == {"distilled": 3} for case in result["cases"])
    assert result["cases"][0]["cpu_ms_per_run"]["main_process"] > 0
    assert result["rows"][1]["target"] == ">= 3.5x -c 1" and result["rows"][1]["met"] in ("yes", "MISSED")
    (c1,), (c2,) = (case["rates"] for case in result["cases"])  # the cases ran side by side, one batch each
    top = result["rows"][1]
    assert top["ratio"] == f"{round(c2 / c1, 2):.2f}x" and "paired by repeat" in top["baseline"]


def snippet_json(code: str) -> dict:  # type: ignore[type-arg]
    """What a Python snippet run from the repository's root printed, as JSON (bench modules import by path)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout))


def test_worker_cases_get_the_same_work_in_a_repeat_and_a_ledger_each() -> None:
    code = ("import json, sys; sys.path.insert(0, 'bench'); import worker_throughput as w\n"
            "print(json.dumps({'c1': w.batch_marks('repeat-0', 32, 1, 4), 'c4': w.batch_marks('repeat-0', 32, 4, 4),"
            " 'next': w.batch_marks('repeat-1', 32, 1, 4),"
            " 'match': all(w.MARK.fullmatch(m) for m in w.batch_marks('repeat-0', 32, 4, 4))}))")
    marks = snippet_json(code)
    work = [m[:12] for m in marks["c1"]]  # "job-" and the hex the scripted LLM's lessons are drawn from
    assert work == [m[:12] for m in marks["c4"]] and len(set(marks["c1"]) | set(marks["c4"])) == 64
    assert [m[:12] for m in marks["next"]] != work and marks["match"]


def test_the_scripted_llm_answers_in_its_latency_not_a_delayed_ack_more() -> None:
    # headers and body are two writes: without TCP_NODELAY the body waited for the client's delayed ACK, and
    # every "200 ms" call of the worker benchmark took ~245 ms
    fake = FakeOpenAI().start()
    try:
        fake.handler = lambda body: Reply(content="{}", delay=0.05)
        client = openai.OpenAI(base_url=fake.url, api_key="test", max_retries=0)
        took = []
        for _ in range(10):
            started = time.perf_counter()
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 2000}])
            took.append(time.perf_counter() - started)
        client.close()
    finally:
        fake.stop()
    # the fastest call: the delayed ACK costs every call its 40 ms, a loaded machine's scheduling only some
    assert min(took) < 0.05 + 0.03, took


def test_memory_measures_each_arm_against_a_clean_baseline_and_the_interned_table_variant(tmp_path: Path) -> None:
    result = run_bench("memory.py", tmp_path, "--steps", "20", "--repeats", "1", "--interned", "5000")
    default, variant = [r for r in result["results"] if not r["interned"]], \
        [r for r in result["results"] if r["interned"]]
    assert [r["kind"] for r in default] == ["scripted", "openai"] and [r["kind"] for r in variant] == ["openai"]
    for r in result["results"]:
        assert r["baseline_clean"]  # the baseline process imported nothing of lessonbank's, no redis-py
        for arm in r["arms"].values():
            assert arm["growth_mb"] > 0 and arm["heavy"] == []  # the agent loads no Celery, engine or model
        assert r["arms"]["remember"]["lessons_given"]  # the owner answered: instructions through the agent's path
    # every arm of the variant interned the strings first: its baseline process is bigger than the default's
    grown, plain = variant[0]["medians"]["none"]["rss_after_mb"], default[1]["medians"]["none"]["rss_after_mb"]
    assert grown["median"] > plain["median"]
    targeted = [r for r in result["rows"] if r["target"]]
    assert len(targeted) == 1 and "interned" not in targeted[0]["figure"] and targeted[0]["met"] == "yes"
    assert sum("interned-string table grown first (5,000" in r["figure"] for r in result["rows"]) == 2
    assert (tmp_path / "memory.png").is_file()


def test_recheck_undoes_the_values_put_in_and_judges_each_recipe_given_with_the_current_rules(tmp_path: Path) -> None:
    placed = ('Code that solved a similar task before (task: "Using get_weather, what was the highest temperature in '
              'Porto on 2024-12-13? Answer with the number only."; verified by check; seen in 1 run, helped 1), with '
              "this task's values put in ('Ghent' for 'Porto', '24.05.2024' for '13.12.2024'):\n```python\n"
              "weather = get_weather(city='Ghent', date='24.05.2024')\n"
              "final_answer(max(r['max_c'] for r in weather['records']))\n```\n")
    chance = ('Code that solved a similar task before (task: "Using search_catalog, how many \'mug\' products cost '
              'less than 21 euros? Answer with the number only."; verified by check; seen in 1 run):\n```python\n'
              "products = search_catalog(query='mug price < 21 euro')\n"
              "final_answer(len(products['data']['items']))\n```\n")
    runs = [{"task": "date_format", "arm": "memory", "run_index": 3, "correct": True, "lessons_given": placed},
            {"task": "nested_catalog", "arm": "memory", "run_index": 2, "correct": False, "lessons_given": chance},
            {"task": "nested_catalog", "arm": "none", "run_index": 2, "correct": False, "lessons_given": ""}]
    (tmp_path / "run.json").write_text(json.dumps({"runs": runs}))
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "learning" / "recheck.py"), str(tmp_path / "run.json"),
                           "--json", str(tmp_path / "out.json")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "out.json").read_text())
    first, second = result["recipes"]
    # the recipe as kept: the run's city and date swapped back for the recipe's own, so the rules see its task's values
    assert "city='Porto', date='13.12.2024'" in first["code"] and first["verdict"] == "kept"
    assert second["verdict"] == "refused: ignores '21'"  # the limit sits only inside the query text
    assert result["totals"] == {"kept": {"recipes": 1, "runs": 1, "right": 1},
                                "refused": {"recipes": 1, "runs": 1, "right": 0}}
    assert "refused: 1 recipes; the runs given them were right 0/1" in proc.stdout
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "learning" / "recheck.py"), str(tmp_path / "nope.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such result file" in bad.stderr


def test_the_key_fix_probe_gives_each_form_and_finds_the_run_it_replays() -> None:
    """``bench/learning/key_fix.py`` without its LLM: the block of each form (it fails unless the instructions
    builder gives the fix as the line to write), and seed 12's run 4 read back from its stored result file."""
    script = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, 'bench/learning'); import key_fix as k\n"
        "old, new = k.TASK.variants(2, seed=1)\n"
        "blocks = {form: k.block(old, new.prompt, form) for form in k.FORMS}\n"
        "variant, seed, replayed = k.replayed(Path('bench/learning/results/learning-seed12-invoice-stopped.json'), 3)\n"
        "print(json.dumps({'blocks': blocks, 'variant': variant.key, 'seed': seed, 'replayed': replayed}))\n")
    out = snippet_json(script)
    blocks, replayed = out["blocks"], out["replayed"]
    invoice = "INV-3523"  # seed 1's second variant, the first one's invoice INV-5314 put in its place
    assert f'- For this task: Write `lines = get_invoice(invoice_id="{invoice}")["lines"]`' in blocks["write"]
    assert '["amount"]' in blocks["kept"] and "INV-5314" in blocks["kept"].split("Facts:")[1]
    assert '["amount"]' not in blocks["write"] and '["amount"]' not in blocks["none"]
    assert "Write `" not in blocks["none"] and blocks["none"].count("`get_invoice(...)` returns") == 1
    assert out["variant"] == "INV-6810" and out["seed"] == 11074868  # the run that wrote result['amount'] 7 steps
    assert '"INV-6222")["amount"]` failed' in replayed["kept"]
    assert 'Write `lines = get_invoice(invoice_id="INV-6810")["lines"]`' in replayed["write"]
    assert "failed with" not in replayed["none"]


def test_the_shape_call_probe_gives_the_call_with_this_tasks_word_only_in_its_call_form() -> None:
    """``bench/learning/shape_call.py`` without its LLM: the builder's block of each form (it fails unless the
    builder gives the call that got the records back with this task's word)."""
    script = (
        "import json, sys; sys.path.insert(0, 'bench/learning'); import shape_call as s\n"
        "solved, variant = s.TASKS[s.TASK].variants(2, seed=1)\n"
        "print(json.dumps({form: s.block(solved, variant, form) for form in s.FORMS}))\n")
    blocks = snippet_json(script)
    assert '- For this task: write `result = search_catalog(query="mug")`, then use its records' in blocks["call"]
    assert "lamp" not in blocks["call"] and "search_catalog(query=" not in blocks["shape"]
    assert all("its records are `result['data']['items']`: read every one" in block
               for block in blocks.values())


def test_the_first_call_probe_gives_each_form_the_builders_line_to_write() -> None:
    """``bench/learning/first_call.py`` without its LLM: every form's block (with ``--context`` for the forms that
    need it); it fails unless the instructions builder gives the asked fix as the line to write with this task's
    date, which the forms edit."""
    script = (
        "import json, sys; sys.path[:0] = ['bench/learning', 'bench']; import first_call as f\n"
        "solved, variant = f.TASKS['date_format'].variants(2, seed=1)\n"
        "lesson = f.fix_lesson(solved, 'asked')\n"
        "print(json.dumps({form: f.block(lesson, variant.prompt, form,\n"
        "                               f.context_lessons(solved) if form in f.WITH_CONTEXT else None)\n"
        "                  for form in f.FORMATS}))\n")
    blocks = snippet_json(script)
    # seed 1's second variant (Porto, 2024-09-06); the fix was left by the first one, for another city and day
    line = '- For this task: Write `weather_data = get_weather("Porto", "06.09.2024")` (not tried yet)'
    assert all(line in blocks[form] for form in ("only", "task-only", "task-alone", "task-logs", "task-then"))
    assert "Write that line alone as your first step, without print" in blocks["task-alone"]
    assert "Last output from code snippet: None" in blocks["task-logs"]
    assert "without print" not in blocks["task-only"] and "Last output" not in blocks["task-only"]
