"""Figures of a tool-families run: per family and arm, and pooled; intervals; the targets, met or MISSED.

"Runs after the first success" of an arm in a family are its runs with a higher run index than its
first correct one: from then on its bank holds a success to learn from. Each arm with memory is
paired with its baseline arm (``none``, ``tca-none``, ``tb-none``) on exactly those run indices (same
variants, seeds, temperature). Intervals: Wilson 95 % for a success rate; for memory against its
baseline, a paired bootstrap 95 % interval (2,000 resamples of the (family, run index) pairs, fixed
seed) of the difference in success rate and of the ratio of mean input tokens, and an exact two-sided
sign test on the pairs where exactly one arm succeeded.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Z95 = 1.959964
RESAMPLES = 2000
TARGET_RATE = 0.8
TARGET_TIMES = 2.0
TARGET_TIMES_HARD = 1.5  # the no-check and ToolCallingAgent arms
TARGET_TOKENS = 0.6
HARD_ARMS = ("memory-nocheck", "tca-memory")


def wilson(successes: int, runs: int) -> tuple[float, float]:
    """Wilson score 95 % interval of a success rate (0, 0 for no runs)."""
    if runs == 0:
        return 0.0, 0.0
    p = successes / runs
    centre = (p + Z95 ** 2 / (2 * runs)) / (1 + Z95 ** 2 / runs)
    half = Z95 * math.sqrt(p * (1 - p) / runs + Z95 ** 2 / (4 * runs ** 2)) / (1 + Z95 ** 2 / runs)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test p-value of ``wins`` against ``losses`` (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(0, min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def first_success(rows: list[dict[str, Any]]) -> int | None:
    """The 1-based run index of the first correct run, or None."""
    return next((r["run_index"] + 1 for r in sorted(rows, key=lambda r: r["run_index"]) if r["correct"]), None)


def bootstrap(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Paired bootstrap 95 % intervals of the success-rate difference and the mean-input-token ratio."""
    if not pairs:
        return {"diff": None, "diff_ci": None, "token_ratio": None, "token_ratio_ci": None}
    rng = random.Random(0)
    diffs, ratios = [], []
    for _ in range(RESAMPLES):
        sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        diffs.append(sum(a["correct"] - b["correct"] for a, b in sample) / len(sample))
        base = sum(b["input_tokens"] for _, b in sample)
        if base:
            ratios.append(sum(a["input_tokens"] for a, _ in sample) / base)
    diffs.sort()
    ratios.sort()
    base_tokens = sum(b["input_tokens"] for _, b in pairs)

    def ci(values: list[float]) -> list[float] | None:
        return [round(values[int(0.025 * len(values))], 3), round(values[int(0.975 * len(values)) - 1], 3)] \
            if values else None

    return {"diff": round(sum(a["correct"] - b["correct"] for a, b in pairs) / len(pairs), 3), "diff_ci": ci(diffs),
            "token_ratio": round(sum(a["input_tokens"] for a, _ in pairs) / base_tokens, 3) if base_tokens else None,
            "token_ratio_ci": ci(ratios)}


def _group(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = sum(1 for r in rows if r["correct"])
    low, high = wilson(ok, len(rows))
    return {"runs": len(rows), "successes": ok, "rate": round(ok / len(rows), 3) if rows else None,
            "wilson": [round(low, 3), round(high, 3)], "mean_steps": _mean([r["steps"] for r in rows]),
            "mean_input_tokens": _mean([r["input_tokens"] for r in rows])}


def _paired(mine: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    by_index = {(r["family"], r["run_index"]): r for r in base}
    return [(r, by_index[(r["family"], r["run_index"])]) for r in mine if (r["family"], r["run_index"]) in by_index]


def _compare(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    wins = sum(1 for a, b in pairs if a["correct"] and not b["correct"])
    losses = sum(1 for a, b in pairs if b["correct"] and not a["correct"])
    return {"arm": _group([a for a, _ in pairs]), "baseline": _group([b for _, b in pairs]),
            "wins": wins, "losses": losses, "sign_p": round(sign_test(wins, losses), 4), **bootstrap(pairs)}


def summarize(runs: list[dict[str, Any]], arms: dict[str, str]) -> dict[str, Any]:
    """``arms`` maps each arm to its baseline arm. Per family and arm, pooled per arm, and the targets."""
    families = list(dict.fromkeys(r["family"] for r in runs))
    per_family: dict[str, dict[str, Any]] = {}
    after_rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for family in families:
        per_family[family] = {}
        for arm, baseline in arms.items():
            rows = sorted((r for r in runs if r["family"] == family and r["arm"] == arm), key=lambda r: r["run_index"])
            if not rows:
                continue
            first = first_success(rows)
            after = [r for r in rows if first is not None and r["run_index"] + 1 > first]
            after_rows[arm] += after
            base = [r for r in runs if r["family"] == family and r["arm"] == baseline]
            entry = {"marks": "".join("+" if r["correct"] else "-" for r in rows), "first_success": first,
                     "all": _group(rows), "after_first": _group(after)}
            if baseline != arm and base:
                entry["baseline_first_success"] = first_success(base)
                entry["paired_after_first"] = _compare(_paired(after, base))
            per_family[family][arm] = entry
    pooled = {}
    for arm, baseline in arms.items():
        base = [r for r in runs if r["arm"] == baseline]
        pooled[arm] = {"after_first": _group(after_rows[arm]), "all": _group([r for r in runs if r["arm"] == arm])}
        if baseline != arm and base:
            pooled[arm]["paired_after_first"] = _compare(_paired(after_rows[arm], base))
    kinds = sorted({r["kind"] for r in runs})
    by_kind = {arm: {kind: f"{sum(r['correct'] for r in rows)}/{len(rows)}" for kind in kinds
                     if (rows := [r for r in runs if r["arm"] == arm and r["kind"] == kind])} for arm in arms}
    return {"families": per_family, "pooled": pooled, "by_kind": by_kind,
            "targets": targets(per_family, pooled, arms)}


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "MISSED")


def targets(per_family: dict[str, Any], pooled: dict[str, Any], arms: dict[str, str]) -> list[dict[str, str]]:
    """The issue's targets for every arm with memory, each with the figure and met / MISSED / n/a."""
    out: list[dict[str, str]] = []
    for arm, baseline in arms.items():
        paired = pooled.get(arm, {}).get("paired_after_first")
        if arm == baseline or paired is None:
            continue
        mine, base = paired["arm"], paired["baseline"]
        rate, base_rate = mine["rate"], base["rate"]
        if arm == "memory":
            out.append({"arm": arm, "target": f"success after first success >= {TARGET_RATE:.0%}",
                        "figure": _rate_text(mine), "verdict": _verdict(None if rate is None else rate >= TARGET_RATE)})
        times = TARGET_TIMES_HARD if arm in HARD_ARMS else TARGET_TIMES
        if rate is not None:
            ok = rate >= times * base_rate and rate > base_rate
            out.append({"arm": arm, "target": f"success >= {times}x {baseline} on the same runs",
                        "figure": f"{_rate_text(mine)} vs {_rate_text(base)}", "verdict": _verdict(ok)})
        ratio = paired["token_ratio"]
        out.append({"arm": arm, "target": f"input tokens <= {TARGET_TOKENS}x {baseline} on the same runs",
                    "figure": f"{ratio} (bootstrap {paired['token_ratio_ci']})",
                    "verdict": _verdict(None if ratio is None else ratio <= TARGET_TOKENS)})
        out.append({"arm": arm, "target": f"first success no later than {baseline} (per family)",
                    "figure": ", ".join(f"{family} {_first(entry[arm].get('first_success'))} vs "
                                        f"{_first(entry[arm].get('baseline_first_success'))}"
                                        for family, entry in per_family.items() if arm in entry),
                    "verdict": "reported"})
        for family, entry in per_family.items():
            fam = entry.get(arm, {}).get("paired_after_first")
            if not fam or not fam["arm"]["runs"]:
                continue
            below = fam["arm"]["successes"] < fam["baseline"]["successes"]
            note = "" if not below else (" (the interval of the difference includes 0)"
                                         if fam["diff_ci"] and fam["diff_ci"][1] >= 0 else " (outside the interval)")
            out.append({"arm": arm, "target": f"{family}: not below {baseline}",
                        "figure": f"{fam['arm']['successes']}/{fam['arm']['runs']} vs "
                                  f"{fam['baseline']['successes']}/{fam['baseline']['runs']}{note}",
                        "verdict": _verdict(not below)})
    return out


def _first(index: int | None) -> str:
    return "never" if index is None else f"run {index}"


def _rate_text(group: dict[str, Any]) -> str:
    if not group["runs"]:
        return "0 runs"
    low, high = group["wilson"]
    return f"{group['successes']}/{group['runs']} ({group['rate']:.0%}, Wilson {low:.0%}-{high:.0%})"


def format_tables(summary: dict[str, Any]) -> str:
    """The text report: per family and arm, pooled per arm, then the targets."""
    lines = ["Per family and arm: runs in order (+ ok, - wrong), first success (run index), runs after it "
             "(ok/runs, Wilson 95%), mean steps and input tokens there; paired: the baseline on the same runs"]
    for family, arms in summary["families"].items():
        lines.append(f"  {family}")
        for arm, e in arms.items():
            after = e["after_first"]
            paired = e.get("paired_after_first")
            base = ""
            if paired:
                b = paired["baseline"]
                base = f" | baseline's first success {e.get('baseline_first_success') or '-'}" + (
                    f"; on these runs {b['successes']}/{b['runs']}, {b['mean_input_tokens']} tok" if b["runs"] else "")
            costs = f"{after['mean_steps']} steps, {after['mean_input_tokens']} tok" if after["runs"] else ""
            lines.append(f"    {arm:<15} {e['marks']:<8} first {e['first_success'] or '-'!s:<3} after: "
                         f"{_rate_text(after):<32} {costs}{base}")
    lines.append("Pooled over families, runs after each family's first success, paired with the baseline:")
    for arm, p in summary["pooled"].items():
        paired = p.get("paired_after_first")
        if not paired:
            lines.append(f"  {arm:<15} all runs {_rate_text(p['all'])}; "
                         f"after first success {_rate_text(p['after_first'])}")
            continue
        lines.append(f"  {arm:<15} {_rate_text(paired['arm'])} vs {_rate_text(paired['baseline'])}; difference "
                     f"{paired['diff']} (bootstrap {paired['diff_ci']}), sign test p={paired['sign_p']} "
                     f"({paired['wins']} wins, {paired['losses']} losses); tokens x{paired['token_ratio']} "
                     f"(bootstrap {paired['token_ratio_ci']})")
    lines.append("By question kind, all runs (ok/runs):")
    for arm, kinds in summary.get("by_kind", {}).items():
        lines.append(f"  {arm:<15} " + ", ".join(f"{kind} {cell}" for kind, cell in kinds.items()))
    lines.append("Targets:")
    for t in summary["targets"]:
        lines.append(f"  {t['arm']:<15} {t['target']:<48} {t['figure']:<60} {t['verdict']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python family_report.py RESULTS.json [--summary OUT.json]``: the figures of a results file, finished or
    not, printed; with ``--summary``, also written to OUT.json (never into the results file, which a run may be
    appending to)."""
    parser = argparse.ArgumentParser(prog="family_report.py", description="Figures of a tool-families results file.")
    parser.add_argument("results", type=Path)
    parser.add_argument("--summary", type=Path, help="Also write the figures (JSON) to this file.")
    args = parser.parse_args(argv)
    if args.summary is not None and args.summary.resolve() == args.results.resolve():
        parser.error("--summary must not be the results file")
    payload = json.loads(args.results.read_text())
    from family_agents import ARMS

    arms = {arm: ARMS[arm].baseline for arm in ARMS if any(r["arm"] == arm for r in payload["runs"])}
    summary = summarize(payload["runs"], arms)
    if args.summary is not None:
        args.summary.write_text(json.dumps({"results": str(args.results), "runs": len(payload["runs"]),
                                            "args": payload.get("args", {}), "summary": summary},
                                           indent=2, default=str) + "\n")
    print(format_tables(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
