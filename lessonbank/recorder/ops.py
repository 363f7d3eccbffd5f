"""The unit of delivery to Redis: one step record, the close of a run, or its check's verdict. Also the spool's
line format."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

OpKind = Literal["step", "close", "verdict"]
KINDS = ("step", "close", "verdict")


@dataclass(frozen=True)
class Op:
    """A step record to store (``step``), a run to close and hand to distillation (``close``), or the verdict of
    the run's check (``verdict``, handed over after the close).

    ``record`` is the step record JSON (for ``close``: the ``run_end`` record; for ``verdict``: a JSON object of
    the verdict's ``source``, ``note`` and ``ttl``, its ``outcome`` ``success``, ``failure`` or ``""`` when the
    check gave none). ``at`` is the unix time the op was made, so that a replay keeps the original times (a
    replayed verdict is then recognised and changes nothing). ``token`` identifies one close. ``extra`` holds the
    fields written into the run's hash with the op (``tools``, and what ``prepare_run`` gave).
    """

    op: OpKind
    bank: str
    run_id: str
    agent: str
    task: str
    seq: int
    record: str
    at: float
    outcome: str = ""
    token: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def to_line(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_line(cls, line: str) -> Op:
        """Parse one spool line; raises ValueError on anything that is not a valid op."""
        data = json.loads(line)
        if not isinstance(data, dict) or data.get("op") not in KINDS:
            raise ValueError("not a spool op")
        try:
            op = cls(**data)
        except TypeError as e:
            raise ValueError(f"bad spool op: {e}") from e
        if not isinstance(op.seq, int) or not op.run_id or not isinstance(op.record, str):
            raise ValueError("bad spool op fields")
        if not isinstance(op.extra, dict) or not all(isinstance(v, str) for v in op.extra.values()):
            raise ValueError("bad spool op extra fields")
        return op
