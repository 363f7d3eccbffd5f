"""Distill prompt size in real tokens: a realistic 10-step run, and runs of 5 to 320 steps.

    python bench/prompt_tokens.py [--model PATH]

The run: ``bench/data/realistic_run.jsonl``, a CodeAgent analysing a sales CSV in 10 steps (9 actions, one
failing, tables, a traceback, repeated warnings, then a final answer), as the recorder stores it. The
prompt is built the way ``workers.pipeline._lessons_of`` builds it (evidence mined from the run, then the compact
transcript within the character budget ``LESSONBANK_TRANSCRIPT_BUDGET_CHARS`` and the token budget
``transcript_tokens``) and counted with Qwen2.5's tokenizer (read from the GGUF file that ``lessonbank llm``
fetches, ``llama_cpp.Llama(vocab_only=True)``): both messages in Qwen's chat template, plus the JSON schema
sent as ``response_format`` (OpenAI counts it as input). The baseline, in the same run: the transcript as
it was built before (no compaction, the task repeated, characters only). Longer runs repeat the
realistic run's actions (one failure per 10 steps).
Writes bench/results/prompt_tokens.json and prompt_tokens.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import RESULTS, plt_or_none, print_table, ratio, row, save_plot, write_result

from lessonbank.core.models import StepRecord
from lessonbank.core.settings import Settings
from lessonbank.learn import evidence
from lessonbank.learn.adapters import read_run
from lessonbank.learn.distill import DistillSchema, build_messages
from lessonbank.learn.transcript import build_transcript, estimate_tokens, transcript_tokens
from lessonbank.workers.llm import strict_schema

DATA = Path(__file__).resolve().parent / "data" / "realistic_run.jsonl"
TARGET_TOKENS = 3000
LENGTHS = (5, 10, 20, 40, 80, 160, 320)
QWEN_TEMPLATE = "<|im_start|>{role}\n{content}<|im_end|>\n"


def default_model() -> Path:
    from lessonbank.local_llm import MODELS

    return Settings(_env_file=None).data_dir / "models" / MODELS["0.5b"].filename


class Counter:
    """Qwen2.5's tokenizer from a GGUF file (vocabulary only)."""

    def __init__(self, model: Path) -> None:
        from llama_cpp import Llama

        self.llama = Llama(model_path=str(model), vocab_only=True, verbose=False)

    def tokens(self, text: str, special: bool = False) -> int:
        return len(self.llama.tokenize(text.encode(), add_bos=False, special=special))

    def prompt(self, messages: list[dict[str, str]], schema: str) -> int:
        chat = "".join(QWEN_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages)
        return self.tokens(chat + "<|im_start|>assistant\n", special=True) + self.tokens(schema)


def load_run() -> list[StepRecord]:
    return [StepRecord.from_json(line) for line in DATA.read_text().splitlines() if line.strip()]


def longer(steps: list[StepRecord], n: int) -> list[StepRecord]:
    """A run of ``n`` steps: the realistic run's actions over and over, then its final answer."""
    actions = [s for s in steps if s.kind == "action"]
    out = []
    for i in range(n - 1):
        source = actions[i % len(actions)]
        failed = bool(source.error_type) and i % 10 == 2
        out.append(source.model_copy(update={
            "seq": i, "step_number": i + 1, "id": f"long:{i}",
            "error_type": source.error_type if failed else "", "error_message": source.error_message if failed else "",
            "observations": source.observations or ("" if failed else "ok")}))
    final = next(s for s in steps if s.kind == "final")
    return [*out, final.model_copy(update={"seq": n - 1, "id": f"long:{n - 1}"})]


def prompt_of(steps: list[StepRecord], budget_chars: int, compact: bool) -> tuple[list[dict[str, str]], str]:
    """The distill messages and the transcript: ``compact`` as ``workers.pipeline._lessons_of`` builds them now,
    else as they were built before (no compaction, the task repeated, characters only)."""
    task = steps[0].task
    run = read_run(steps, task, "success")
    mined = evidence.mine(run, "success", "user")
    budget = max(budget_chars - sum(len(e.text) for e in mined), 1500)
    if compact:
        tokens = transcript_tokens(e.text for e in mined)
        transcript = build_transcript(run, budget, max_tokens=tokens, repeat_task=False)
    else:
        transcript = build_transcript(run, budget, compact=False)
    messages = build_messages(task, mined, transcript, 5, "success", "user", nonce="0123456789abcdef")
    return messages, transcript


def measure(counter: Counter, steps: list[StepRecord], budget_chars: int, schema: str) -> dict[str, Any]:
    out: dict[str, Any] = {"steps": len(steps), "record_chars": sum(len(s.to_json()) for s in steps)}
    for name, compact in (("now", True), ("before", False)):
        messages, transcript = prompt_of(steps, budget_chars, compact)
        out[name] = {
            "prompt_tokens": counter.prompt(messages, schema),
            "chars_over_4": (sum(len(m["content"]) for m in messages) + len(schema)) // 4,
            "transcript_chars": len(transcript), "transcript_tokens": counter.tokens(transcript),
            "transcript_estimate": estimate_tokens(transcript),
            "transcript": transcript if len(steps) == 10 else None,
        }
    return out


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    ten = result["realistic"]
    now, before = ten["now"], ten["before"]
    out = [row("distill prompt tokens, realistic 10-step run (Qwen2.5 tokenizer, schema included)",
               f"{now['prompt_tokens']:,} (chars/4: {now['chars_over_4']:,})",
               f"before {before['prompt_tokens']:,} (chars/4: {before['chars_over_4']:,})",
               ratio(now["prompt_tokens"], before["prompt_tokens"]), f"<= {TARGET_TOKENS:,}",
               now["prompt_tokens"] <= TARGET_TOKENS),
           row("transcript token estimate / Qwen2.5 tokens, realistic run",
               f"{now['transcript_estimate']:,} / {now['transcript_tokens']:,}", "", ratio(
                   now["transcript_estimate"], now["transcript_tokens"]), ">= 1 (budget on the safe side)",
               now["transcript_estimate"] >= now["transcript_tokens"])]
    growth = result["by_length"]
    first, last = growth[0], growth[-1]
    worst = max(g["now"]["prompt_tokens"] for g in growth)
    out.append(row(f"distill prompt tokens, {first['steps']} -> {last['steps']} steps",
                   f"{first['now']['prompt_tokens']:,} -> {last['now']['prompt_tokens']:,} (max {worst:,})",
                   f"before {first['before']['prompt_tokens']:,} -> {last['before']['prompt_tokens']:,}",
                   ratio(last["now"]["prompt_tokens"], last["before"]["prompt_tokens"]),
                   f"<= {TARGET_TOKENS:,} at any length", worst <= TARGET_TOKENS))
    return out


def plot(result: dict[str, Any], path: Path) -> Path | None:
    plt = plt_or_none()
    if plt is None:
        return None
    growth = result["by_length"]
    xs = [g["steps"] for g in growth]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.plot(xs, [g["before"]["prompt_tokens"] for g in growth], "s--", color="grey", label="before (same run)")
    ax.plot(xs, [g["now"]["prompt_tokens"] for g in growth], "o-", label="now")
    ax.axhline(TARGET_TOKENS, color="red", lw=0.8, ls="-.", label=f"target <= {TARGET_TOKENS:,}")
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_ylim(0, None)
    ax.set_xlabel("steps in the run")
    ax.set_ylabel("distill prompt (Qwen2.5 tokens, schema included)")
    ax.set_title("Distill prompt size by run length")
    return save_plot(fig, ax, path)


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="Qwen2.5 GGUF (default: the one `lessonbank llm` "
                        "fetches for 0.5b).")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    model = args.model or default_model()
    if not model.is_file():
        raise SystemExit(f"no Qwen2.5 GGUF at {model}: run `lessonbank llm fetch --model 0.5b` or pass --model")
    started = time.perf_counter()
    counter = Counter(model)
    budget_chars = Settings(_env_file=None).transcript_budget_chars
    schema = json.dumps(strict_schema(DistillSchema))
    steps = load_run()
    result: dict[str, Any] = {
        "benchmark": "prompt_tokens", "tokenizer": model.name, "budget_chars": budget_chars,
        "schema_tokens": counter.tokens(schema), "realistic": measure(counter, steps, budget_chars, schema),
        "by_length": [measure(counter, longer(steps, n), budget_chars, schema) for n in LENGTHS],
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["rows"] = rows_of(result)
    write_result("prompt_tokens", result, args.out)
    png = plot(result, args.out / "prompt_tokens.png")
    result["plot"] = str(png) if png else None
    return result


def main() -> None:
    result = run(sys.argv[1:])
    for g in result["by_length"]:
        now, before = g["now"]["prompt_tokens"], g["before"]["prompt_tokens"]
        print(f"  {g['steps']:>4} steps: now {now:>5} tokens, before {before:>5}")
    print_table(result["rows"])


if __name__ == "__main__":
    main()
