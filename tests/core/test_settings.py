"""Settings explain themselves: each bad value is one line naming its environment variable; limits follow
from the LLM timeout; ``./.env`` is read."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import DERIVED, Settings, env_var, expected, service_settings

# (environment variable, bad value, the whole line it must give)
BAD = [
    ("LESSONBANK_DISTILL_MAX_LESSONS", "-3",
     "LESSONBANK_DISTILL_MAX_LESSONS must be a whole number from 1 to 50 (got '-3')"),
    ("LESSONBANK_MIN_RELEVANCE", "5", "LESSONBANK_MIN_RELEVANCE must be a number from 0 to 1 (got '5')"),
    ("LESSONBANK_LOCAL_LLM_MODEL", "7b", "LESSONBANK_LOCAL_LLM_MODEL must be one of 0.5b, 1.5b (got '7b')"),
    ("LESSONBANK_REDACT_PATTERNS", "sk-[a-z]+",
     """LESSONBANK_REDACT_PATTERNS must be a JSON list of regexes, like ["ACME-[0-9]{6}"] (got 'sk-[a-z]+')"""),
    ("LESSONBANK_REDACT_PATTERNS", '{"a": 1}',
     """LESSONBANK_REDACT_PATTERNS must be a JSON list of regexes, like ["ACME-[0-9]{6}"] (got '{"a": 1}')"""),
    ("LESSONBANK_REDACT_PATTERNS", '["ok", "("]',
     "LESSONBANK_REDACT_PATTERNS must be a JSON list of valid regexes ('(' is not one: missing ), unterminated "
     """subpattern at position 0) (got '["ok", "("]')"""),
    ("LESSONBANK_REDIS_URL", "localhost:6379",
     "LESSONBANK_REDIS_URL must be a URL starting with redis://, rediss:// or unix:// (like redis://localhost:6379/0)"
     " (got 'localhost:6379')"),
    ("LESSONBANK_REDIS_URL", "http://localhost:6379",
     "LESSONBANK_REDIS_URL must be a URL starting with redis://, rediss:// or unix:// (like redis://localhost:6379/0)"
     " (got 'http://localhost:6379')"),
    ("LESSONBANK_REDIS_TIMEOUT", "fast", "LESSONBANK_REDIS_TIMEOUT must be a number of seconds above 0 (got 'fast')"),
    ("LESSONBANK_LLM_TIMEOUT", "0", "LESSONBANK_LLM_TIMEOUT must be a number of seconds above 0 (got '0')"),
    ("LESSONBANK_TASK_TIME_LIMIT", "1.5",
     "LESSONBANK_TASK_TIME_LIMIT must be a whole number of seconds above 0 (got '1.5')"),
    ("LESSONBANK_VISIBILITY_TIMEOUT", "-1",
     "LESSONBANK_VISIBILITY_TIMEOUT must be a whole number of seconds above 0 (got '-1')"),
    ("LESSONBANK_SOFT_SHUTDOWN_TIMEOUT", "-1",
     "LESSONBANK_SOFT_SHUTDOWN_TIMEOUT must be a number of seconds of at least 0 (got '-1')"),
    ("LESSONBANK_LOCAL_LLM_PORT", "70000",
     "LESSONBANK_LOCAL_LLM_PORT must be a whole number from 1 to 65535 (got '70000')"),
    ("LESSONBANK_LOCAL_LLM_PORT", "0", "LESSONBANK_LOCAL_LLM_PORT must be a whole number from 1 to 65535 (got '0')"),
    ("LESSONBANK_MAX_RETRIES", "-1", "LESSONBANK_MAX_RETRIES must be a whole number from 0 to 100 (got '-1')"),
    ("LESSONBANK_DUPLICATE_SIMILARITY", "1.5",
     "LESSONBANK_DUPLICATE_SIMILARITY must be a number from 0 to 1 (got '1.5')"),
    ("LESSONBANK_HOLDOUT", "1", "LESSONBANK_HOLDOUT must be a number from 0 up to (not including) 1 (got '1')"),
    ("LESSONBANK_HOLDOUT", "-0.1", "LESSONBANK_HOLDOUT must be a number from 0 up to (not including) 1 (got '-0.1')"),
    ("OPENAI_BASE_URL", "localhost:8080/v1",
     "OPENAI_BASE_URL must be a URL starting with http:// or https:// (like http://127.0.0.1:8080/v1)"
     " (got 'localhost:8080/v1')"),
    ("LESSONBANK_QDRANT_URL", "qdrant:6333",
     "LESSONBANK_QDRANT_URL must be a URL starting with http:// or https:// (like http://localhost:6333)"
     " (got 'qdrant:6333')"),
    ("LESSONBANK_EMBED_BASE_URL", "ftp://host/v1",
     "LESSONBANK_EMBED_BASE_URL must be a URL starting with http:// or https:// (like http://127.0.0.1:8080/v1)"
     " (got 'ftp://host/v1')"),
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the caller's lessonbank/OpenAI settings leaks in."""
    for name in list(os.environ):
        if name.startswith(("LESSONBANK_", "OPENAI_")):
            monkeypatch.delenv(name)


def error_of(**overrides: object) -> str:
    with pytest.raises(ConfigurationError) as info:
        Settings(_env_file=None, **overrides)
    return str(info.value)


@pytest.mark.parametrize(("variable", "value", "line"), BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
def test_a_bad_value_is_one_line_naming_its_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                                      line: str) -> None:
    monkeypatch.setenv(variable, value)
    assert error_of() == line


def test_several_bad_values_share_one_line() -> None:
    message = error_of(distill_max_lessons=0, min_relevance=-1.0)
    assert "\n" not in message
    assert "LESSONBANK_DISTILL_MAX_LESSONS must be a whole number from 1 to 50 (got 0)" in message
    assert "LESSONBANK_MIN_RELEVANCE must be a number from 0 to 1 (got -1.0)" in message


def test_the_password_of_a_bad_url_is_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LESSONBANK_REDIS_URL", ":s3cret-pass@localhost:6379/0")
    message = error_of()
    assert message.startswith("LESSONBANK_REDIS_URL must be") and "s3cret" not in message


def test_every_numeric_setting_has_a_range() -> None:
    numeric = [name for name, info in Settings.model_fields.items() if info.annotation in (int, float)]
    assert len(numeric) > 20
    for name in numeric:
        assert any(word in (expected(name) or "") for word in ("from", "above", "at least")), name


def test_good_values_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LESSONBANK_REDACT_PATTERNS", r'["ACME-[0-9]{6}", "corp\\.internal"]')
    monkeypatch.setenv("LESSONBANK_LOCAL_LLM_MODEL", "0.5b")
    monkeypatch.setenv("LESSONBANK_HOLDOUT", "0.25")
    monkeypatch.setenv("LESSONBANK_QDRANT_URL", "https://qdrant.example:6333")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    settings = Settings(_env_file=None)
    assert settings.redact_patterns == ["ACME-[0-9]{6}", r"corp\.internal"]
    assert settings.local_llm_model == "0.5b" and settings.holdout == 0.25
    for url in ("redis://:pw@h:1/0", "rediss://h:6380/0", "unix:///run/redis.sock"):
        assert Settings(_env_file=None, redis_url=url).redis_url == url
    monkeypatch.delenv("LESSONBANK_HOLDOUT")
    assert Settings(_env_file=None).holdout == 0.0


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # as a copied .env.example leaves it
    monkeypatch.setenv("LESSONBANK_DISTILL_MAX_LESSONS", "")
    settings = Settings(_env_file=None)
    assert settings.openai_base_url is None and settings.distill_max_lessons == 5


def test_an_env_file_is_read_only_when_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LESSONBANK_DISTILL_MAX_LESSONS=9\n")  # a user's own .env: not ours to read
    (tmp_path / "lessonbank.env").write_text(
        "LESSONBANK_DISTILL_MAX_LESSONS=7\nOPENAI_BASE_URL=http://127.0.0.1:9/v1\nLESSONBANK_QUEUE=from-file\n"
        "REDIS_PASSWORD=compose-only\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LESSONBANK_ENV_FILE", raising=False)
    monkeypatch.delenv("LESSONBANK_DISTILL_MAX_LESSONS", raising=False)
    monkeypatch.setenv("LESSONBANK_QUEUE", "from-env")
    assert Settings().distill_max_lessons == 5 and service_settings().distill_max_lessons == 5
    settings = service_settings("lessonbank.env")
    assert settings.distill_max_lessons == 7 and settings.openai_base_url == "http://127.0.0.1:9/v1"
    assert settings.queue == "from-env"  # the environment wins over the file
    monkeypatch.setenv("LESSONBANK_ENV_FILE", "lessonbank.env")
    assert service_settings().distill_max_lessons == 7
    assert Settings().distill_max_lessons == 5  # only the service reads it
    (tmp_path / "lessonbank.env").write_text("LESSONBANK_DISTILL_MAX_LESSONS=-3\n")
    with pytest.raises(ConfigurationError, match=r"^LESSONBANK_DISTILL_MAX_LESSONS must be a whole number from 1 to"):
        service_settings()
    with pytest.raises(ConfigurationError, match=r"^the env file missing.env \(--env-file or LESSONBANK_ENV_FILE\)"):
        service_settings("missing.env")


def test_env_var_names() -> None:
    assert env_var("distill_max_lessons") == "LESSONBANK_DISTILL_MAX_LESSONS"
    assert env_var("openai_base_url") == "OPENAI_BASE_URL" and env_var("openai_api_key") == "OPENAI_API_KEY"


# -- worker limits ------------------------------------------------------------------------------------------


def test_default_limits_are_the_documented_ones() -> None:
    settings = Settings(_env_file=None)
    assert (settings.task_soft_time_limit, settings.task_time_limit) == (600, 660)
    assert (settings.visibility_timeout, settings.distill_lock_timeout) == (3600, 150)
    assert not DERIVED & settings.model_fields_set
    settings.check_worker_limits()


def test_raising_only_the_llm_timeout_raises_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LESSONBANK_LLM_TIMEOUT", "900")
    settings = Settings(_env_file=None)
    settings.check_worker_limits()
    assert settings.distill_lock_timeout > 900
    assert settings.task_soft_time_limit >= settings.distill_lock_timeout + 900
    assert settings.task_time_limit > settings.task_soft_time_limit
    assert settings.visibility_timeout > settings.task_time_limit + settings.retry_backoff_max
    assert settings.model_fields_set == {"llm_timeout"}  # derived values are not counted as set


@pytest.mark.parametrize("llm_timeout", [0.5, 2, 30, 119.5, 120, 900, 3600])
@pytest.mark.parametrize("backoff_max", [1, 600, 7200])
def test_derived_limits_always_work(llm_timeout: float, backoff_max: int) -> None:
    settings = Settings(_env_file=None, llm_timeout=llm_timeout, retry_backoff_max=backoff_max)
    settings.check_worker_limits()
    assert settings.distill_lock_timeout >= math.ceil(llm_timeout)


def test_derived_limits_fit_explicit_ones() -> None:
    # A CPU LLM with the soft limit set by hand: the lock fits into it, so the worker starts.
    settings = Settings(_env_file=None, llm_timeout=900, task_soft_time_limit=1800, task_time_limit=1900,
                        visibility_timeout=7200)
    settings.check_worker_limits()
    assert (settings.task_soft_time_limit, settings.task_time_limit, settings.visibility_timeout) == (1800, 1900, 7200)
    # An explicit lock or backoff pushes the derived limits above it.
    pushed = Settings(_env_file=None, distill_lock_timeout=2000, retry_backoff_max=5000)
    pushed.check_worker_limits()
    assert pushed.task_soft_time_limit >= 2000 + 120 and pushed.visibility_timeout > pushed.task_time_limit + 5000


@pytest.mark.parametrize(("overrides", "line"), [
    ({"task_soft_time_limit": 700, "task_time_limit": 660},
     "LESSONBANK_TASK_SOFT_TIME_LIMIT (700) must be below LESSONBANK_TASK_TIME_LIMIT (660)"),
    ({"task_time_limit": 100},
     "LESSONBANK_DISTILL_LOCK_TIMEOUT (150, derived from LESSONBANK_LLM_TIMEOUT) + LESSONBANK_LLM_TIMEOUT (120) must "
     "not exceed LESSONBANK_TASK_SOFT_TIME_LIMIT (40, derived from LESSONBANK_LLM_TIMEOUT)"),
    ({"distill_lock_timeout": 600, "task_soft_time_limit": 600},
     "LESSONBANK_DISTILL_LOCK_TIMEOUT (600) + LESSONBANK_LLM_TIMEOUT (120) must not exceed "
     "LESSONBANK_TASK_SOFT_TIME_LIMIT (600)"),
    ({"visibility_timeout": 600},
     "LESSONBANK_VISIBILITY_TIMEOUT (600) must exceed LESSONBANK_TASK_TIME_LIMIT (660, derived from "
     "LESSONBANK_LLM_TIMEOUT) + LESSONBANK_RETRY_BACKOFF_MAX (600)"),
])
def test_explicit_limits_that_cannot_work_are_refused(overrides: dict[str, int], line: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings(_env_file=None, **overrides).check_worker_limits()
    assert str(info.value) == line


# -- the LLM the worker distills with ------------------------------------------------------------------------


def test_the_worker_needs_an_llm_endpoint_or_key() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings(_env_file=None).check_llm_endpoint()
    message = str(info.value)
    assert "\n" not in message and "OPENAI_BASE_URL" in message and "OPENAI_API_KEY" in message
    with pytest.raises(ConfigurationError, match="^OPENAI_API_KEY must be set to use api.openai.com"):
        Settings(_env_file=None, openai_base_url="https://api.openai.com/v1").check_llm_endpoint()
    Settings(_env_file=None, openai_base_url="http://127.0.0.1:8080/v1").check_llm_endpoint()  # local: no key needed
    Settings(_env_file=None, openai_api_key="sk-test").check_llm_endpoint()  # api.openai.com with a key


@pytest.mark.parametrize(("old", "new", "field", "value", "expected"), [
    ("LESSONBANK_MAX_LESSONS", "LESSONBANK_DISTILL_MAX_LESSONS", "distill_max_lessons", "7", 7),
    ("LESSONBANK_RECIPES", "LESSONBANK_KEEP_OBSERVED", "keep_observed", "false", False),
])
def test_old_names_still_work_for_a_release_with_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, old: str,
                                                           new: str, field: str, value: str, expected: object) -> None:
    monkeypatch.delenv(new, raising=False)
    monkeypatch.setenv(old, value)
    with pytest.warns(FutureWarning, match=f"^{old} is deprecated .*: use {new}$"):
        assert getattr(Settings(), field) == expected
    monkeypatch.delenv(old)
    keyword = old.removeprefix("LESSONBANK_").lower()
    with pytest.warns(FutureWarning, match=rf"Settings\({keyword}=\) is deprecated .*: use Settings\({field}=\)"):
        assert getattr(Settings(**{keyword: value}), field) == expected
    (tmp_path / "old.env").write_text(f"{old}={value}\n")
    monkeypatch.delenv("LESSONBANK_ENV_FILE", raising=False)
    with pytest.warns(FutureWarning, match=f"^{old} in {tmp_path / 'old.env'} is deprecated"):
        assert getattr(service_settings(tmp_path / "old.env"), field) == expected
