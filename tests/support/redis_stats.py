"""What a Redis says of itself, for tests that count the commands they cause."""

from __future__ import annotations

import redis


def commands_processed(client: redis.Redis) -> int:
    """The commands the Redis has run so far (``INFO stats``; the INFO itself counts once)."""
    return int(client.info("stats")["total_commands_processed"])
