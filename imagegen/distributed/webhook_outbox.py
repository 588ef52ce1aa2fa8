"""The webhook outbox of distributed mode, in the jobs' Redis.

Each step that hands one thing to one replica is one script, so two replicas never both take
it. A claim moves a delivery CLAIM_LEASE seconds ahead, so a try cut off mid-way is due again
then. Keys: `watch`, `due` (by due time), `created`, `delivery:<id>`, `record:<job>`."""

import json
from dataclasses import asdict
from typing import Any

import redis

from imagegen.webhooks.outbox import (
    CLAIM_LEASE,
    Delivery,
    Watch,
    record_of,
    waiting_record,
)

PREFIX = "imagegen:webhooks:"
WATCH = PREFIX + "watch"
DUE = PREFIX + "due"
CREATED = PREFIX + "created"
RECORD_SECONDS = 7 * 86400

# KEYS: watch, due, created, delivery, record; ARGV: job, delivery JSON, due, created,
# record JSON, record TTL, delivery id.
_ENQUEUE = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SET', KEYS[4], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[7])
redis.call('SET', KEYS[5], ARGV[5], 'EX', ARGV[6])
return 1
"""

# KEYS: due; ARGV: now, limit, lease, delivery key prefix. The ids due, moved a lease ahead,
# with their JSON.
_CLAIM = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local found = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], ARGV[1] + ARGV[3], id)
  local body = redis.call('GET', ARGV[4] .. id)
  if body then table.insert(found, body) else redis.call('ZREM', KEYS[1], id) end
end
return found
"""


def _delivery_key(delivery_id: str) -> str:
    return f"{PREFIX}delivery:{delivery_id}"


def _record_key(job_id: str) -> str:
    return f"{PREFIX}record:{job_id}"


class RedisOutbox:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._enqueue = client.register_script(_ENQUEUE)
        self._claim = client.register_script(_CLAIM)

    def watch(self, watch: Watch) -> None:
        pipe = self.client.pipeline()
        pipe.set(_record_key(watch.job_id), json.dumps(waiting_record(watch)), ex=RECORD_SECONDS)
        pipe.hset(WATCH, watch.job_id, json.dumps(asdict(watch)))
        pipe.execute()

    def watches(self) -> list[Watch]:
        raw: dict[bytes, bytes] = self.client.hgetall(WATCH)  # type: ignore[assignment]
        return [Watch(**json.loads(value)) for value in raw.values()]

    def unwatch(self, job_id: str) -> None:
        self.client.hdel(WATCH, job_id)

    def enqueue(self, delivery: Delivery) -> bool:
        keys = [WATCH, DUE, CREATED, _delivery_key(delivery.id), _record_key(delivery.job_id)]
        record = json.dumps(record_of(delivery, "pending"))
        args: list[str | float] = [
            delivery.job_id, delivery.to_json(), delivery.due, delivery.created, record,
            RECORD_SECONDS, delivery.id,
        ]  # fmt: skip
        return bool(self._enqueue(keys=keys, args=args))

    def claim(self, now: float, limit: int) -> list[Delivery]:
        found = self._claim(keys=[DUE], args=[now, limit, CLAIM_LEASE, f"{PREFIX}delivery:"])
        return [Delivery.from_json(body) for body in found]

    def retry(self, delivery: Delivery) -> None:
        pipe = self.client.pipeline()
        pipe.set(_delivery_key(delivery.id), delivery.to_json())
        pipe.zadd(DUE, {delivery.id: delivery.due})
        pipe.set(_record_key(delivery.job_id), json.dumps(record_of(delivery, "pending")),
                 ex=RECORD_SECONDS)  # fmt: skip
        pipe.execute()

    def settle(self, delivery: Delivery, state: str) -> None:
        pipe = self.client.pipeline()
        pipe.set(_record_key(delivery.job_id), json.dumps(record_of(delivery, state)),
                 ex=RECORD_SECONDS)  # fmt: skip
        pipe.zrem(DUE, delivery.id)
        pipe.zrem(CREATED, delivery.id)
        pipe.delete(_delivery_key(delivery.id))
        pipe.execute()

    def record(self, job_id: str) -> dict[str, Any] | None:
        raw = self.client.get(_record_key(job_id))
        return None if raw is None else json.loads(raw)

    def pending(self) -> tuple[int, float | None]:
        count = self.client.zcard(DUE)
        oldest = self.client.zrange(CREATED, 0, 0, withscores=True)
        return int(count), (float(oldest[0][1]) if oldest else None)
