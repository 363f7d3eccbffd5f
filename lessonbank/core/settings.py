"""Configuration: one `Settings` object, read from `LESSONBANK_*` environment variables.

Entry points (the CLI group, the Celery app, the recorder's constructor defaults) build it once
and pass it down; nothing else in the project reads the environment.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Per-user data directory (``~/.local/share/lessonbank``)."""
    return Path.home() / ".local" / "share" / "lessonbank"


class Settings(BaseSettings):
    """Every knob of lessonbank. Field ``foo`` is set by ``LESSONBANK_FOO``."""

    model_config = SettingsConfigDict(env_prefix="LESSONBANK_", extra="ignore", populate_by_name=True)

    # Redis and the queue
    redis_url: str = Field("redis://localhost:6379/0", description="Redis for step records, the queue and state.")
    queue: str = Field("lessonbank", description="Celery queue the distill tasks go to.")
    bank: str = Field("default", description="Bank used when none is named (agent, user or project).")

    # Recorder
    max_field_chars: int = Field(4096, description="Cap on each text field of a step record.")
    max_record_bytes: int = Field(32768, description="Cap on a whole step record, in bytes of JSON.")
    redis_timeout: float = Field(0.25, description="Recorder's Redis connect/read timeout, seconds.")
    breaker_cooldown: float = Field(5.0, description="Seconds the recorder spools before trying Redis again.")
    data_dir: Path = Field(default_factory=default_data_dir, description="Where local state lives.")
    spool_dir: Path | None = Field(
        None,
        description="Local spool for records Redis could not take. Default: DATA_DIR/spool.",
    )
    redact_patterns: list[str] = Field(default_factory=list, description="Extra regexes to redact (JSON list).")

    # LLM (the standard OpenAI variables, no prefix)
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("OPENAI_BASE_URL", "LESSONBANK_OPENAI_BASE_URL")
    )
    openai_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("OPENAI_API_KEY", "LESSONBANK_OPENAI_API_KEY")
    )
    distill_model: str = Field("gpt-4o-mini", description="Chat model that distills runs into lessons.")
    llm_timeout: float = Field(120.0, description="Seconds one LLM call may take.")
    max_lessons: int = Field(5, description="At most this many lessons per run.")
    transcript_budget_chars: int = Field(12000, description="Input budget for the run transcript sent to the LLM.")
    local_llm_model: str = Field("1.5b", description="Local model `lessonbank llm` sets up and serves: 0.5b or 1.5b.")
    local_llm_port: int = Field(8765, description="Port of the local llama.cpp server on 127.0.0.1.")
    local_llm_threads: int = Field(2, description="CPU threads of the local llama.cpp server.")
    local_llm_ctx: int = Field(4096, description="Context window (tokens) of the local llama.cpp server.")

    # Workers
    task_soft_time_limit: int = Field(600, description="Soft time limit of a distill task, seconds.")
    task_time_limit: int = Field(660, description="Hard time limit of a distill task, seconds.")
    max_retries: int = Field(5, description="Retries of a distill task on transient errors.")
    retry_backoff_max: int = Field(600, description="Longest retry backoff, seconds.")
    retry_backoff: int = Field(
        2,
        description="Base of the exponential retry backoff (doubles per retry, jittered), seconds.",
    )
    visibility_timeout: int = Field(3600, description="Broker visibility timeout; above time limit + backoff.")
    soft_shutdown_timeout: float = Field(
        0.0,
        description="On a cold shutdown (SIGQUIT, or SIGTERM with REMAP_SIGTERM=SIGQUIT), "
        "seconds the task in hand may finish before it is requeued.",
    )
    step_ttl: int = Field(
        7 * 24 * 3600,
        description="Seconds a run's steps are kept after it is distilled or dead-lettered.",
    )
    idle_timeout: int = Field(1800, description="Seconds without a step before an open run counts as abandoned.")
    sweep_interval: int = Field(60, description="Seconds between sweeper passes.")
    duplicate_similarity: float = Field(
        0.9,
        description="Cosine similarity above which a lesson reinforces an existing one.",
    )
    related_similarity: float = Field(0.6, description="Cosine similarity above which the LLM decides add/merge/skip.")
    distill_lock_timeout: int = Field(
        150,
        description="Seconds a worker may hold a bank while consolidating (a killed worker's lock expires after it).",
    )

    # Lesson store and embeddings
    qdrant_url: str | None = Field(None, description="Qdrant server URL. Unset: embedded local mode at QDRANT_PATH.")
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server.")
    qdrant_path: Path | None = Field(None, description="Embedded Qdrant directory. Default: DATA_DIR/qdrant.")
    collection: str = Field("lessons", description="Qdrant collection holding every bank's lessons.")
    embed_model: str = Field("sentence-transformers/all-MiniLM-L6-v2", description="fastembed model name.")
    embed_model_path: Path | None = Field(None, description="Local folder with the embedding model files (offline).")
    embed_base_url: str | None = Field(
        None,
        description="OpenAI-compatible /v1/embeddings endpoint instead of fastembed.",
    )
    store_timeout: float = Field(3.0, description="Seconds an agent-side store request waits for the worker.")

    # Instructions handed to runs
    min_relevance: float = Field(
        0.2,
        description="Dense cosine similarity a lesson needs with the task to be handed to a run or recalled.",
    )

    @property
    def resolved_spool_dir(self) -> Path:
        return self.spool_dir or self.data_dir / "spool"

    @property
    def resolved_qdrant_path(self) -> Path:
        return self.qdrant_path or self.data_dir / "qdrant"
