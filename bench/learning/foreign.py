"""How often a bank shared by several tasks hands a run lessons about another task's tool, with and without the
agent's tools given to the instructions builder (no LLM: the store a benchmark run left behind).

    python bench/learning/foreign.py /tmp/lessonbank-learning-XXXX/qdrant learning-memory-one-bank

The first argument is the embedded store of a ``run.py`` run with arm ``memory-one-bank`` (its work directory is
printed at the end; the store is read on a copy, so the run's own files stay as they are). For each task, the
variants of seeds 1-15 are asked for their block twice: as the CLI would (tools not known) and as ``remember``
does (the agent's tools). A block counts when one of its lessons calls another task's tool.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from smolagents.local_python_executor import BASE_PYTHON_TOOLS  # noqa: E402
from trap_tasks import TASKS  # noqa: E402

from lessonbank.core.embeddings import embedder_from_settings  # noqa: E402
from lessonbank.core.models import Lesson  # noqa: E402
from lessonbank.core.settings import Settings  # noqa: E402
from lessonbank.core.store.edge import EdgeLessonStore  # noqa: E402
from lessonbank.instructions import compose_instructions  # noqa: E402

TOOLS = {"invoice_cents": "get_invoice", "date_format": "get_weather", "nested_catalog": "search_catalog"}
SEEDS = range(1, 16)


def calls_another(lesson: Lesson, others: list[str]) -> bool:
    code = lesson.recipe.code if lesson.recipe is not None else ""
    return any(f"{tool}(" in lesson.text or f"{tool}(" in code for tool in others)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path, help="The embedded store's folder (holds shards/ and lessonbank.lock).")
    parser.add_argument("bank", help="The bank every task shared.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as copy:
        shutil.copytree(args.store, copy, dirs_exist_ok=True)
        store = EdgeLessonStore(copy, embedder_from_settings(Settings()))
        try:
            for name, tool in TOOLS.items():
                others = [other for other in TOOLS.values() if other != tool]
                counts = {"tools not known": 0, "the agent's tools": 0}
                asked = 0
                for seed in SEEDS:
                    for variant in TASKS[name].variants(seed=seed):
                        asked += 1
                        for label, tools in (("tools not known", None),
                                             ("the agent's tools", {tool, "final_answer", *BASE_PYTHON_TOOLS})):
                            _, given = compose_instructions(store, variant.prompt, args.bank, tools=tools)
                            counts[label] += any(calls_another(lesson, others) for lesson in given)
                print(f"{name:15} blocks holding a lesson about another task's tool, of {asked}: "
                      + ", ".join(f"{label} {count}" for label, count in counts.items()))
        finally:
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
