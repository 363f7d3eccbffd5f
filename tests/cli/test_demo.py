"""``lessonbank demo``: a data dir that cannot be used is a one-line error, before anything is started; with the
user's endpoint it builds and fetches nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from lessonbank.cli.main import cli
from tests.fixtures.openai_server import FakeOpenAI, Reply, lessons_json

SEPARATOR = "The sales CSV file separates its columns with ';': read it with csv.DictReader(f, delimiter=';')."


def test_a_data_dir_under_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    data_dir = tmp_path / "afile" / "data"
    result = CliRunner().invoke(cli, ["demo", "--model", "0.5b"], env={"LESSONBANK_DATA_DIR": str(data_dir)})
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith(f"Error: LESSONBANK_DATA_DIR {data_dir} cannot be used: [Errno 20] Not a "
                                    f"directory: '{data_dir / 'demo'}'"), result.stderr


def test_with_the_users_endpoint_the_demo_builds_and_fetches_nothing(
        openai_server: FakeOpenAI, redis_url: str, embed_model_path: Path, tmp_path: Path) -> None:
    """A real ``lessonbank demo`` process (its own worker process, the session's redis-server) distilling with an
    OpenAI-protocol server: the second run starts with the lesson the first left, and no model, wheel or build
    of the local LLM is touched."""
    openai_server.default = Reply(lessons_json(("fact", SEPARATOR)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({"OPENAI_BASE_URL": openai_server.url, "OPENAI_API_KEY": "sk-test-demo",
                "LESSONBANK_DISTILL_MODEL": "scripted-model", "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
                "LESSONBANK_REDIS_URL": redis_url, "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path)})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lessonbank.cli.main", "demo", "--timeout", "300"], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"LLM: scripted-model at {openai_server.url} (from OPENAI_BASE_URL" in done.stdout
    for local in ("llama", "fetching", "building", "none configured"):
        assert local not in done.stdout.lower(), local
    assert not (tmp_path / "data" / "models").exists() and not (tmp_path / "data" / "wheels").exists()
    assert "Run 2" in done.stdout and SEPARATOR[:40] in done.stdout.split("Run 2")[1]
    assert any(body.get("model") == "scripted-model" for body in openai_server.requests)
    print(f"demo with the user's endpoint: {seconds:.1f} s")  # under a minute on an idle 2-core machine


def test_an_api_key_alone_means_openai_and_nothing_local(tmp_path: Path) -> None:
    from lessonbank import demo_services as demo
    from lessonbank.core.settings import Settings

    said: list[str] = []
    settings = Settings(_env_file=None, data_dir=tmp_path, openai_api_key="sk-test", openai_base_url=None)
    with demo._llm(settings, "0.5b", tmp_path, said.append) as (url, key, model, _):
        assert (url, key, model) == (demo.OPENAI_URL, "sk-test", settings.distill_model)
    assert said == [f"LLM: {settings.distill_model} at {demo.OPENAI_URL} (from OPENAI_API_KEY; "
                    "LESSONBANK_DISTILL_MODEL names the model)"]
    assert list(tmp_path.iterdir()) == []
