"""A backup of banks that restores: every lesson of a bank (every status, every field as stored) and what Redis
keeps about the bank after its runs expire (the finished runs' summaries the report reads, the tombstones of
purged lessons), written to a directory and read back verbatim.

The directory holds ``manifest.json`` (the format, the lesson schema it was written in, one entry per bank naming
its file) and one JSON file per bank: ``{"bank", "lessons": [...], "runs": {run id: started_at}, "summaries": {run
id: summary JSON as stored}, "purged": [lesson ids]}``. A run's steps and its state are not part of it: they expire
within ``step_ttl`` anyway, and a restored bank's runs are all finished ones.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis
from pydantic import ValidationError

from lessonbank.core.constants import (
    BANK_PURGED_KEY,
    BANK_RUNS_KEY,
    BANK_SUMMARIES_KEY,
    bank_purged_key,
    bank_rekeyed_key,
    bank_runs_key,
    bank_summaries_key,
)
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.models import LESSON_SCHEMA_VERSION, Lesson
from lessonbank.core.store.protocol import LessonStoreProtocol

FORMAT = 1
MANIFEST = "manifest.json"
EVERY_LESSON = 1_000_000
SCAN_COUNT = 1000
WRITE_BATCH = 64


@dataclass
class BankBackup:
    """One bank as backed up."""

    bank: str
    lessons: list[Lesson] = field(default_factory=list)
    runs: dict[str, float] = field(default_factory=dict)
    summaries: dict[str, str] = field(default_factory=dict)
    purged: list[str] = field(default_factory=list)

    def to_data(self) -> dict[str, Any]:
        return {"bank": self.bank, "lessons": [json.loads(lesson.to_json()) for lesson in self.lessons],
                "runs": self.runs, "summaries": self.summaries, "purged": sorted(self.purged)}


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def redis_banks(client: redis.Redis) -> set[str]:
    """The banks Redis keeps anything about (runs, summaries, tombstones)."""
    names: set[str] = set()
    for template in (BANK_RUNS_KEY, BANK_SUMMARIES_KEY, BANK_PURGED_KEY):
        head, tail = template.split("{bank}")
        for key in cast(Iterable[bytes], client.scan_iter(match=f"{head}*{tail}", count=SCAN_COUNT)):
            names.add(_text(key)[len(head):-len(tail)])
    return names


def bank_names(store: LessonStoreProtocol, client: redis.Redis) -> list[str]:
    """Every bank with an active lesson in the store or anything in Redis."""
    return sorted(set(store.banks()) | redis_banks(client))


def read_bank(store: LessonStoreProtocol, client: redis.Redis, bank: str) -> BankBackup:
    """All of ``bank``: its lessons of every status, its run summaries and its tombstones."""
    lessons = store.list(bank, limit=EVERY_LESSON, include_inactive=True)
    runs = {_text(member): float(score)
            for member, score in cast(list[tuple[bytes, float]], client.zrange(bank_runs_key(bank), 0, -1,
                                                                                 withscores=True))}
    summaries = {_text(k): _text(v) for k, v in cast(dict[bytes, bytes],
                                                    client.hgetall(bank_summaries_key(bank))).items()}
    purged = [_text(member) for member in cast(set[bytes], client.smembers(bank_purged_key(bank)))]
    return BankBackup(bank, lessons, runs, summaries, purged)


def write_backup(directory: Path, banks: list[BankBackup]) -> dict[str, Any]:
    """Write ``banks`` into ``directory`` (created; it must not hold a backup already); returns the manifest."""
    if (directory / MANIFEST).exists():
        raise ConfigurationError(f"{directory} holds a backup already: export into a new directory")
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for index, backup in enumerate(banks):
        name = f"bank-{index:05d}.json"
        (directory / name).write_text(json.dumps(backup.to_data(), ensure_ascii=False), encoding="utf-8")
        entries.append({"bank": backup.bank, "file": name, "lessons": len(backup.lessons), "runs": len(backup.runs)})
    manifest = {"format": FORMAT, "lesson_schema": LESSON_SCHEMA_VERSION, "created_at": time.time(),
                "banks": entries}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    return manifest


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigurationError(f"cannot read {path}: {e}") from e


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of the backup in ``directory``, checked: a format and a lesson schema this release reads."""
    manifest = _load(directory / MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("banks"),
                                                                                             list):
        raise ConfigurationError(f"{directory / MANIFEST} is not a lessonbank backup of format {FORMAT}")
    schema = manifest.get("lesson_schema")
    if not isinstance(schema, int) or schema > LESSON_SCHEMA_VERSION:
        raise ConfigurationError(f"the backup in {directory} holds lessons of schema {schema!r}; this release reads "
                                 f"schema {LESSON_SCHEMA_VERSION} and older: restore it with a newer lessonbank")
    return manifest


def read_bank_file(directory: Path, entry: dict[str, Any]) -> BankBackup:
    """One bank of a backup, every lesson validated and of that bank (a lesson of an older schema is upgraded)."""
    name = str(entry.get("file", ""))
    if not name or Path(name).name != name:
        raise ConfigurationError(f"the manifest in {directory} names no file or a path for bank {entry.get('bank')!r}")
    data = _load(directory / name)
    try:
        bank = str(data["bank"])
        lessons = [Lesson.model_validate(item) for item in data["lessons"]]
        backup = BankBackup(bank, lessons, {str(k): float(v) for k, v in data["runs"].items()},
                            {str(k): str(v) for k, v in data["summaries"].items()}, [str(i) for i in data["purged"]])
    except (KeyError, TypeError, AttributeError, ValueError, ValidationError) as e:
        raise ConfigurationError(f"{directory / name} is not a bank backup: {e}") from e
    if bank != entry.get("bank") or any(lesson.bank != bank for lesson in lessons):
        raise ConfigurationError(f"{directory / name} holds lessons of another bank than {entry.get('bank')!r}")
    return backup


def occupied(store: LessonStoreProtocol, client: redis.Redis, bank: str) -> bool:
    """Does ``bank`` hold anything a restore would mix with (a lesson of any status, a run, a tombstone)?"""
    return bool(store.list(bank, limit=1, include_inactive=True) or client.exists(
        bank_runs_key(bank), bank_summaries_key(bank), bank_purged_key(bank)))


def unread_marker() -> str:
    """A bank's fingerprint marker that says "read it": no rule's name, and no value a reader saw before."""
    return f"unread:{uuid.uuid4().hex}"


def restore_bank(store: LessonStoreProtocol, client: redis.Redis, backup: BankBackup) -> None:
    """Write a bank's backup back as it was: lessons through the store (vectors computed again), the rest to Redis
    in one transaction."""
    for start in range(0, len(backup.lessons), WRITE_BATCH):
        store.upsert(backup.lessons[start:start + WRITE_BATCH])
    pipe = client.pipeline(transaction=True)
    # its lessons may be of an earlier fingerprint rule: read it for them (a value no read saw, so a read of the bank
    # begun before the restore does not mark it, ``workers.rekeyed``)
    pipe.set(bank_rekeyed_key(backup.bank), unread_marker())
    if backup.runs:
        pipe.zadd(bank_runs_key(backup.bank), backup.runs)
    if backup.summaries:
        pipe.hset(bank_summaries_key(backup.bank), mapping=dict[Any, Any](backup.summaries))
    if backup.purged:
        pipe.sadd(bank_purged_key(backup.bank), *backup.purged)
    pipe.execute()
