"""Whether every observed shape and failure of a bank is stored under the current fingerprint rule
(``upgrade.RULE``): a marker in Redis (``bank_rekeyed_key``) holding the rule, set once a read of the whole bank
found none left to move (a run's writes, ``workers.bank_writer``, or ``lessonbank migrate``). Writes of the current
rule keep it true, so the bank is not read for them again; a later rule differs from the marker, and reads it again.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from lessonbank.core.constants import bank_rekeyed_key
from lessonbank.learn.upgrade import RULE


@dataclass(frozen=True)
class RekeyMarker:
    """The marker of one bank."""

    client: redis.Redis
    bank: str

    def current(self) -> bool:
        """Are the bank's observed facts all stored under the current rule (as a read of it found)?"""
        value = self.client.get(bank_rekeyed_key(self.bank))
        return value is not None and (value.decode() if isinstance(value, bytes) else str(value)) == RULE

    def mark(self) -> None:
        """A read of the whole bank found no observed fact of an earlier rule left to move."""
        self.client.set(bank_rekeyed_key(self.bank), RULE)
