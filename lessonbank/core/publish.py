"""The one way to publish a task by name: a Celery protocol-2 message pushed onto the queue's Redis list.

This is exactly what ``celery.Celery.send_task`` leaves in Redis through kombu's Redis transport
(default exchange, routing key = queue name, priority 0, JSON body base64-encoded), written with one
``LPUSH``, so processes that only hand work to the workers (the agent, the CLI) never import Celery
or kombu, and a publish can share a Redis transaction with the state change that caused it.
A real ``celery worker`` consumes these messages (tested against one).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import redis

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def task_message(name: str, args: Sequence[Any], queue: str, task_id: str | None = None) -> str:
    """The JSON kombu's Redis transport stores for ``send_task(name, args=args, queue=queue)``."""
    task_id = task_id or str(uuid.uuid4())
    body = json.dumps([list(args), {}, _EMBED]).encode("utf-8")
    envelope = {
        "body": base64.b64encode(body).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": name,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": repr(list(args)),
            "kwargsrepr": "{}",
            "origin": f"{os.getpid()}@{socket.gethostname()}",
            "ignore_result": None,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    return json.dumps(envelope)


def publish(
    client: redis.Redis | redis.client.Pipeline, queue: str, name: str, args: Sequence[Any], task_id: str | None = None
) -> None:
    """Queue task ``name(*args)`` for the workers consuming ``queue``.

    On a pipeline the push joins that pipeline (and its transaction, if it has one). Raises redis
    errors as they come: the caller decides whether to spool, retry or report.
    """
    client.lpush(queue, task_message(name, args, queue, task_id))
