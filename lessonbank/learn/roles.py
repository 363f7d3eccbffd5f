"""The role a number plays in a task, and a recipe's numbers matched to another task's numbers by role.

A number's role is its kind (a rounding precision: "Round to 2 decimals"; a year: "opened in 2023"; a bound:
"more than 10", "under 26"; else a plain number: a count, an amount, a rank) and the words around it, the nearest
weighing most ("more than 10 *items*"). A number of another task takes a recipe's number's place only when it is
of the same kind and shares words around it (a rounding precision: of the same kind is enough); among several of
one kind, the one whose words fit best, or, when the words do not tell them apart, the one at the same place in
order. A number that nothing fits is left unplaced: the caller names it.

Every pattern here reads a task's words, never a lesson's text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

STOPWORDS = frozenset({"the", "and", "for", "from", "with", "than", "that", "what", "which", "how", "many", "much",
                       "more", "less", "its", "has", "have", "was", "were", "are", "did", "does", "over", "into",
                       "per", "all", "any", "each", "one", "between", "using", "use", "about", "after", "before",
                       "get", "got", "gets", "give", "gave", "take", "took", "make", "made", "show", "list", "find",
                       "is", "be", "do", "not", "only", "number", "answer", "total"})
_SHORT = frozenset({"to", "of", "in", "at", "on", "by", "is", "it", "an", "as", "or", "if", "be", "do", "no", "so",
                    "up", "we", "my", "me", "he", "us", "am", "a"})  # a unit may be short ("km"), these are no unit
WINDOW = 4  # words each side of a number that tell its role
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_PRECISION = frozenset({"decimal", "decimals", "places", "digits", "dp", "significant", "figures"})
_ROUNDING = frozenset({"round", "rounded", "rounding"})
_BOUND = frozenset({"more", "less", "fewer", "greater", "higher", "lower", "above", "below", "under", "over",
                    "exceed", "exceeds", "exceeding", "least", "most", "than", "beyond", "within", "max", "min",
                    "maximum", "minimum", "limit", "threshold", "after", "before", "since", "until"})
_YEAR_BEFORE = frozenset({"in", "of", "since", "during", "until", "till", "year", "from", "before", "after", "by",
                          "for", "fy", "to", "and", "between", "through"})


@dataclass(frozen=True)
class Role:
    """A number's kind and the words around it, each weighed by its nearness (1 next to it, 1/2 one further...)."""

    kind: str
    words: dict[str, float]


def numeric(value: str) -> bool:
    """Whether ``value`` is a plain number (``10``, ``2.5``): its form alone does not say its role."""
    return _NUMBER.fullmatch(value) is not None


def role(tokens: Sequence[str], at: int) -> Role:
    """The role of the number ``tokens[at]`` in its task (see the module)."""
    lowered = [token.lower() for token in tokens]
    words: dict[str, float] = {}
    for step in (-1, 1):
        for distance in range(1, WINDOW + 1):
            index = at + step * distance
            if not 0 <= index < len(lowered) or numeric(lowered[index]):
                break  # another number's words are its own
            word = lowered[index]
            if word.isalpha() and len(word) >= 2 and word not in STOPWORDS and word not in _SHORT:
                words[word] = max(words.get(word, 0.0), 1 / distance)
    return Role(_kind(lowered, at), words)


def _kind(lowered: list[str], at: int) -> str:
    before = lowered[max(0, at - 2):at]
    after = lowered[at + 1] if at + 1 < len(lowered) else ""
    if after in _PRECISION or _ROUNDING & set(before):
        return "precision"
    value = lowered[at]
    if value.isdigit() and len(value) == 4 and 1900 <= int(value) <= 2100 and (
            (before[-1:] and before[-1] in _YEAR_BEFORE) or not after.isalpha()):
        return "year"
    return "bound" if _BOUND & set(_since_number(lowered, at)) else "number"


def _since_number(lowered: list[str], at: int) -> list[str]:
    """The (up to three) words before ``lowered[at]``, back to the number before it."""
    words: list[str] = []
    for index in range(at - 1, max(-1, at - 4), -1):
        if numeric(lowered[index]):
            break
        words.append(lowered[index])
    return words


def _fit(theirs: Role, mine: Role) -> float:
    """How well ``mine`` fits ``theirs``: the words they share, by nearness; a rounding precision is one by its kind
    alone ("to 1 decimal place" for "Round to 2 decimals")."""
    alone = 0.01 if theirs.kind == mine.kind == "precision" else 0.0
    return alone + sum(min(weight, mine.words[word]) for word, weight in theirs.words.items() if word in mine.words)


def match(sources: Sequence[str], solved: Sequence[str], task: Sequence[str]) -> dict[str, str]:
    """{a number of ``solved`` (its tokens): the number of ``task`` that plays its role} for each of ``sources``
    that one number fits (see the module). A number ``solved`` holds too is a candidate only as a source's own."""
    lowered = [token.lower() for token in solved]
    theirs = {source: role(solved, lowered.index(source)) for source in dict.fromkeys(sources)
              if source in lowered}
    known = set(lowered) - set(theirs)
    mine: dict[str, Role] = {}
    for at, token in enumerate(task):
        if numeric(token) and token not in known and token not in mine:
            mine[token] = role(task, at)
    placed: dict[str, str] = {}
    for kind in dict.fromkeys(found.kind for found in theirs.values()):
        group = [source for source, found in theirs.items() if found.kind == kind]
        candidates = [token for token, found in mine.items() if found.kind == kind]
        placed.update(_assigned(group, candidates, theirs, mine))
    return placed


def _assigned(group: list[str], candidates: list[str], theirs: dict[str, Role],
              mine: dict[str, Role]) -> dict[str, str]:
    """Each source of one kind to the candidate that fits it best, alone; on a tie, the one at its place in order
    when there are as many of each; none that fits no word, or that another source took as well."""
    chosen: dict[str, str] = {}
    for index, source in enumerate(group):
        fits = {candidate: _fit(theirs[source], mine[candidate]) for candidate in candidates}
        best = max(fits.values(), default=0.0)
        if best <= 0:
            continue  # no number of this kind has its words: none plays its role
        winners = [candidate for candidate, fit in fits.items() if fit == best]
        if len(winners) == 1:
            chosen[source] = winners[0]
        elif len(group) == len(candidates) and candidates[index] in winners:
            chosen[source] = candidates[index]
    taken = list(chosen.values())
    return {source: candidate for source, candidate in chosen.items() if taken.count(candidate) == 1}
