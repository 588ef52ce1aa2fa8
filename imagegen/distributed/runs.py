"""The shared-run registry in Redis, so a retry sent to another replica joins its first attempt.

A hash per request identity and a waiter count per run. Both expire GEN_SYNC_TIMEOUT plus a
minute after the last join, so a dead replica leaves nothing for long. A kept run expires
rather than being removed."""

import json

import redis
from redis.lock import Lock

from imagegen.distributed.store import decoded
from imagegen.generation.shared_runs import RunRegistry, SharedRun

RUN = "imagegen:run:{key}"
WAITERS = "imagegen:run-waiters:{token}"
LOCK = "imagegen:run-lock:{key}"

# Removes the key's run only if it is still this one.
_DELETE_IF_CURRENT = """
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisRuns(RunRegistry):
    """One request at a time per key (a Redis lock), so two replicas never both submit."""

    def __init__(self, client: redis.Redis, ttl_seconds: int) -> None:
        self.client = client
        self.ttl = ttl_seconds
        self._delete_if_current = client.register_script(_DELETE_IF_CURRENT)

    def _find(self, key: str, keep: bool) -> SharedRun | None:
        stored = self.client.hgetall(RUN.format(key=key))
        if not stored:
            return None
        jobs = json.loads(stored[b"jobs"])
        return SharedRun(key, jobs, decoded(stored[b"token"]), kept=keep)

    def _register(self, run: SharedRun) -> None:
        run_key = RUN.format(key=run.key)
        with self.client.pipeline() as pipe:  # MULTI: both fields and the expiry
            pipe.hset(run_key, mapping={"token": run.token, "jobs": json.dumps(run.jobs)})
            pipe.expire(run_key, self.ttl)
            pipe.execute()

    def _withdraw(self, run: SharedRun) -> None:
        self._delete_if_current(keys=[RUN.format(key=run.key)], args=[run.token])

    def _join(self, run: SharedRun) -> None:
        with self.client.pipeline() as pipe:  # MULTI: all of it, expiry included, or none
            waiters = WAITERS.format(token=run.token)
            # One call a line: redis-py types a pipeline's commands as the client's.
            pipe.incr(waiters)
            pipe.expire(waiters, self.ttl)
            pipe.expire(RUN.format(key=run.key), self.ttl)
            pipe.execute()

    def leave(self, run: SharedRun) -> bool:
        """Under the key's lock. Else a twin joining just before the removal would wait on
        cancelled jobs."""
        waiters = WAITERS.format(token=run.token)
        with self._locked(run.key):
            if self.client.decr(waiters) > 0:
                return False
            self.client.delete(waiters)
            if not run.kept:
                self._delete_if_current(keys=[RUN.format(key=run.key)], args=[run.token])
            return True

    def _locked(self, key: str) -> Lock:
        return self.client.lock(LOCK.format(key=key), timeout=60, blocking_timeout=60)
