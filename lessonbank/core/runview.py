"""A run as the worker sees it: its metadata hash and its step records, read in one round trip.

Everything that writes run state is in ``lessonbank.core.runs``; this is the read side.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import redis
from pydantic import ValidationError

from lessonbank.core.constants import run_key, run_steps_key
from lessonbank.core.models import StepRecord

logger = logging.getLogger(__name__)


def json_list(raw: str | None) -> list[str]:
    """A JSON list of strings from a run hash field ([] when absent or malformed)."""
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(item) for item in value] if isinstance(value, list) else []


def json_dict(raw: str | bytes | None) -> dict[str, Any]:
    """A JSON object from a run hash field ({} when absent or malformed)."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass
class Run:
    """A run's metadata hash and its well-formed step records, in order."""

    run_id: str
    meta: dict[str, str] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    malformed: int = 0

    @property
    def state(self) -> str:
        return self.meta.get("state", "")

    @property
    def task(self) -> str:
        if self.meta.get("task"):
            return self.meta["task"]
        return next((s.task for s in self.steps if s.task), "")

    @property
    def outcome(self) -> str:
        """The recorded outcome: the run_end record's, else the metadata's, else ``unknown``."""
        for step in reversed(self.steps):
            if step.kind == "run_end" and step.outcome:
                return step.outcome
        return self.meta.get("outcome") or "unknown"

    @property
    def bank(self) -> str:
        return self.meta.get("bank", "")

    @property
    def arm(self) -> str:
        return "control" if self.meta.get("arm") == "control" else "lessons"

    @property
    def parent_run(self) -> str:
        """The run of the manager that called this managed agent's run ("" for a run of its own)."""
        return self.meta.get("parent_run", "")

    @property
    def given(self) -> list[str]:
        """Ids of the lessons the run was handed (empty for a control run or unknown)."""
        return json_list(self.meta.get("given"))

    @property
    def verdict(self) -> tuple[str, str]:
        """(verdict, source) recorded by a user or a check, else ("unknown", "none")."""
        verdict = self.meta.get("verdict", "")
        if verdict in ("success", "failure"):
            return verdict, self.meta.get("verdict_source", "user")
        return "unknown", "none"

    @property
    def judged(self) -> dict[str, str]:
        """What distillation went by: ``{"verdict", "source", "recipe"}`` (empty before distillation), and
        ``"late"``: who judged the run a success once it was distilled, when that kept its recipe and fixes."""
        return {k: str(v) for k, v in json_dict(self.meta.get("judged")).items()}

    @property
    def taught(self) -> list[str]:
        """Ids of the lessons the run's distillation wrote or reinforced (empty before it)."""
        return json_list(self.meta.get("taught"))

    @property
    def recounted(self) -> dict[str, bool]:
        """What the lessons it taught hold of the run after a later verdict (``runs.save_recount``); empty
        while they hold what distillation judged."""
        return {k: bool(v) for k, v in json_dict(self.meta.get("recounted")).items()}

    @property
    def distilled_upto(self) -> int:
        """The last step record (seq) a distillation read; -1 before any."""
        try:
            return int(self.meta.get("distilled_upto", "-1"))
        except ValueError:
            return -1

    @property
    def followup(self) -> bool:
        """A distilled run got late steps: one more distillation of just those is due."""
        return self.meta.get("followup") == "1"

    @property
    def check_pending(self) -> bool:
        """True while the agent process is still running the user's check on the final answer."""
        return self.meta.get("check") == "pending"


def _decode(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def load_run(client: redis.Redis, run_id: str) -> Run:
    """Read the run's metadata and step records; malformed records are skipped and counted."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(run_key(run_id))
    pipe.hgetall(run_steps_key(run_id))
    raw_meta, raw_steps = pipe.execute()
    run = Run(run_id=run_id, meta={_decode(k): _decode(v) for k, v in raw_meta.items()})
    records: list[StepRecord] = []
    for seq, data in raw_steps.items():
        try:
            record = StepRecord.from_json(data)
        except ValidationError:
            run.malformed += 1
            logger.warning("run %s: skipping malformed step record (field %s)", run_id, _decode(seq))
            continue
        if record.run_id != run_id:
            run.malformed += 1
            logger.warning("run %s: skipping step record of another run (field %s)", run_id, _decode(seq))
            continue
        records.append(record)
    run.steps = sorted(records, key=lambda r: r.seq)
    return run
