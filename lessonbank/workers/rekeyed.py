"""Whether every observed shape and failure of a bank is stored under the current fingerprint rule
(``upgrade.RULE``): a marker in Redis (``bank_rekeyed_key``) holding the rule, set once a read of the whole bank
found none left to move (a run's writes, ``workers.bank_writer``, or ``lessonbank migrate``). Writes of the current
rule keep it true, so the bank is not read for them again; a later rule differs from the marker, and reads it again.

A restore writes the marker anew (``core.backup.unread_marker``): a read of the bank begun before it, which cannot
have seen the restored lessons, sets the marker only if it still holds what the reader saw first (one script).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from lessonbank.core.connections import redis_text
from lessonbank.core.constants import bank_rekeyed_key
from lessonbank.learn.upgrade import RULE

# KEYS: the marker. ARGV: the rule, the value seen before the bank was read ('' for none). 1 if set.
_MARK = """
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


@dataclass
class RekeyMarker:
    """The marker of one bank."""

    client: redis.Redis
    bank: str
    seen: str | None = field(default=None)  # what ``current`` read ('' for no marker); None before it did

    def current(self) -> bool:
        """Are the bank's observed facts all stored under the current rule (as a read of it found)?"""
        self.seen = redis_text(self.client.get(bank_rekeyed_key(self.bank)))
        return self.seen == RULE

    def mark(self) -> bool:
        """A read of the whole bank found no observed fact of an earlier rule left to move: set the marker, unless
        it changed since ``current`` read it (a restore meanwhile). True if set."""
        if self.seen is None:
            self.client.set(bank_rekeyed_key(self.bank), RULE)
            return True
        return bool(self.client.eval(_MARK, 1, bank_rekeyed_key(self.bank), RULE, self.seen))
