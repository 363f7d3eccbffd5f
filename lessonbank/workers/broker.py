"""The broker transport: kombu's Redis transport, surviving a Redis outage while a task is in hand.

When the broker connection drops while a late-acknowledged task runs, the worker closes the connection
and its channel tries to put the task's message back, through a connection it has just detached from
(kombu 5.x): ``AttributeError: 'NoneType' object has no attribute 'hostname'``, which is not a
connection error, so the consumer treats it as unrecoverable and the worker stops consuming for good.
Here that case is the connection error it is: the worker reconnects, the task in hand goes on, and its
message, still in the broker's unacknowledged set, comes back after the visibility timeout (finding its
run done) unless the reconnecting channel restores it first.

Importing this module makes it the transport of ``redis://`` and ``rediss://`` broker URLs in the process
(kombu's transport aliases), so the URL, Flower and the logs still say ``redis``; the app module imports it.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:  # the connection was closed: nothing to connect with
            raise redis.ConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel


for _scheme in ("redis", "rediss"):
    TRANSPORT_ALIASES[_scheme] = f"{__name__}:Transport"
