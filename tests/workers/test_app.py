"""The Celery app's configuration: at-least-once delivery and limits that fit together; bad settings stop
``celery -A lessonbank.workers`` with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kombu.transport import redis as kombu_redis

from lessonbank.core.constants import SWEEP_TASK
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.workers.app import celery_config, create_app
from lessonbank.workers.broker import Transport
from lessonbank.workers.jobs import KeeperStep
from tests.fixtures.celery_worker import REPO


def make(**overrides: object) -> Settings:
    return Settings(_env_file=None, **overrides)


def test_at_least_once_delivery() -> None:
    config = celery_config(make(queue="q1", soft_shutdown_timeout=20))
    assert config["task_acks_late"] is True and config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["task_ignore_result"] is True
    assert config["worker_send_task_events"] is True and config["task_send_sent_event"] is True
    assert config["task_default_queue"] == "q1"
    assert config["worker_soft_shutdown_timeout"] == 20
    assert config["beat_schedule"]["sweep-runs"]["task"] == SWEEP_TASK  # type: ignore[index]


def test_tasks_are_leased_and_the_broker_survives_an_outage() -> None:
    """Every worker runs a keeper of leased jobs; a task in hand goes on when the broker connection drops, and
    the broker transport turns kombu's crash on that path into the connection error it is."""
    config = celery_config(make())
    assert config["worker_cancel_long_running_tasks_on_connection_loss"] is False
    app = create_app(make())
    assert KeeperStep in app.steps["worker"]
    with app.connection_for_write() as connection:  # no I/O: the transport object only
        assert isinstance(connection.transport, Transport)
        assert issubclass(connection.transport.Channel, kombu_redis.Channel)


def test_visibility_timeout_exceeds_time_limit_plus_backoff() -> None:
    settings = make()
    config = celery_config(settings)
    visibility = config["broker_transport_options"]["visibility_timeout"]  # type: ignore[index]
    assert visibility > settings.task_time_limit + settings.retry_backoff_max
    with pytest.raises(ConfigurationError, match="^LESSONBANK_VISIBILITY_TIMEOUT \\(600\\) must exceed"):
        celery_config(make(visibility_timeout=600, task_time_limit=660, task_soft_time_limit=600))


def test_limits_that_cannot_work_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="^LESSONBANK_TASK_SOFT_TIME_LIMIT \\(700\\) must be below"):
        celery_config(make(task_soft_time_limit=700, task_time_limit=660))
    # A redelivered run may wait out a killed worker's bank lock, then call the LLM: both must fit.
    with pytest.raises(ConfigurationError, match="^LESSONBANK_DISTILL_LOCK_TIMEOUT \\(600\\) \\+ LESSONBANK_LLM"):
        celery_config(make(distill_lock_timeout=600, task_soft_time_limit=600))


def test_only_a_long_llm_timeout_gives_a_valid_worker_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU LLM: raising LESSONBANK_LLM_TIMEOUT alone is enough, the limits follow it."""
    for name in list(os.environ):
        if name.startswith("LESSONBANK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LESSONBANK_LLM_TIMEOUT", "900")
    config = celery_config(Settings(_env_file=None))
    soft, hard = config["task_soft_time_limit"], config["task_time_limit"]
    visibility = config["broker_transport_options"]["visibility_timeout"]  # type: ignore[index]
    assert isinstance(soft, int) and isinstance(hard, int)
    assert 900 < soft < hard < visibility


def test_app_carries_its_settings() -> None:
    settings = make(queue="q2")
    app = create_app(settings)
    assert app.settings is settings and app.conf.task_default_queue == "q2"


def celery_worker(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``celery -A lessonbank.workers worker`` with `env` over a clean environment; it must exit by itself."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    clean.update({"PYTHONPATH": str(REPO), "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
                  "LESSONBANK_REDIS_URL": "redis://127.0.0.1:9/0", **env})
    return subprocess.run([sys.executable, "-m", "celery", "-A", "lessonbank.workers", "worker", "--pool", "solo"],
                          cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize(("env", "line"), [
    ({"LESSONBANK_DISTILL_MAX_LESSONS": "-3"},
     "LESSONBANK_DISTILL_MAX_LESSONS must be a whole number from 1 to 50 (got '-3')"),
    ({"LESSONBANK_REDIS_URL": "localhost:6379"}, "LESSONBANK_REDIS_URL must be a URL starting with redis://"),
    ({"LESSONBANK_REDACT_PATTERNS": "secret-[0-9]+"}, "LESSONBANK_REDACT_PATTERNS must be a JSON list of regexes"),
    ({"LESSONBANK_VISIBILITY_TIMEOUT": "10"}, "LESSONBANK_VISIBILITY_TIMEOUT (10) must exceed LESSONBANK_TASK_TIME"),
    ({}, "no LLM to distill with: set OPENAI_BASE_URL"),  # refused at worker start, not at import
    ({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, "embedding model folder "),  # never downloaded by name
])
def test_celery_worker_with_bad_settings_exits_with_one_line(tmp_path: Path, env: dict[str, str], line: str) -> None:
    started = time.monotonic()
    result = celery_worker(tmp_path, **env)
    # at start (seconds idle; a loaded machine slows the imports): one past its checks retries the broker for ever
    assert result.returncode != 0 and time.monotonic() - started < 60
    ours = [text for text in result.stderr.splitlines() if "LESSONBANK_" in text or "OPENAI_" in text]
    assert len(ours) == 1 and ours[0].startswith(f"lessonbank: {line}"), result.stderr  # (Celery may warn about root)
    assert result.stderr.rstrip().endswith(ours[0])
    assert "Traceback" not in result.stderr + result.stdout and "ready." not in result.stderr + result.stdout


@pytest.mark.slow
def test_importing_the_app_with_bad_settings_is_one_line(tmp_path: Path) -> None:
    """The CLI imports the app for dead letters: a bad value there is one line too, not pydantic's wall."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONBANK_", "OPENAI_"))}
    env.update({"PYTHONPATH": str(REPO), "LESSONBANK_MIN_RELEVANCE": "5"})
    result = subprocess.run([sys.executable, "-c", "import lessonbank.workers"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == "lessonbank: LESSONBANK_MIN_RELEVANCE must be a number from 0 to 1 (got '5')\n"
