"""What in a Redis's configuration or state puts lessonbank's data at risk, in one line each (the worker says it
at start, ``lessonbank status`` every time): keys it may evict, data a restart would lose, writes it refuses."""

from __future__ import annotations

import redis

from lessonbank.core.connections import redis_text
from lessonbank.core.constants import PROBE_KEY


def _config(client: redis.Redis, pattern: str) -> dict[str, str] | None:
    """``CONFIG GET pattern`` as text, or None where ``CONFIG`` is not allowed (as on some managed Redis)."""
    try:
        found = client.config_get(pattern)
    except redis.ResponseError:
        return None
    return {redis_text(k): redis_text(v) for k, v in found.items()}


def eviction_risk(client: redis.Redis) -> str:
    """One line when this Redis may evict lessonbank's keys under memory pressure, else "" (no ``maxmemory``,
    ``noeviction``, or ``CONFIG`` not allowed). With ``allkeys-*`` it may drop the queue, a run in progress or
    its records; with ``volatile-*`` the keys that expire anyway: the steps a retry or ``lessons show`` reads,
    heartbeats, the store's replies. ``noeviction`` refuses writes instead, which the recorder spools and the
    worker retries."""
    config = _config(client, "maxmemory*")
    if config is None:
        return ""
    policy, limit = config.get("maxmemory-policy", ""), config.get("maxmemory", "0")
    if limit in ("", "0") or policy in ("", "noeviction"):
        return ""
    what = ("any key: the queue, runs in progress and their records" if policy.startswith("allkeys")
            else "keys that expire: the steps a retry reads, heartbeats, the store's replies")
    return (f"Redis may evict {what} when it reaches maxmemory {limit} bytes (maxmemory-policy {policy}); "
            f"set maxmemory-policy noeviction for lessonbank's Redis")


def persistence_risk(client: redis.Redis) -> str:
    """One line when this Redis keeps nothing on disk (neither AOF nor RDB snapshots), else "" (or ``CONFIG``
    not allowed): a restart then empties the queue, the runs waiting for distillation and the dead letters."""
    config = _config(client, "appendonly")
    saves = _config(client, "save")
    if config is None or saves is None:
        return ""
    if config.get("appendonly", "no") == "yes" or saves.get("save", "").strip():
        return ""
    return ("Redis keeps nothing on disk (appendonly no, no save points): a restart loses the queue, the runs "
            "waiting for distillation and the dead letters; set appendonly yes for lessonbank's Redis")


def writes_refused(client: redis.Redis) -> str:
    """Why this Redis refuses writes now (full, a read-only replica, ``MISCONF`` when it cannot save), or "" when it
    takes them or the caller may not write (an ACL: nothing is known then). One short-lived key is written."""
    try:
        client.set(PROBE_KEY, "1", px=1000)
    except redis.exceptions.NoPermissionError:
        return ""
    except redis.ResponseError as e:  # WRITES_REFUSED, and a refusal redis-py has no class for (MISCONF)
        return str(e)
    return ""
