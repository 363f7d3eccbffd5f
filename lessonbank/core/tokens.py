"""Lexical tokens of a text: what the lexical half of the hybrid search and the text overlaps compare."""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)

# Function words that carry no lexical signal (a compact English list in the spirit of the Glasgow
# IR stop list); dropping them keeps sparse matches about content words.
STOPWORDS = frozenset(
    """a about above after again against all almost also am among an and any are as at be because been
    before being below between both but by can could did do does doing done down during each either else
    every few for from further had has have having he her here hers him his how however i if in into is it
    its itself just least less let like may me might more most much must my neither no nor not now of off
    often on once one only or other otherwise our ours out over own per perhaps quite rather same shall she
    should since so some still such than that the their theirs them then there these they this those though
    through thus to too under until up upon us very via was we well were what whatever when where whether
    which while who whom whose why will with within without would yet you your yours""".split()
)


def tokens(text: str) -> list[str]:
    """Lowercased word tokens of ``text`` without stopwords; ``read_csv`` also yields ``read`` and ``csv``."""
    found: list[str] = []
    for token in _TOKEN_RE.findall(text.lower()):
        found.append(token)
        if "_" in token.strip("_"):
            found.extend(part for part in token.split("_") if part)
    return [token for token in found if token not in STOPWORDS]
