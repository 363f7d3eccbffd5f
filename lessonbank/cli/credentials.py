"""What the configured credentials may do, for ``lessonbank status``: agents should hold the ``agent`` Redis user
(``deploy/redis/users.acl.template``) and Qdrant's read-only key, so that nothing an agent runs can delete a bank.

Both checks change nothing: Redis is asked the length of the store's admin queue (a user without that key is
refused before the command runs), Qdrant to apply an empty list of alias changes (refused with 403 for a
read-only key, a no-op for an admin one).
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from lessonbank.core.constants import STORE_ADMIN_REQUESTS_KEY
from lessonbank.core.settings import Settings

logger = logging.getLogger(__name__)

PROBE_TIMEOUT = 5


def redis_can_write_banks(client: redis.Redis) -> bool | None:
    """Can this Redis user send writes and deletes to the lesson store (None: Redis did not say)?"""
    try:
        client.llen(STORE_ADMIN_REQUESTS_KEY)
    except redis.exceptions.NoPermissionError:
        return False
    except redis.RedisError as e:
        logger.info("cannot tell what the Redis user may do: %s", e)
        return None
    return True


def qdrant_can_write(settings: Settings) -> bool | None:
    """Can the Qdrant key write (None: no Qdrant server configured, or it did not say)?"""
    if not settings.qdrant_url:
        return None
    from qdrant_client import QdrantClient
    from qdrant_client.http.exceptions import UnexpectedResponse

    key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    client = QdrantClient(url=settings.qdrant_url, api_key=key, timeout=PROBE_TIMEOUT, check_compatibility=False)
    try:
        client.update_collection_aliases(change_aliases_operations=[])
    except UnexpectedResponse as e:
        if e.status_code in (401, 403):
            return False
        logger.info("cannot tell what the Qdrant key may do: %s", e)
        return None
    except Exception as e:  # noqa: BLE001 (a server away or not Qdrant: no answer either way)
        logger.info("cannot tell what the Qdrant key may do: %s", e)
        return None
    finally:
        client.close()
    return True


def credentials(client: redis.Redis, settings: Settings) -> dict[str, Any]:
    """Both answers, and the warning ``status`` prints when these credentials can delete a bank."""
    found: dict[str, Any] = {"redis_can_write_banks": redis_can_write_banks(client),
                             "qdrant_can_write": qdrant_can_write(settings)}
    admin = [what for what, key in (("the Redis user", "redis_can_write_banks"), ("the Qdrant key", "qdrant_can_write"))
             if found[key]]
    found["warning"] = (f"{' and '.join(admin)} can delete banks: fine for workers and the CLI, not for agents (give "
                        "them the `agent` Redis user and Qdrant's read-only key: docs/deploy.md)") if admin else ""
    return found
