"""Secrets out of everything that leaves a process: the one redaction module.

Used twice: by the recorder, on every text field of a step record before it leaves the agent process
(``Redactor.redact``), and by the workers, on every lesson before it is stored (``Redactor.has_secret``:
a lesson that still looks like it carries a secret is dropped, or redacted when it is code).

Patterns favour recall on things that are certainly secrets (provider key formats, PEM private keys,
passwords in URLs, ``password=...`` style assignments) and leave ordinary code and prose alone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lessonbank.core.exceptions import ConfigurationError

logger = logging.getLogger(__name__)

REDACTED = "[REDACTED]"

# Names whose value is a secret in ``name=value`` / ``name: value`` / ``"name": "value"`` form.
_SECRET_NAMES = (
    r"passw(?:or)?d|passwd|pwd|secret|client[_-]?secret|secret[_-]?key|token|auth[_-]?token|access[_-]?token"
    r"|refresh[_-]?token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|aws_secret_access_key"
)


@dataclass(frozen=True)
class Rule:
    """One redaction rule: a name (for tests and logs), a compiled pattern and its replacement."""

    name: str
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str] = REDACTED
    # Lower-case substrings at least one of which every match contains; empty: always run the pattern.
    triggers: tuple[str, ...] = ()


def _keep_group1(match: re.Match[str]) -> str:
    return match.group(1) + REDACTED


def _keep_name(match: re.Match[str]) -> str:
    return match.group(1) + match.group(2) + REDACTED


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(
        "pem_private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        triggers=("private key",),
    ),
    Rule("openai_key", re.compile(r"(?<![A-Za-z0-9_-])sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{20,}"), triggers=("sk-",)),
    Rule(
        "stripe_key",
        re.compile(r"(?<![A-Za-z0-9_])[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        triggers=("k_live_", "k_test_"),
    ),
    Rule(
        "aws_access_key_id",
        re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])"),
        triggers=("akia", "asia", "abia", "acca"),
    ),
    Rule("github_token", re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
         triggers=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Rule("slack_token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"), triggers=("xox",)),
    Rule("huggingface_token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}"), triggers=("hf_",)),
    Rule("google_api_key", re.compile(r"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_-]{35}"), triggers=("aiza",)),
    Rule(
        "jwt",
        re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        triggers=("eyj",),
    ),
    Rule(
        "authorization_header",
        re.compile(r"(?i)(\b(?:bearer|basic|token)\s+)[A-Za-z0-9\-._~+/]{16,}=*"),
        _keep_group1,
        triggers=("bearer", "basic", "token"),
    ),
    Rule(
        "url_password",
        re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s:/@'\"]*:)[^\s@/'\"]+(?=@)"),
        _keep_group1,
        triggers=("://",),
    ),
    Rule(
        "secret_assignment",
        re.compile(
            r"(?i)((?<![A-Za-z0-9])[A-Za-z0-9_\-]*?(?:" + _SECRET_NAMES + r"))"
            r"([\"']?\s*(?:=|:)\s*)"
            r"(?!=)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;&()\[\]{}]{3,}(?![\w(\[.]))"
        ),
        _keep_name,
        triggers=("passw", "pwd", "secret", "token", "apikey", "api_key", "api-key", "access_key", "access-key",
                  "private_key", "private-key", "accesskey", "privatekey"),
    ),
)


# Second line for text an LLM wrote (lessons): looser thresholds than the redaction rules, detection only.
DETECT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
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
    r"\[REDACTED[^\]]*\]",  # a redaction mark: the text was written around a secret
))


class Redactor:
    """Replaces secrets in text with ``[REDACTED]``; ``extra_patterns`` are regexes redacted whole.

    Raises ConfigurationError for an extra pattern that is not a valid regex.
    """

    def __init__(self, extra_patterns: Iterable[str] = ()) -> None:
        rules = list(DEFAULT_RULES)
        for index, source in enumerate(extra_patterns):
            try:
                rules.append(Rule(f"extra_{index}", re.compile(source)))
            except re.error as e:
                raise ConfigurationError(f"redact pattern {source!r} is not a valid regex: {e}") from e
        self.rules: tuple[Rule, ...] = tuple(rules)
        triggers = sorted({t for rule in rules for t in rule.triggers})
        self._any_trigger = re.compile("|".join(re.escape(t) for t in triggers))
        self._untriggered = any(not rule.triggers for rule in rules)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced; text without secrets comes back unchanged."""
        if not text:
            return text
        lower = text.lower()
        if not self._untriggered and self._any_trigger.search(lower) is None:
            return text  # the common case: nothing that could be a secret, one C-level scan
        for rule in self.rules:
            if rule.triggers and not any(trigger in lower for trigger in rule.triggers):
                continue
            text = rule.pattern.sub(rule.replacement, text)
        return text

    def has_secret(self, text: str) -> bool:
        """Whether ``text`` looks like it carries a secret (redaction would change it, or a looser
        detection pattern matches). A failing rule counts as a secret: the text is not let through."""
        try:
            if any(pattern.search(text) for pattern in DETECT_PATTERNS):
                return True
            return self.redact(text) != text
        except Exception:  # a user-supplied pattern may fail in any way; fail closed
            logger.warning("secret detection failed; treating the text as secret", exc_info=True)
            return True
