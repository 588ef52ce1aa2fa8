"""The A1111 callers' chosen models in Redis, so every replica answers the same choice."""

import redis

from imagegen.distributed.store import PREFIX, decoded

CHOSEN = PREFIX + "checkpoints"  # a hash: scope -> repo id
SERVICE = "*"  # the whole service's scope (keys off); no key is named "*"


def _field(scope: str | None) -> str:
    return SERVICE if scope is None else f"key:{scope}"


class RedisCheckpoints:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def chosen(self, scope: str | None) -> str | None:
        value = self.redis.hget(CHOSEN, _field(scope))
        return None if value is None else decoded(value)

    def choose(self, scope: str | None, model_id: str) -> None:
        self.redis.hset(CHOSEN, _field(scope), model_id)
