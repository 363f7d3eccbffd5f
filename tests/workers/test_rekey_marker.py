"""The bank a run's writes read for observed facts of an earlier fingerprint rule, on a real embedded store and a
real Redis: a bank holding none is read at most once across runs (its marker, ``workers.rekeyed``, says so after),
one holding one is still upgraded, and a marker of an earlier rule reads the bank again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from lessonbank.cli.migrate import migrate_bank
from lessonbank.core import purge
from lessonbank.core.backup import BankBackup, restore_bank
from lessonbank.core.constants import DEFAULT_QUEUE, bank_rekeyed_key
from lessonbank.core.models import FailurePayload, recipe_id
from lessonbank.core.store.base import LessonStoreBase
from lessonbank.learn import consolidate, failures, shapes, upgrade
from lessonbank.workers.bank_writer import EVERY_LESSON
from lessonbank.workers.consolidate import Consolidator, Thresholds
from lessonbank.workers.rekeyed import RekeyMarker
from tests.workers.test_fingerprints_upgraded import BANK, active_shapes, observed, stored_earlier


@pytest.fixture
def store(embedded_store: LessonStoreBase) -> LessonStoreBase:
    return embedded_store


@pytest.fixture
def reads(store: LessonStoreBase, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many lessons each call of the store's ``list`` for every lesson read, one entry a call."""
    counted: list[int] = []
    listed: Callable[..., Any] = store.list

    def counting(*args: Any, **kwargs: Any) -> Any:
        found = listed(*args, **kwargs)
        if kwargs.get("limit") == EVERY_LESSON:
            counted.append(len(found))
        return found

    monkeypatch.setattr(store, "list", counting)
    return counted


def timed_out(region: str) -> FailurePayload:
    """A failure the current rule keeps, one per region named in its error."""
    return FailurePayload(tool="get_sales", line="get_sales(region=<region>)", forms={}, error_type="TimeoutError",
                          error=f"no answer from {region}")


def run(store: LessonStoreBase, client: redis.Redis, run_id: str, *facts: consolidate.Observed) -> None:
    """One run's observed facts written as the worker writes them, with the bank's marker."""
    writer = Consolidator(store, BANK, run_id, Thresholds(0.9, 0.6), rekeyed=RekeyMarker(client, BANK))
    for fact in facts:
        assert writer.add_observed(fact) is not None


def failed(region: str) -> consolidate.Observed:
    payload = timed_out(region)
    return consolidate.Observed(failures.TAG, failures.fingerprint_of(payload), (0,), failure=payload)


def shaped(approved: str, states: list[str]) -> consolidate.Observed:
    shape = observed(approved, states)[1]
    return consolidate.Observed(shapes.TAG, shape.fingerprint, shape.steps, shape=shape.payload)


def test_a_bank_of_the_current_rule_is_read_once_across_runs(store: LessonStoreBase, redis_client: redis.Redis,
                                                           reads: list[int]) -> None:
    store.upsert([consolidate.observed_lesson(BANK, failed("north"), "r0", verified=False)])
    run(store, redis_client, "r1", failed("south"), failed("east"))  # facts not stored by their id yet
    assert reads == [1]
    assert redis_client.get(bank_rekeyed_key(BANK)) == upgrade.RULE.encode()
    run(store, redis_client, "r2", failed("west"), shaped("no", ["ok"]))
    run(store, redis_client, "r3", failed("up"))
    assert reads == [1]  # not read again
    stored = [lesson for lesson in store.list(BANK, limit=100) if lesson.origin == "observed"]
    assert len(stored) == 6


def test_a_bank_holding_a_fact_of_an_earlier_rule_is_still_upgraded(store: LessonStoreBase,
                                                                   redis_client: redis.Redis,
                                                                   reads: list[int]) -> None:
    earlier = stored_earlier(store, "r-old", "yes", ["late", "ok"])
    redis_client.set(bank_rekeyed_key(BANK), "0")  # a marker of an earlier rule: the bank is read again
    run(store, redis_client, "r1", failed("south"))  # another fact: the earlier one stays, left to move
    assert reads == [1] and redis_client.get(bank_rekeyed_key(BANK)) == b"0"
    fact = shaped("no", ["ok", "ok"])
    run(store, redis_client, "r2", fact)
    assert reads == [1, 2]  # read again: the earlier one was left
    (lesson,) = active_shapes(store)
    assert lesson.id == recipe_id(BANK, fact.fingerprint, kind=shapes.TAG) and lesson.evidence == 2
    assert store.get(BANK, [earlier.id])[0].superseded_by == lesson.id
    assert redis_client.get(bank_rekeyed_key(BANK)) == upgrade.RULE.encode()  # none left once it moved
    run(store, redis_client, "r3", failed("east"))
    assert len(reads) == 2


def test_a_fact_whose_current_id_is_taken_leaves_nothing_to_read_for(store: LessonStoreBase,
                                                                    redis_client: redis.Redis,
                                                                    reads: list[int]) -> None:
    """A variant a user forgot stays apart from the lesson at its current id (as ``lessonbank migrate`` left it, its
    marker not written): no run moves it, so after one read none reads the bank for it."""
    stored_earlier(store, "r1", "yes", ["late", "ok"])
    forgot = stored_earlier(store, "r2", "no", ["ok"])
    store.set_status(BANK, [forgot.id], "forgotten", reason="forgotten by a user", cause="forgotten")
    assert migrate_bank(store, BANK)["moved"] == 1
    reads.clear()
    run(store, redis_client, "r3", failed("east"))
    assert reads == [3] and redis_client.get(bank_rekeyed_key(BANK)) == upgrade.RULE.encode()
    run(store, redis_client, "r4", failed("west"), shaped("no", ["ok"]))
    assert reads == [3]
    assert store.get(BANK, [forgot.id])[0].status == "forgotten"


def test_deleting_the_bank_removes_its_marker(redis_client: redis.Redis) -> None:
    RekeyMarker(redis_client, BANK).mark()
    assert RekeyMarker(redis_client, BANK).current()
    purge.delete_bank_data(redis_client, BANK, DEFAULT_QUEUE)
    assert not redis_client.exists(bank_rekeyed_key(BANK))


def test_a_read_of_the_bank_begun_before_a_restore_does_not_mark_it(store: LessonStoreBase,
                                                                   redis_client: redis.Redis) -> None:
    """A run reads its bank for facts of an earlier rule and finds none; the bank is restored from a backup holding
    one before the run sets the marker: the marker is not set, and the next run finds the restored fact and moves
    it."""
    earlier = stored_earlier(store, "r-old", "yes", ["late", "ok"])
    store.delete(BANK, [earlier.id])  # kept in the backup only
    marker = RekeyMarker(redis_client, BANK)
    assert not marker.current()  # the run looks, then reads the bank: nothing to move
    restore_bank(store, redis_client, BankBackup(BANK, lessons=[earlier]))  # meanwhile
    assert not marker.mark()  # the run's word comes after the restore: not taken
    assert not RekeyMarker(redis_client, BANK).current()
    fact = shaped("no", ["ok", "ok"])
    run(store, redis_client, "r-after", fact)  # the next run reads the bank and moves the restored fact
    (lesson,) = active_shapes(store)
    assert store.get(BANK, [earlier.id])[0].superseded_by == lesson.id
    assert redis_client.get(bank_rekeyed_key(BANK)) == upgrade.RULE.encode()
    fresh = RekeyMarker(redis_client, BANK)
    assert fresh.current() and fresh.mark()  # a read that saw the marker as it is sets it
