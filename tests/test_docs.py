"""The docs pages' Python blocks stay true: each is run by a test (marked ``<!-- runs -->``) or says why not
(``<!-- not run: reason -->``); the guide's blocks run in page order, as one program, against a real Redis and
an OpenAI-protocol server. (``tests/test_readme.py`` parses every ``$ lessonbank ...`` line of these pages.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.fixtures.openai_server import FakeOpenAI, Reply
from tests.fixtures.recorded import distill_args, run_hash
from tests.fixtures.scripted_model import final_code

ROOT = Path(__file__).resolve().parent.parent
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
BLOCK = re.compile(r"(?:<!-- (runs|not run: [^\n]*?) -->\n)?```python\n(.*?)```", re.S)
# The pages whose blocks marked `runs` are run, and the test that runs them.
RUN_BY = {"docs/guide.md": "test_the_guides_blocks_run_in_order_as_written"}


def blocks(text: str) -> list[tuple[str, str]]:
    """(marker, code) of every Python block of a page, in order; the marker is "" when there is none."""
    return [(marker or "", code) for marker, code in BLOCK.findall(text)]


@pytest.mark.parametrize("page", sorted(DOCS))
def test_every_python_block_runs_or_says_why_not(page: str) -> None:
    found = blocks(DOCS[page])
    assert len(found) == DOCS[page].count("```python\n")
    for marker, code in found:
        first = code.strip().splitlines()[0] if code.strip() else ""
        assert marker == "runs" or len(marker.removeprefix("not run: ").strip()) >= 10, f"{page}: {first}"


def test_every_page_with_blocks_that_run_is_run_by_a_test() -> None:
    running = {page for page, text in DOCS.items() if any(marker == "runs" for marker, _ in blocks(text))}
    assert running == set(RUN_BY)
    assert all(name in globals() for name in RUN_BY.values())


@pytest.mark.slow
def test_the_guides_blocks_run_in_order_as_written(redis_url: str, redis_client: redis.Redis, embed_model_path: Path,
                                                   tmp_path: Path, openai_server: FakeOpenAI) -> None:
    program = "\n\n".join(code for marker, code in blocks(DOCS["docs/guide.md"]) if marker == "runs")
    program += '\nprint("judged run:", recorder.run_id(agent))\n'  # the last run, to check its verdict below
    openai_server.handler = lambda body: Reply(content=final_code(42))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({"OPENAI_BASE_URL": openai_server.url, "OPENAI_API_KEY": "local", "LESSONBANK_REDIS_URL": redis_url,
                "LESSONBANK_DATA_DIR": str(tmp_path / "data"), "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path),
                "LESSONBANK_STORE_TIMEOUT": "0.5"})
    (tmp_path / "guide.py").write_text(program)  # smolagents' @tool reads the function's source from its file
    done = subprocess.run([sys.executable, "guide.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert "42" in lines  # the first block's answer
    judged = lines[-1].removeprefix("judged run: ")
    closed = distill_args(redis_client, "lessonbank")
    assert len(closed) == 3 and all(bank == "sales-reports" for bank, *_ in closed)  # each block's run, recorded
    assert [run_id for _, run_id, *_ in closed][-1] == judged
    recorded = run_hash(redis_client, judged)
    assert recorded["verdict"] == "failure"  # the user's feedback, over the judge's pass
