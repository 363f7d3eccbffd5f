"""What every CLI command receives in ``ctx.obj``: settings, and clients built on first use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click
import redis

from lessonbank.core.connections import create_redis, masked_url
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings


@dataclass
class CliContext:
    settings: Settings
    _redis: redis.Redis | None = field(default=None, repr=False)

    def redis(self) -> redis.Redis:
        """A Redis client that has answered a PING, or a one-line ClickException."""
        if self._redis is None:
            try:
                client = create_redis(self.settings, "cli")
                client.ping()
            except ConfigurationError as e:
                raise click.ClickException(str(e)) from e
            except redis.RedisError as e:
                raise click.ClickException(f"Redis at {masked_url(self.settings.redis_url)} is unreachable: {e}") from e
            self._redis = client
        return self._redis


pass_cli = click.make_pass_decorator(CliContext)


def fail(message: str, cause: Any = None) -> click.ClickException:
    """A one-line error for the operator."""
    text = f"{message}: {cause}" if cause is not None else message
    return click.ClickException(text.splitlines()[0] if text else message)
