"""The Celery app's configuration: at-least-once delivery and limits that fit together."""

from __future__ import annotations

import pytest

from lessonbank.core.constants import SWEEP_TASK
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from lessonbank.workers.app import celery_config, create_app


def make(**overrides: object) -> Settings:
    return Settings(_env_file=None, **overrides)  # type: ignore[arg-type]


def test_at_least_once_delivery() -> None:
    config = celery_config(make(queue="q1", soft_shutdown_timeout=20))
    assert config["task_acks_late"] is True and config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["task_ignore_result"] is True
    assert config["worker_send_task_events"] is True and config["task_send_sent_event"] is True
    assert config["task_default_queue"] == "q1"
    assert config["worker_soft_shutdown_timeout"] == 20
    assert config["beat_schedule"]["sweep-runs"]["task"] == SWEEP_TASK


def test_visibility_timeout_exceeds_time_limit_plus_backoff() -> None:
    settings = make()
    config = celery_config(settings)
    visibility = config["broker_transport_options"]["visibility_timeout"]  # type: ignore[index]
    assert visibility > settings.task_time_limit + settings.retry_backoff_max
    with pytest.raises(ConfigurationError, match="visibility_timeout"):
        celery_config(make(visibility_timeout=600, task_time_limit=660, task_soft_time_limit=600))


def test_limits_that_cannot_work_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="task_soft_time_limit must be below"):
        celery_config(make(task_soft_time_limit=700, task_time_limit=660))
    # A redelivered run may wait out a killed worker's bank lock, then call the LLM: both must fit.
    with pytest.raises(ConfigurationError, match="distill_lock_timeout"):
        celery_config(make(distill_lock_timeout=600))


def test_app_carries_its_settings() -> None:
    settings = make(queue="q2")
    app = create_app(settings)
    assert app.settings is settings and app.conf.task_default_queue == "q2"
