"""API keys' per-minute counts in Redis, so `--per-minute` holds across replicas."""

import time

import redis

from imagegen.distributed.store import PREFIX
from imagegen.generation.rates import WINDOW_SECONDS, window

# Checked and counted in one step: two replicas never both take the last image of a window.
_TAKE = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + tonumber(ARGV[1]) > tonumber(ARGV[2]) then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


class RedisRates:
    def __init__(self, client: redis.Redis) -> None:
        self._take = client.register_script(_TAKE)

    def take(self, key: str, count: int, limit: int) -> int | None:
        index, remaining = window(time.time())
        counter = f"{PREFIX}rate:{index}:{key}"
        taken = self._take(keys=[counter], args=[count, limit, WINDOW_SECONDS * 2])
        return None if taken else remaining
