"""Secrets out of everything that leaves a process: the one redaction module.

Used twice: by the recorder, on every text field of a step record before it leaves the agent process
(``Redactor.redact``), and by the workers, on every lesson before it is stored (``Redactor.has_secret``:
a lesson that still looks like it carries a secret is dropped, or redacted when it is code). A text a log line
shows (a lesson the gate dropped) goes through ``Redactor.loggable`` first.

What counts as a secret (the rules, their trade-offs and why each runs in linear time) is ``secret_rules``'s;
``Rule``, ``fold``, ``DEFAULT_RULES`` and ``DETECT_PATTERNS`` are re-exported here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.secret_rules import DEFAULT_RULES, DETECT_PATTERNS, Rule, fold

__all__ = ["DEFAULT_RULES", "DETECT_PATTERNS", "REDACTED", "WITHHELD", "Redactor", "Rule", "fold"]

logger = logging.getLogger(__name__)

REDACTED = "[REDACTED]"
WITHHELD = "[withheld: it looks like it carries a secret]"
LOGGED_CHARS = 240
_MAX_PASSES = 4
_MARKS = re.compile(f"(?:{re.escape(REDACTED)}){{2,}}")


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
        self.rules = tuple(rules)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    @rules.setter
    def rules(self, rules: Iterable[Rule]) -> None:
        self._rules = tuple(rules)
        self._always = frozenset(i for i, rule in enumerate(self._rules) if not rule.triggers)
        by_trigger: dict[str, list[int]] = {}
        for i, rule in enumerate(self._rules):
            for trigger in rule.triggers:
                by_trigger.setdefault(trigger, []).append(i)
        self._by_trigger = tuple(by_trigger.items())

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The secrets in ``text``, as sorted, disjoint ``(start, end)`` ranges."""
        folded = fold(text)
        chosen = set(self._always)
        for trigger, indexes in self._by_trigger:  # each distinct trigger looked for once
            if trigger in folded:
                chosen.update(indexes)
        found: list[tuple[int, int]] = []
        rules = self._rules
        for i in sorted(chosen):
            found += rules[i].spans(text, folded)
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start <= merged[-1][1]:
                if end > merged[-1][1]:
                    merged[-1] = (merged[-1][0], end)
            else:
                merged.append((start, end))
        return merged

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced; text without secrets comes back unchanged.

        Replacing a secret changes what its neighbours see (``4111 1111 1111 1111-`` is no card, but
        ``4111 1111 1111 1111[REDACTED]`` is), so the text is redacted again until nothing more is found:
        the result is one that redaction leaves as it is. Marks that end up side by side become one.
        """
        for _ in range(_MAX_PASSES):
            spans = self.spans(text) if text else []
            if not spans:
                return text
            pieces: list[str] = []
            last = 0
            for start, end in spans:
                pieces += (text[last:start], REDACTED)
                last = end
            pieces.append(text[last:])
            redacted = "".join(pieces)
            if REDACTED + REDACTED in redacted:  # a secret next to a mark joins it
                redacted = _MARKS.sub(REDACTED, redacted)
            if redacted == text:
                return text
            text = redacted
        return text

    def has_secret(self, text: str) -> bool:
        """Whether ``text`` looks like it carries a secret (redaction would change it, or a looser
        detection pattern matches). A failing rule counts as a secret: the text is not let through."""
        try:
            if any(pattern.search(text) for pattern in DETECT_PATTERNS):
                return True
            return bool(text) and bool(self.spans(text))
        except Exception:  # a user-supplied pattern may fail in any way; fail closed
            logger.warning("secret detection failed; treating the text as secret", exc_info=True)
            return True

    def loggable(self, text: str, limit: int = LOGGED_CHARS) -> str:
        """``text`` as a log line may show it: redacted, on one line, at most ``limit`` characters; ``WITHHELD``
        when, its redaction marks aside, it still looks like it carries a secret (a looser detection pattern
        matches)."""
        try:
            shown = self.redact(text)
        except Exception:  # a user-supplied pattern may fail in any way; fail closed
            logger.warning("redaction failed; a text is withheld from the log", exc_info=True)
            return WITHHELD
        if self.has_secret(shown.replace(REDACTED, " ")):
            return WITHHELD
        line = " ".join(shown.split())
        return line if len(line) <= limit else line[:limit - 3] + "..."
