"""The quality gate: what a lesson must not be, decided without an LLM, before anything is stored.

A small distiller writes plans in the first person, restates the task or the run's own answer, says
that nothing went wrong, or quotes values it never observed. Each rule below drops such a lesson and
names the reason; the worker counts drops by reason (log and ``lessonbank status``).

| reason                 | dropped when the lesson ...                                                    |
|------------------------|--------------------------------------------------------------------------------|
| ``secret``             | looks like it carries a secret                                                 |
| ``contentless``        | is too short to say anything, or is generic advice ("always check your code")  |
| ``vague``              | points at a value without saying which ("use the correct date format")         |
| ``describes_tool``     | only says what a tool is (or was) used for ("`fetch_orders` is used to retrieve") |
| ``agent_setup``        | asks to change the agent itself (add a tool to the allowed tools, its settings) |
| ``uncallable``         | tells the agent to call a function the run was refused (a tool it lacks)       |
| ``nothing_happened``   | says the run succeeded or no failure occurred                                  |
| ``first_person_plan``  | is a plan or a story in the first person ("I will", "Let me", "so I assumed", "we were") |
| ``refers_to_transcript`` | points into the transcript, or tells its story ("step 3", "the approach was to") |
| ``restates_task``      | mostly repeats the task                                                        |
| ``restates_answer``    | states the run's own final answer (a total, a rate: true of one run only)      |
| ``states_one_value``   | only states a value of one of the task's entities ("pump-7 ran 40211 cycles")  |
| ``ungrounded``         | quotes a number or a code name that appears nowhere in what the run observed   |
| ``contradicts_observed`` | says a call got nothing back when the run's call with that value printed data, |
|                        | or that a key was missing when a step that ran used it (``row['amount']``), or   |
|                        | that a field exists when every step that used it failed (``result['peak_kw']``)  |
| ``contradicts_observed_type`` | says a tool's result (or a field of it) is of a type every observed result of  |
|                        | that tool contradicts ("returned a list of strings" of a list of records)       |
| ``copies_given``       | repeats a lesson the run was given (its echo, not new evidence)                |

The rules that compare a lesson with what the run observed (``ungrounded``, ``contradicts_observed``) are
``lessonbank.learn.grounding``'s; this module holds the rules that read the lesson's wording and the table that
orders them all. What passes may still wait for a user: ``lessonbank.learn.quarantine`` and
``lessonbank.learn.taint`` say when (a URL, an e-mail address, a call an observation asked for).

Every pattern is linear: fixed words with bounded gaps, no nested quantifiers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lessonbank.core.models import normalize_lesson_text
from lessonbank.core.redact import Redactor
from lessonbank.core.tokens import tokens
from lessonbank.learn import types_claims
from lessonbank.learn.grounding import (
    CODE_NAME,
    NUMBER,
    claims_a_failed_key,
    contradicts_a_working_key,
    contradicts_call,
    numbers,
    ungrounded,
)

MIN_CHARS = 24
MIN_CONTENT_TOKENS = 4
TASK_OVERLAP = 0.7
GIVEN_OVERLAP = 0.8
MIN_ANSWER_CHARS = 3
MAX_ANSWER_CHARS = 80
ANSWER_TASK_OVERLAP = 0.4

_GENERIC = re.compile(
    r"(?i)^\W*(?:always |make sure to |be sure to |remember to |it is important to )?"
    r"(?:double[- ]check|check|verify|review|test) (?:your|the) (?:code|work|answer|output|results?)\W*$"
    r"|(?i:\bbe careful\b|\bpay (?:close )?attention\b|\bfollow the instructions\b)"
)
_NOTHING = re.compile(
    r"(?i)\bno (?:failures?|errors?|issues?|problems?|mistakes?)(?: \w+){0,2} (?:occurred|happened|"
    r"were (?:found|encountered|made|observed)|was (?:found|encountered))"
    r"|\bnothing (?:went wrong|failed)\b"
    r"|\bthe (?:run|task|agent|execution)(?: \w+){0,2} (?:was (?:completed |)successful(?:ly)?|succeeded|"
    r"completed successfully|finished successfully)"
    r"|\b(?:completed|finished|solved) (?:the task |it )?successfully\b"
    r"|\b(?:was|were|is|are) successfully (?:retrieved|fetched|obtained|loaded|read|returned|computed|calculated)\b"
    # "The order with ID 'ORD-1002' is retrieved successfully.": a report of the run, nothing for the next one
    r"|\b(?:was|were|is|are) (?:retrieved|fetched|obtained|loaded|read|returned|computed|calculated) successfully\b"
    r"|\bthe (?:run|task|agent|execution|code)(?: \w+){0,2} did not (?:fail|encounter any)\b"
    # the narrator's account of what went well: "The run successfully retrieved the user data ..."
    r"|\b(?:the|this) (?:run|agent|task)(?: \w+){0,2}? successfully\b"
)
# A lesson that points at a value without saying which: "with the correct date format", "retry with a
# different date format", "ensure the query is correctly formatted". The next run cannot act on it, and a
# verified run's narration of this kind was handed to runs at once.
_VAGUE = re.compile(
    r"(?i)\b(?:the|a|an) (?:correct|right|proper|valid|expected|appropriate|required|different|suitable|"
    r"supported|accepted|acceptable) (?:[a-z]+ ){0,2}?(?:format|value|parameter|argument|input|key|field|"
    r"column|name|type|syntax|units?|separator|delimiter|encoding|structure|path)s?\b"
    r"|\b(?:correctly|properly|appropriately) (?:formatted|specified|structured|encoded|typed)\b"
)
# What says which: a quoted value, a number, a date format's letters (DD.MM.YYYY), ISO, a strftime
# directive, or code that is more than a name (a bare name counts unless it is a function the run called).
_SAYS_WHICH = re.compile(
    r"\"[^\"\n]{1,60}\"|(?<!\w)'[^'\n]{1,60}'(?!\w)|\d|(?-i:\b(?:YYYY|YY|MM|DD|HH|SS|ISO)\b)|%[a-zA-Z]"
    r"|`[\w\s()]{0,80}[^\w`\s()][^`\n]{0,80}`"
)
_BARE_NAME = re.compile(r"`([A-Za-z_]\w{0,60})(?:\(\))?`")
# A lesson that only says what a tool is for: its docstring already does.
_TOOL_PURPOSE = re.compile(
    r"(?i)^\W*(?:the )?`?[a-z_][a-z0-9_]{0,60}`?(?: \(\))?"
    r"(?:(?: function| tool| method)? (?:is used|was used|can be used|is a (?:function|tool)(?: \w+){0,2}) "
    r"to (?:retrieve|get|fetch|obtain|read|load|return|list|look up)\b"
    # named a function or tool, any purpose: "The find_products tool was used to find 'chair' products."
    r"|(?: function| tool| method) (?:is|was|can be) used to [a-z])"
)
# Advice to change the agent itself (its tools, imports, permissions): not the agent's to act on.
_AGENT_SETUP = re.compile(
    r"(?i)\b(?:add|allow|authori[sz]e|enable|install|import|register|whitelist)(?: \S+){0,6}? (?:to|in|into) "
    r"(?:the |its )?(?:list of )?(?:allowed|authori[sz]ed|permitted|available) (?:tools|imports|modules|functions)\b"
    r"|\b(?:agent'?s?|its) (?:security|sandbox|tool) (?:settings|configuration|permissions|list)\b"
    r"|\bauthori[sz]ed imports\b"
)
# smolagents' words for a function the agent may not or cannot call.
_UNCALLABLE = re.compile(
    r"(?i)'([a-z_][a-z0-9_.]{0,60})' is not among the explicitly allowed tools"
    r"|forbidden function evaluation: '([a-z_][a-z0-9_.]{0,60})'"
    r"|(?:name|function) '([a-z_][a-z0-9_.]{0,60})' is not defined"
)
_FIRST_PERSON = re.compile(
    r"(?i)^\W*(?:i|we|let(?:'s| me| us))\b"
    r"|\b(?:i|we)(?:'ll| will| am going to| are going to| need to| should| have to| must| can)\b"
    r"|\bmy (?:plan|next step|approach)\b"
    # a later sentence that starts a plan ("... not found. Let me look at the header line.")
    r"|[.!?;:]\W{0,3}let(?:'s| me| us)\b"
    # the narrator "I" (capital, a verb after it) opening a clause: "so I assumed it was successful"
    r"|(?:[.!?;:,]\W{0,3}|\b(?:so|and|then|but|because|when|since|after|before|until|that) )(?-i:I [a-z])"
    # the narrator "we" telling what the run did: "but we were trying to use it as if it was a dictionary"
    r"|\bwe (?:were|tried|used|called|got|had|did|saw|found|assumed|thought|made|ran|passed|needed|wanted)\b"
)
_TRANSCRIPT = re.compile(
    r"(?i)\bsteps? \d+\b|\bE\d+\b|\b(?:the )?above\b|\bthis (?:run|transcript|conversation|session|attempt)\b"
    r"|\bthe (?:transcript|previous step|last step|next step|observation above)\b|\bin this task\b"
    # "The previous run failed because of an invalid date format.": it points at a run the next one never saw
    # "The initial approach failed due to an incorrect date format, but the subsequent approach ..."
    r"|\b(?:the|a|an) (?:previous|prior|earlier|last|first|initial|original|subsequent) "
    r"(?:run|attempt|try|approach)(?:e?s)?\b"
    # a sentence that leans on one before it: "However, the initial attempt failed due to ..."
    r"|^\W{0,3}however,"
    # smolagents' own framing of a step's error, copied: "The code execution failed at line '...' due to: ..."
    r"|\bcode execution failed at line\b"
    r"|\b(?:the|this) (?:run|agent) (?:ended|failed|succeeded|finished|was judged|stopped|gave up)\b"
    r"|\bthe (?:code )?snippet\b|^\W*the (?:task|goal|question) (?:was|is) to\b"
    r"|\brecorded outcome\b|\bjudged (?:a )?(?:success|failure)\b|\bfinal answer (?:was|is):? |\bfinal answer: "
    # the distill prompt's own lists: "This is a duplicate of lesson 2."
    r"|\b(?:duplicates?|copy|repeats?|same as) (?:of )?(?:the )?(?:existing |given |earlier )?lesson(?: #?\d+)?\b"
    # the run's own step limit: "The error AgentMaxStepsError: Reached max steps was observed ..."
    r"|\bAgentMaxStepsError\b|(?-i:\bReached max steps\b)"
    # the run's own work told in the passive: "The total ... was calculated by summing ..., then dividing by 100"
    # (given next to the recipe that does it, it made a run divide by 100 twice)
    r"|\b(?:was|were) (?:calculated|computed|obtained|determined|derived) by\b"
)
_STORY = re.compile(
    # the run's story told as a sentence about it: "The approach was to ...", "The agent used ...", "The
    # failure occurred because ...", "The error message indicates ...", "To fix this, ...". A story says what one
    # run did, not how the tools behave, and it carries that run's values (a rejected argument among them) to the
    # next run; a story with advice in it is kept (``_ADVICE``).
    r"(?i)(?:^|[.!?;]\s)\W{0,3}(?:the (?:\w+ )?approach (?:\w+ )?(?:was|were) (?:to|that)\b"
    r"|the (?:\w+ )?approach (?:then |later |next )?(?:switched|changed|shifted|moved|turned)\b"
    r"|the (?:failure|error|problem|issue|mistake)s? (?:was|were|occurred|happened|arose)\b"
    r"|(?:the|this) (?:run|agent|code|script)(?: (?:also|still|then|first|again|itself|provided|correctly|"
    r"incorrectly|successfully))? (?:[a-z]+ed|did|was|were|had|ran|got|made|took|found|read|wrote|gave|saw|"
    r"chose|built|sent|kept|left|began|should have|could not|"
    r"couldn't|didn't)\b"
    r"|the (?:error|output|result|observation|traceback)(?: message)?s? (?:indicate[sd]|suggest(?:s|ed)|"
    r"show(?:s|ed)|said|meant|was)\b"
    r"|to (?:fix|avoid|solve|resolve|correct|handle|prevent) (?:this|that|the (?:issue|problem|error|failure))\b)"
    r"|\b(?:approach|solution) (?:should|would) have been\b"
)
# A clause that tells the next run what to do, or when: a story with one is a lesson ("The script failed when the
# input file had a BOM; open it with encoding='utf-8-sig'."), a story alone is not.
_ADVICE = re.compile(
    r"(?i)(?:[;:]|\.\s)\s*(?:then\s+|so\s+)?(?:open|pass|use|read|call|convert|add|remove|skip|divide|multiply|"
    r"replace|strip|split|set|write|follow|raise|leave|subtract|decode|encode|parse|filter|sort|round|request|"
    r"give|put|cast|check that|always|never|do not|don't)\b"
    r"|\b(?:when|whenever|if|unless) (?:the |a |an |its )?(?:input|file|result|response|value|field|tool|call)\b"
)


@dataclass
class GateContext:
    """What the gate compares a lesson with: the run it came from."""

    task: str = ""
    final_answer: str = ""
    observed: str = ""
    given: Sequence[str] = ()
    results: Sequence[tuple[str, str]] = ()  # (code, what it got back or "failed") per step: evidence.call_results
    types: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)  # types_claims.seen_in
    redactor: Redactor = field(default_factory=Redactor)

    def __post_init__(self) -> None:
        self._task_tokens = set(tokens(self.task))
        self._given = [(normalize_lesson_text(text), set(tokens(text))) for text in self.given]
        self._haystack = f"{self.task}\n{self.observed}".lower()
        self._uncallable = {
            next(group for group in match.groups() if group).lower() for match in _UNCALLABLE.finditer(self.observed)
        }


def _uncallable(text: str, ctx: GateContext) -> bool:
    """The lesson tells the agent to call something the run was refused (a tool it does not have)."""
    if not ctx._uncallable:
        return False
    named = {next(group for group in m.groups() if group).split("(")[0].strip().lower()
             for m in CODE_NAME.finditer(text)}
    return bool(named & ctx._uncallable)


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _contentless(text: str, ctx: GateContext) -> bool:
    return len(text) < MIN_CHARS or len(set(tokens(text))) < MIN_CONTENT_TOKENS or bool(_GENERIC.search(text))


def _vague(text: str, ctx: GateContext) -> bool:
    """The lesson names "the correct format" (or a different one) and says nowhere which it is."""
    if not _VAGUE.search(text) or _SAYS_WHICH.search(text):
        return False
    # a name in backticks says which when it is not the function the run called (a key, a column)
    return all(f"{match.group(1).lower()}(" in ctx._haystack for match in _BARE_NAME.finditer(text))


def _restates_task(text: str, ctx: GateContext) -> bool:
    mine = set(tokens(text))
    return bool(mine) and (mine <= ctx._task_tokens or _overlap(mine, ctx._task_tokens) >= TASK_OVERLAP)


def _restates_answer(text: str, ctx: GateContext) -> bool:
    answer = " ".join(ctx.final_answer.split())
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return False
    if NUMBER.fullmatch(answer.strip()):
        # a number: long ones are specific enough alone; short ones when the lesson is about this task's specifics
        if not numbers(answer) & numbers(text):
            return False
        return len(answer) >= MIN_ANSWER_CHARS or _overlap(set(tokens(text)), ctx._task_tokens) >= ANSWER_TASK_OVERLAP
    return len(answer) >= MIN_ANSWER_CHARS and answer.lower() in text.lower()


_ENTITY = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+\b|\b[A-Za-z]+[0-9][A-Za-z0-9]*\b")


def _states_one_value(text: str, ctx: GateContext) -> bool:
    """The lesson only states a value of one of the task's entities (``pump-7 ran 40211 cycles``): true of this
    question, nothing about the tool. It names an entity of the task (an id, a hyphenated name), states a number of
    two or more digits the task does not hold, and names no code and gives no advice."""
    if "`" in text or "(" in text or _ADVICE.search(text):
        return False
    entities = {m.group(0).lower() for m in _ENTITY.finditer(ctx.task)}
    if not entities or not any(m.group(0).lower() in entities for m in _ENTITY.finditer(text)):
        return False
    task_numbers = numbers(ctx.task)
    return any(sum(ch.isdigit() for ch in number) >= 2 and not numbers(number) & task_numbers
               for number in NUMBER.findall(text))


def _says_more(text: str) -> bool:
    """Whether a sentence saying what a tool is used for goes on to say something of its own ("...; sizes are in
    bytes."): a clause after it of more than a word."""
    parts = re.split(r"[;:]\s|\.\s", text.strip(), maxsplit=1)
    return len(parts) == 2 and len(tokens(parts[1])) >= 2


def _copies_given(text: str, ctx: GateContext) -> bool:
    normal, mine = normalize_lesson_text(text), set(tokens(text))
    return any(normal == other or _overlap(mine, other_tokens) >= GIVEN_OVERLAP for other, other_tokens in ctx._given)


Rule = Callable[[str, GateContext], bool]

RULES: tuple[tuple[str, Rule], ...] = (
    ("secret", lambda text, ctx: ctx.redactor.has_secret(text)),
    ("nothing_happened", lambda text, ctx: bool(_NOTHING.search(text))),
    ("first_person_plan", lambda text, ctx: bool(_FIRST_PERSON.search(text))),
    ("refers_to_transcript", lambda text, ctx: bool(_TRANSCRIPT.search(text))
     or (bool(_STORY.search(text)) and not _ADVICE.search(text))),
    ("contentless", _contentless),
    ("vague", _vague),
    ("describes_tool", lambda text, ctx: bool(_TOOL_PURPOSE.search(text)) and not _says_more(text)),
    ("agent_setup", lambda text, ctx: bool(_AGENT_SETUP.search(text))),
    ("uncallable", _uncallable),
    ("restates_task", _restates_task),
    ("restates_answer", _restates_answer),
    ("states_one_value", _states_one_value),
    ("ungrounded", lambda text, ctx: bool(ctx.observed) and ungrounded(text, ctx._haystack)),
    ("contradicts_observed", lambda text, ctx: contradicts_call(text, ctx.results)),
    ("contradicts_observed", lambda text, ctx: contradicts_a_working_key(text, ctx.results)),
    ("contradicts_observed", lambda text, ctx: claims_a_failed_key(text, ctx.results)),
    ("contradicts_observed_type", lambda text, ctx: types_claims.contradicted(text, ctx.types)),
    ("copies_given", _copies_given),
)

# Lessons an agent or a user hands in have no run to be compared with: only these rules apply.
CONTEXT_FREE = ("secret", "nothing_happened", "first_person_plan", "refers_to_transcript", "contentless",
                "vague", "describes_tool", "agent_setup")


def reason_to_drop(text: str, ctx: GateContext, rules: Iterable[str] | None = None) -> str | None:
    """The first rule ``text`` breaks, or None when it may be stored."""
    wanted = set(rules) if rules is not None else None
    for name, rule in RULES:
        if (wanted is None or name in wanted) and rule(text, ctx):
            return name
    return None


def screen(texts: Sequence[str], ctx: GateContext,
           rules: Iterable[str] | None = None) -> tuple[list[int], Counter[str]]:
    """Indices of the texts that pass, and the drops counted by reason."""
    rule_names = list(rules) if rules is not None else None
    kept: list[int] = []
    dropped: Counter[str] = Counter()
    for index, text in enumerate(texts):
        reason = reason_to_drop(text, ctx, rule_names)
        if reason is None:
            kept.append(index)
        else:
            dropped[reason] += 1
    return kept, dropped
