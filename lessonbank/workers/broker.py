"""The broker transport: kombu's Redis transport, surviving a Redis outage while a task is in hand, and a Redis
that refuses writes as a message is taken or acknowledged.

When the broker connection drops while a late-acknowledged task runs, the worker closes the connection
and its channel tries to put the task's message back, through a connection it has just detached from
(kombu 5.x): ``AttributeError: 'NoneType' object has no attribute 'hostname'``, which is not a
connection error, so the consumer treats it as unrecoverable and the worker stops consuming for good.
Here that case is the connection error it is: the worker reconnects, the task in hand goes on, and its
message, still in the broker's unacknowledged set, comes back after the visibility timeout (finding its
run done) unless the reconnecting channel restores it first.

A message taken off the queue is noted as in the worker's hands (kombu's unacknowledged set) at once; when Redis
refuses that write (full with ``noeviction``, or a read-only replica), kombu raised and the worker stopped for good,
the message gone with it; so it did when Redis refused the acknowledgement of a task done (a transaction). Here
each is tried again, the message held in memory, with a backoff (1 s doubling to 30 s), until Redis takes it or
the worker is asked to stop; consuming waits meanwhile (nothing could be written anyway). A message lost all the
same (the worker stopped first) is sent again by the sweeper.

Importing this module makes it the transport of ``redis://`` and ``rediss://`` broker URLs in the process
(kombu's transport aliases), so the URL, Flower and the logs still say ``redis``; the app module imports it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from celery.worker import state as worker_state
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

from lessonbank.core.connections import WRITES_REFUSED

logger = logging.getLogger(__name__)

REFUSED_FIRST, REFUSED_MAX = 1.0, 30.0  # seconds between two tries of a write Redis refused


class QoS(kombu_redis.QoS):
    def append(self, message: Any, delivery_tag: str) -> None:
        _until_taken("note a task taken off the queue", lambda: super(QoS, self).append(message, delivery_tag))

    def ack(self, delivery_tag: str) -> None:
        _until_taken("acknowledge a task", lambda: super(QoS, self).ack(delivery_tag))

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        _until_taken("put a task back", lambda: super(QoS, self).reject(delivery_tag, requeue=requeue))


def _until_taken(what: str, write: Callable[[], None]) -> None:
    """``write()``, tried again while Redis refuses writes (a transaction too: Redis refuses to queue even a
    deletion in one when it is full) until it takes it or the worker is asked to stop."""
    wait = REFUSED_FIRST
    while True:
        try:
            write()
            return
        except WRITES_REFUSED as e:
            if worker_state.should_stop is not None or worker_state.should_terminate is not None:
                raise
            logger.warning("Redis refuses writes (%s): cannot %s yet; trying again in %.0fs", e, what, wait)
            time.sleep(wait)
            wait = min(wait * 2, REFUSED_MAX)


class Channel(kombu_redis.Channel):
    QoS = QoS

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:  # the connection was closed: nothing to connect with
            raise redis.ConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel


for _scheme in ("redis", "rediss"):
    TRANSPORT_ALIASES[_scheme] = f"{__name__}:Transport"
