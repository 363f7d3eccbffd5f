"""What the CLI tests share: the environment of a ``lessonbank`` command on the session's real redis-server
and a real embedded store in the test's own directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from lessonbank.core.settings import Settings


@pytest.fixture
def env(settings: Settings, tmp_path: Path, embed_model_path: Path) -> dict[str, str | None]:
    """Environment variables for CliRunner: the test Redis, a fresh embedded store, the offline embedding model."""
    return {
        "LESSONBANK_REDIS_URL": settings.redis_url,
        "LESSONBANK_DATA_DIR": str(tmp_path / "data"),
        "LESSONBANK_QDRANT_PATH": str(tmp_path / "qdrant"),
        "LESSONBANK_EMBED_MODEL_PATH": str(embed_model_path),
        "LESSONBANK_QDRANT_URL": None,
        "LESSONBANK_BANK": None,
    }
