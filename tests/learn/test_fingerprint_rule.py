"""The fingerprints of observed shapes and failures, pinned with the rule they are computed by (``upgrade.RULE``): a
change to what they leave out fails here until the rule is raised, so that every bank marked as holding none of an
earlier rule (``workers.rekeyed``) is read for them again, and stored ones move to their new ids."""

from __future__ import annotations

from lessonbank.core.models import FailurePayload, ShapePayload
from lessonbank.learn import failures, shapes, upgrade


def _leaf(*words: str) -> dict[str, object]:
    return {"type": "str", "values": list(words)}


SHAPE = ShapePayload(tool="check_loan", records=["loans"], structure={
    "fields": [["approved", _leaf("yes")],
               ["loans", {"items": {"fields": [["state", _leaf("late", "ok")]], "more": False}}]],
    "more": False})
FAILURES = [
    FailurePayload(tool="get_sales", line="get_sales(region=<region>)", forms={"region": "a"},
                   error_type="TimeoutError", error="the request timed out after 30 s"),
    FailurePayload(tool="get_sales", line="get_sales(region=<region>)", forms={"region": "a"},
                   error_type="ValueError", error="unknown region '<region>'"),
]
PINNED = {
    "rule": "3",
    "shape": "54b278b89d8f8e24a990e5adee07f103",
    "failures": ["ddc8f42ba500ac5bf02639e4", "84d4c3f8f6d88357cdcf6c6d"],
}


def test_a_change_of_the_fingerprint_rule_raises_it() -> None:
    now = {"rule": upgrade.RULE, "shape": shapes.fingerprint_of(SHAPE),
           "failures": [failures.fingerprint_of(failures.kept_now(payload)) for payload in FAILURES]}
    assert now == PINNED, "the fingerprint rule changed: raise upgrade.RULE, then pin the new fingerprints here"
