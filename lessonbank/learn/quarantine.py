"""Quarantine: what waits for a user before any run sees it, decided without an LLM.

A lesson or a recipe is stored ``quarantined`` (never handed to a run until ``lessons release``) when its text
carries a URL (with a scheme, ``www.``, or a host followed by a path: ``collector.example/sync``) or an e-mail
address that its run's task did not give, or tells the agent to send data somewhere; or when ``taint`` holds
something in it: a call an observation asked for, or an effect the task did not ask for (``Lesson.taint``).
A page the agent read may have planted any of these.

Every pattern is linear: character classes with bounded repeats, no nested quantifiers over ambiguous parts.
"""

from __future__ import annotations

import re

from lessonbank.core.models import Lesson

URL = re.compile(r"(?i)\b(?:https?|ftp|wss?)://[^\s'\"`<>)]{0,200}|\bwww\.[a-z0-9-]{1,63}\.[^\s'\"`<>)]{0,200}")
# a host with a path or a port, without a scheme: "collector.example/sync", "10.0.0.7:8080"
HOST = re.compile(r"(?i)(?<![\w@./-])(?:[a-z0-9-]{1,63}\.){1,8}[a-z]{2,24}(?::\d{1,5})?/[^\s'\"`<>)]{0,200}"
                  r"|(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\w.])")
EMAIL = re.compile(r"(?i)\b[a-z0-9._%+-]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){1,4}\b")
EXFILTRATE = re.compile(
    r"(?i)\b(?:send|post|upload|forward|transmit|e-?mail|exfiltrate|copy|leak|report)(?: \S+){0,6}? "
    r"(?:to|at|into) (?:the )?(?:\S+ ){0,3}(?:server|endpoint|address|url|webhook|attacker|inbox|channel|host)\b"
)


def _not_in(found: list[str], task: str) -> list[str]:
    """The ``found`` strings that ``task`` does not hold (a URL or address the user gave is theirs to use)."""
    lowered = task.lower()
    return [item for item in found if item.lower().rstrip(".,;:!?") not in lowered]


def reason(text: str, task: str = "") -> str:
    """Why ``text`` must wait for a user before any run sees it ("" when it need not); ``task``: the task of
    the run it came from, whose own URLs and addresses are no reason."""
    if _not_in(URL.findall(text), task):
        return "it carries a URL"
    if _not_in(HOST.findall(text), task):
        return "it carries a host address"
    if _not_in(EMAIL.findall(text), task):
        return "it carries an e-mail address"
    if EXFILTRATE.search(text):
        return "it tells the agent to send data somewhere"
    return ""


def held_reason(lesson: Lesson) -> str:
    """Why a stored ``lesson`` must wait for a user ("" when it need not): its text or its recipe, or what its
    taint holds."""
    recipe = lesson.recipe
    task = recipe.task if recipe is not None else lesson.task
    why = reason(lesson.text, task) or (reason(f"{recipe.code}\n{recipe.title}", task) if recipe is not None else "")
    held = [mark for mark in lesson.taint if mark.held]
    return why or (held[0].reason if held else "")
