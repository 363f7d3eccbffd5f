"""Publishing a task by name: the message equals what Celery's send_task leaves in Redis."""

from __future__ import annotations

import base64
import json

import redis
from celery import Celery

from lessonbank.core.constants import DISTILL_TASK
from lessonbank.core.publish import publish, task_message

VOLATILE_HEADERS = {"id", "root_id", "origin", "ignore_result"}
VOLATILE_PROPERTIES = {"correlation_id", "delivery_tag", "reply_to"}


def strip_ids(message: dict) -> dict:
    message = json.loads(json.dumps(message))
    for key in VOLATILE_HEADERS:
        message["headers"].pop(key, None)
    for key in VOLATILE_PROPERTIES:
        message["properties"].pop(key, None)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def test_message_is_what_celery_send_task_writes(redis_url: str, redis_client: redis.Redis) -> None:
    app = Celery("reference", broker=redis_url, set_as_current=False)
    app.send_task(DISTILL_TASK, args=["bank-a", "run-1"], queue="q-ref")
    (celery_raw,) = redis_client.lrange("q-ref", 0, -1)
    publish(redis_client, "q-ours", DISTILL_TASK, ["bank-a", "run-1"])
    (ours_raw,) = redis_client.lrange("q-ours", 0, -1)
    celery_message, ours = json.loads(celery_raw), json.loads(ours_raw)
    assert ours["properties"]["delivery_info"] == {"exchange": "", "routing_key": "q-ours"}
    ours["properties"]["delivery_info"]["routing_key"] = "q-ref"
    assert strip_ids(ours) == strip_ids(celery_message)
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]


def test_task_id_and_pipeline(redis_client: redis.Redis) -> None:
    message = json.loads(task_message("some.task", [1, "two"], "q", task_id="fixed-id"))
    assert message["headers"]["id"] == "fixed-id" and message["headers"]["argsrepr"] == "[1, 'two']"
    pipe = redis_client.pipeline(transaction=True)
    pipe.set("marker", "1")
    publish(pipe, "q", "some.task", ["x"])
    assert redis_client.llen("q") == 0  # nothing until the transaction runs
    pipe.execute()
    assert redis_client.llen("q") == 1 and redis_client.get("marker") == b"1"
