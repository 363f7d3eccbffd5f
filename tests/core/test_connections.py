"""The one Redis client factory and URL masking."""

from __future__ import annotations

import pytest

from lessonbank.core.connections import create_redis, masked_url
from lessonbank.core.exceptions import ConfigurationError
from lessonbank.core.settings import Settings
from tests.fixtures.redis_server import RedisServer


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:s3cret@redis:6379/0", "redis://:**@redis:6379/0"),
        ("redis://user:s3cret@redis:6379/0", "redis://user:**@redis:6379/0"),
        ("rediss://default:p%40ss@host/1", "rediss://default:**@host/1"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://user@host/0", "redis://user@host/0"),
        ("redis://:pw@[::1]:6379/0", "redis://:**@[::1]:6379/0"),  # an IPv6 host keeps its brackets
        ("redis://user:pw@[fe80::1%25eth0]/0", "redis://user:**@[fe80::1%25eth0]/0"),
        ("redis://:pw@host:99999/0", "redis://:**@host:99999/0"),  # a port out of range is no reason to crash
        ("redis://:pw@host:port/0", "redis://:**@host:port/0"),
        ("redis://:pw@[::1:6379/0", "<unparseable URL>"),
    ],
)
def test_masked_url_hides_the_password(url: str, masked: str) -> None:
    assert masked_url(url) == masked


@pytest.mark.parametrize(
    ("role", "socket_timeout", "connect_timeout", "retries"),
    [("recorder", 0.25, 0.25, 0), ("agent", 3.0, 1.0, 0), ("service", 30.0, 5.0, None), ("cli", 10.0, 3.0, None)],
)
def test_roles_get_their_timeouts(role, socket_timeout, connect_timeout, retries) -> None:
    client = create_redis(Settings(_env_file=None, redis_url="redis://127.0.0.1:1/0"), role)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == socket_timeout and kwargs["socket_connect_timeout"] == connect_timeout
    if retries is not None:
        assert kwargs["retry"].get_retries() == retries


def test_a_url_without_a_scheme_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="LESSONBANK_REDIS_URL"):
        create_redis(Settings(_env_file=None, redis_url="localhost:6379"), "cli")


def test_redis_trouble_names_what_went_wrong(redis_url: str) -> None:
    """A wrong password or a missing permission is no "unreachable"; nor is a command Redis refused."""
    import redis

    from lessonbank.core.connections import redis_trouble
    from tests.fixtures.redis_server import free_port

    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "SETUSER", "limited", "on", ">right-pw", "~*", "-@all", "+auth", "+hello")
    host = redis_url.split("//", 1)[1].split("/", 1)[0]
    seen = {}
    try:
        for case, url in (("wrong password", f"redis://limited:wrong-pw@{host}/0"),
                          ("no permission", f"redis://limited:right-pw@{host}/0"),
                          ("unreachable", f"redis://127.0.0.1:{free_port()}/0")):
            client = create_redis(Settings(_env_file=None, redis_url=url), "cli")
            with pytest.raises(redis.RedisError) as raised:
                client.get("some-key")
            seen[case] = redis_trouble(raised.value)
        with pytest.raises(redis.RedisError) as raised:
            admin.execute_command("NO-SUCH-COMMAND")
        seen["refused command"] = redis_trouble(raised.value)
    finally:
        admin.execute_command("ACL", "DELUSER", "limited")
        admin.close()
    assert seen["wrong password"].startswith("Redis refused the credentials")
    assert seen["no permission"].startswith("Redis refused the credentials")
    assert seen["unreachable"] == "Redis unreachable"
    assert seen["refused command"] == "Redis failed the command"


def test_eviction_risk_says_what_redis_may_drop(own_redis: RedisServer) -> None:
    """lessonbank's Redis must not evict: a queue or a run in progress would vanish without a word."""
    from lessonbank.core.redis_health import eviction_risk

    admin = own_redis.client()
    assert eviction_risk(admin) == ""  # the default: no maxmemory
    admin.config_set("maxmemory-policy", "allkeys-lru")
    assert eviction_risk(admin) == ""  # a policy without a limit never evicts
    admin.config_set("maxmemory", "100mb")
    risk = eviction_risk(admin)
    assert "the queue, runs in progress" in risk and "maxmemory-policy allkeys-lru" in risk
    assert risk.endswith("set maxmemory-policy noeviction for lessonbank's Redis")
    admin.config_set("maxmemory-policy", "volatile-ttl")
    assert "keys that expire" in eviction_risk(admin)
    admin.config_set("maxmemory-policy", "noeviction")
    assert eviction_risk(admin) == ""
    admin.execute_command("ACL", "SETUSER", "default", "-config")  # CONFIG refused, as on some managed Redis
    assert eviction_risk(admin) == ""
