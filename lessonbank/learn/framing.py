"""Story-framed lessons: the fact a run's story carries, kept when the run's tools said it.

A small distiller often tells a run's story where a fact about a tool is meant: "The run failed because the date
'2024-03-12' was not valid according to the expected format DD.MM.YYYY." The gate drops the story
(``refers_to_transcript``: the next run never saw that run), and with it the fact. ``salvage`` keeps the fact:

- each sentence loses its narrator's framing: a leading "However," and everything up to the last "because", "due
  to", "indicating that", "which means that", "the error said:" ...; a sentence with no framing to cut is left out
  (the rest of the lesson is what made it a story), and so is one that leans on another ("It should have been");
- what is left passes every rule of the gate on its own, or it stays dropped;
- it is about a tool: it names one of the run's tools, or exactly one tool's observations (what it raised, what the
  steps that called only it printed) hold what it pins its claim to (a quoted value, a number, a code name, a format
  such as DD.MM.YYYY), and that tool is named at its head.

A story with no such clause stays dropped, whatever its wording. ``attested_by`` names the tool whose own errors
state what a lesson pins its claim to: a user's or a check's verdict on the run, failed or not, vouches for such a
lesson (``trust.Testimony.for_attested``); a run judged only by its own ending (its step limit) does not. A lesson
that carries a call such an error asked for is held for a user, as the observed failure of that error is.

Every pattern is linear: fixed words with bounded gaps, no nested quantifiers.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from lessonbank.learn import failures, gate
from lessonbank.learn.view import RunView, Step

logger = logging.getLogger(__name__)

NOT_TOOLS = frozenset({"final_answer"})
MAX_SENTENCES = 8
MAX_SAID = 20_000  # characters of what one tool said that a lesson is compared with

_SENTENCE = re.compile(r"(?<=[.!?])(?<!e\.g\.)(?<!i\.e\.)(?<!etc\.)(?<!vs\.)\s+(?=[A-Z`\"'])")
_LEAD = re.compile(
    r"(?i)^\W{0,3}(?:however|but|also|additionally|moreover|furthermore|in addition|unfortunately|instead|"
    r"as a result|therefore|thus|so|note that|in this case|in short)\b,?\s*"
)
# the narrator's framing, cut up to its last occurrence: what follows is what the run found
_CUT = re.compile(
    r"(?i)\b(?:because(?: of)?|due to|since|as a result of|(?:caused|triggered) by|"
    r"(?:indicat|show|suggest|mean|reveal|stat|confirm|explain)(?:s|es|ed|t|ing)? that|"
    r"(?:sa(?:ys|id|ying)|told|reported)(?: that)?:?|"
    r"(?:error|exception|message|traceback)(?: message)?(?: (?:was|read|reads))?:)\s+"
)
# a sentence that leans on one before it: no fact of its own
_LEANS = re.compile(r"(?i)^\W{0,3}(?:it|this|that|these|those|they|he|she|which|such)\b")
# what a clause pins its claim to: a quoted value, code, a number or date, a code name, a format's letters
_PINS = re.compile(
    r"\"([^\"\n]{1,60})\"|(?<!\w)'([^'\n]{1,60})'(?!\w)|`([^`\n]{1,80})`"
    r"|(?<![\w.])(\d[\d.,:/-]{0,30}\d|\d)(?!\w)|\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b"
    r"|(?-i:\b([A-Z]{2,4}(?:[./:-][A-Z]{2,4}){1,3})\b)|(%[a-zA-Z])"
)
_TOOL_NAME = re.compile(r"[A-Za-z_]\w{0,60}")


def _tools_of(step: Step, tools: Sequence[str] | None) -> set[str]:
    called = {call.tool for call in step.calls} - NOT_TOOLS
    return called & set(tools) if tools is not None else called


def said_by_tools(view: RunView, raised_only: bool = False) -> dict[str, str]:
    """What each tool of the run said, by tool: the errors its calls raised, and (unless ``raised_only``) what the
    steps that called only it printed or failed with."""
    said: dict[str, list[str]] = {}
    for step in view.actions:
        tools = _tools_of(step, view.tools)
        raising = ({step.failed_tool} if step.failed_tool in tools else
                   {call.tool for call in step.calls if call.failed} & tools)
        error = "\n".join(dict.fromkeys(text for text in (step.error, step.error_message) if text))
        if step.failed and len(raising) == 1:
            said.setdefault(raising.pop(), []).append(error)
        elif not raised_only and len(tools) == 1:
            said.setdefault(next(iter(tools)), []).append(error if step.failed else step.printed)
    return {tool: "\n".join(texts)[:MAX_SAID] for tool, texts in said.items()}


def _pins(text: str) -> set[str]:
    return {next(group for group in match.groups() if group).strip() for match in _PINS.finditer(text)}


def _named(text: str, tools: Sequence[str]) -> set[str]:
    """The run's tools ``text`` names (as a call, in backticks, or as a word)."""
    words = {word.lower() for word in _TOOL_NAME.findall(text)}
    return {tool for tool in tools if tool.lower() in words}


def _supporting(text: str, said: Mapping[str, str], task: str, among: set[str] | None = None) -> list[str]:
    """The tools whose words hold what ``text`` pins its claim to, as written (the tools' own names aside): those
    that hold every pin, else those that hold one at least and the task the others."""
    pins = _pins(text) - set(said)
    if not pins:
        return []
    candidates = {tool: words for tool, words in said.items() if among is None or tool in among}
    whole = [tool for tool, words in candidates.items() if all(pin in words for pin in pins)]
    return whole or [tool for tool, words in candidates.items()
                     if any(pin in words for pin in pins) and all(pin in words or pin in task for pin in pins)]


def _unframed(sentence: str) -> tuple[str, bool]:
    """The sentence without its narrator's framing, and whether any was cut."""
    clause = _LEAD.sub("", sentence, count=1)
    cut = clause != sentence
    ends = [match.end() for match in _CUT.finditer(clause)]
    if ends and ends[-1] < len(clause):
        clause, cut = clause[ends[-1]:], True
    return clause.strip(" ,;:-"), cut


def _about_a_tool(clause: str, said: Mapping[str, str], tools: Sequence[str], task: str) -> str | None:
    """The clause as a lesson about one tool: as it is when it names one, else headed by the one tool whose words
    support it; None when no single tool does."""
    if _named(clause, tools):
        return clause[:1].upper() + clause[1:]
    supporting = _supporting(clause, said, task)
    return f"`{supporting[0]}`: {clause}" if len(supporting) == 1 else None


def salvage(text: str, ctx: gate.GateContext, said: Mapping[str, str], tools: Sequence[str]) -> str | None:
    """The facts about the run's ``tools`` a story-framed lesson carries (see the module), as one lesson; None when
    it carries none. ``said``: ``said_by_tools`` of the run."""
    facts: list[str] = []
    for sentence in _SENTENCE.split(text.strip())[:MAX_SENTENCES]:
        clause, cut = _unframed(sentence)
        if not cut or _LEANS.search(clause):
            continue
        fact = _about_a_tool(clause, said, tools, ctx.task)
        if fact is not None and gate.reason_to_drop(fact, ctx) is None:
            facts.append(fact if fact.endswith((".", "!", "?")) else f"{fact}.")
    return " ".join(facts) or None


def screen(texts: Sequence[str], ctx: gate.GateContext,
           view: RunView) -> tuple[list[tuple[int, str]], Counter[str], int]:
    """The gate over a run's lessons (``gate.reason_to_drop``), keeping the facts of story-framed ones
    (``salvage``): (index, text as kept) of each kept lesson, the drops by reason, and how many were salvaged.
    Each drop is logged at DEBUG with its rule and its text as a log may show it (``Redactor.loggable``)."""
    said = said_by_tools(view)
    tools = sorted(set(view.tools or ()) - NOT_TOOLS) or sorted(said)
    kept: list[tuple[int, str]] = []
    dropped: Counter[str] = Counter()
    salvaged = 0
    for index, text in enumerate(texts):
        reason = gate.reason_to_drop(text, ctx)
        fact = salvage(text, ctx, said, tools) if reason == "refers_to_transcript" else None
        if reason is None or fact is not None:
            kept.append((index, fact or text))
            salvaged += fact is not None
        else:
            dropped[reason] += 1
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("gate dropped a lesson (%s): %s", reason, ctx.redactor.loggable(text))
    return kept, dropped, salvaged


def attested_by(text: str, view: RunView) -> tuple[str, list[str]]:
    """The tool whose own errors state what ``text`` pins its claim to ("" when none or several do: a lesson that
    names tools is attested only by one of them), and the calls its errors name (neither that tool, nor the task's,
    nor Python's own: ``failures.calls_named``) that ``text`` mentions: an error asking for a call is no fact to
    hand on, and a lesson carrying it waits for a user."""
    raised = said_by_tools(view, raised_only=True)
    if not raised:
        return "", []
    named = _named(text, sorted(raised))
    supporting = _supporting(text, raised, view.task, named or None)
    if len(supporting) != 1:
        return "", []
    tool = supporting[0]
    words = set(_TOOL_NAME.findall(text))
    return tool, [call for call in failures.calls_named(raised[tool], tool, view.task, view.tools or ())
                  if call.rsplit(".", 1)[-1] in words]
