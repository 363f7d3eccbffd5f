"""Keeping secrets out of lessons: a lesson that carries anything secret-looking is dropped.

The recorder redacts step records before they leave the agent process, so the transcript should hold
no secret; this is the second line, applied to what the LLM writes.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterable

from lessonbank.exceptions import ConfigurationError

logger = logging.getLogger(__name__)

SECRET_PATTERNS: tuple[str, ...] = (
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}",  # OpenAI / Anthropic keys
    r"\bhf_[A-Za-z0-9]{20,}",  # Hugging Face tokens
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub tokens
    r"\bgithub_pat_[A-Za-z0-9_]{30,}",
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack tokens
    r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google API keys
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+",  # JWTs
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    r"\b[a-z][a-z0-9+.\-]*://[^\s/:@]+:[^\s/@]+@",  # credentials in URLs
    r"(?i)\bbearer\s+[A-Za-z0-9_\-.=]{16,}",
    r"(?i)\b(?:api[_-]?key|secret|token|password|passwd|pwd)\b\s*[:=]\s*['\"]?[^\s'\"]{8,}",
    r"\[REDACTED[^\]]*\]",  # a redaction mark: the lesson was written around a secret
)


def _recorder_detector(extra_patterns: Iterable[str]) -> Callable[[str], str] | None:
    """The recorder's redaction (``recorder.redact.Redactor``), when the recorder package provides it."""
    try:
        module = importlib.import_module("recorder.redact")
    except ImportError:
        return None
    redactor_class = getattr(module, "Redactor", None)
    if redactor_class is None:
        return None
    redact = redactor_class(list(extra_patterns)).redact
    return redact if callable(redact) else None


class SecretScrubber:
    """Tells whether a text looks like it carries a secret: the recorder's redaction rules (with the
    extra patterns of the settings) plus the patterns above. Raises ConfigurationError for a bad pattern."""

    def __init__(self, extra_patterns: Iterable[str] = (), use_recorder: bool = True) -> None:
        extra = list(extra_patterns)
        self._recorder = _recorder_detector(extra) if use_recorder else None
        sources = [*SECRET_PATTERNS, *(extra if self._recorder is None else [])]
        try:
            self.patterns = [re.compile(p) for p in sources]
        except re.error as e:
            raise ConfigurationError(f"a redact pattern is not a valid regex: {e}") from e

    def has_secret(self, text: str) -> bool:
        if any(p.search(text) for p in self.patterns):
            return True
        if self._recorder is not None:
            try:
                return self._recorder(text) != text
            except Exception:  # foreign code: a failing redactor must not let a lesson through unchecked
                logger.warning("recorder redaction failed on a lesson; treating it as secret", exc_info=True)
                return True
        return False
