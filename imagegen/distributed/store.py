"""The jobs of a distributed deployment, in Redis, where every web replica and worker reads
and writes them.

Why Redis and not Celery's result backend or the MongoDB of the todos: Redis is already the
broker (one more service would be one more thing to run and to lose), and a job's life needs
what a result backend lacks: transitions that check the state they start from (a cancel racing
a worker's claim, two replicas finding the same worker lost), a per-job revision for waiting
on changes, a TTL key per running job as its heartbeat, and the queue's bound checked and
taken in one step. Each transition is one Lua script, which Redis runs atomically.

Keys (under `imagegen:`): `job:<id>` a hash per job (its fields below, `rev` counting every
change a client can see); `queued` the waiting jobs in submission order (a sorted set by a
sequence number: `ZRANK` is the position); `recent` every remembered job in the same order;
`beat:<id>` the running job's heartbeat, refreshed by its worker with a TTL; `worker:<name>`
a worker's own heartbeat and model state; `idle` the workers waiting for work; `pull` the
count of pulls asked for, which every worker follows; `unfinished` a list with one entry
per queued or running job, the length KEDA scales the workers on (Celery's own list holds
only the waiting messages: scaling on it would remove workers in the middle of their jobs).
The pub/sub channel `changed` announces each transition, for the requests waiting on a job.
"""

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import redis
from redis.commands.core import Script

from config.errors import ServiceError
from imagegen.errors import WorkerLost
from imagegen.generation.execution import Outcome
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import CANCELLING, JobState, JobView, job_progress
from imagegen.generation.render import GenerationRequest

PREFIX = "imagegen:"
QUEUED, RECENT, SEQUENCE, IDLE, WORKERS, PULLS, UNFINISHED = (
    PREFIX + name
    for name in ("queued", "recent", "sequence", "idle", "workers", "pull", "unfinished")
)
FINISHED_STATES = ("succeeded", "failed", "cancelled")
# How the error of a job failed as lost begins (fail_lost): its answer is WorkerLost's.
LOST = "worker lost: "
# The pub/sub channel every transition is announced on: the job's id, or EVERY_JOB
# (imagegen.distributed.changes).
CHANGED = PREFIX + "changed"
EVERY_JOB = "*"


def job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def beat_key(job_id: str) -> str:
    return f"{PREFIX}beat:{job_id}"


def worker_key(name: str) -> str:
    return f"{PREFIX}worker:{name}"


# Every queued job's position moves when one ahead of it leaves the queue: their revisions
# grow with it, so a client waiting for a change of one of them sees it.
_BUMP_QUEUED = """
local function bump_queued(prefix, queued)
  for _, other in ipairs(redis.call('ZRANGE', queued, 0, -1)) do
    redis.call('HINCRBY', prefix .. 'job:' .. other, 'rev', 1)
  end
end
"""

# The bound: jobs waiting beyond the ones idle workers are about to take (a job queued
# while a worker is idle is about to run, not waiting), as the in-process queue counts.
# Workers whose heartbeat is gone are not idle, whatever they said last.
_SUBMIT = """
local prefix, id, queue_max, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local idle = 0
for _, name in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if redis.call('EXISTS', prefix .. 'worker:' .. name) == 1 then
    idle = idle + 1
  else
    redis.call('SREM', KEYS[4], name)
  end
end
if redis.call('ZCARD', KEYS[1]) - idle >= queue_max then
  return 0
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', prefix .. 'job:' .. id, 'seq', seq, 'rev', 1, unpack(ARGV, 5))
redis.call('ZADD', KEYS[1], seq, id)
redis.call('ZADD', KEYS[2], seq, id)
redis.call('RPUSH', prefix .. 'unfinished', id)
local finished = 0
for _, other in ipairs(redis.call('ZREVRANGE', KEYS[2], 0, -1)) do
  local state = redis.call('HGET', prefix .. 'job:' .. other, 'state')
  if state == 'succeeded' or state == 'failed' or state == 'cancelled' or not state then
    finished = finished + 1
    if finished > keep or not state then
      redis.call('ZREM', KEYS[2], other)
      redis.call('DEL', prefix .. 'job:' .. other)
    end
  end
end
return 1
"""

# A worker takes the oldest waiting job, whichever message woke it: the queue's order is
# this set's, so positions are exact with any number of workers.
_CLAIM = (
    _BUMP_QUEUED
    + """
local prefix, worker, now, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then
  return false
end
local id = popped[1]
local key = prefix .. 'job:' .. id
redis.call('HSET', key, 'state', 'running', 'started_at', now, 'phase', 'loading the model',
           'worker', worker)
redis.call('HINCRBY', key, 'rev', 1)
redis.call('SET', prefix .. 'beat:' .. id, worker, 'PX', ttl)
redis.call('SREM', KEYS[2], worker)
bump_queued(prefix, KEYS[1])
return id
"""
)

# A running job's change from its worker; nothing once the job is no longer running (it was
# found lost). Answers -1 then, else 1 when a cancel was asked for, else 0.
_UPDATE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then
  return -1
end
if #ARGV > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
redis.call('HINCRBY', KEYS[1], 'rev', 1)
if redis.call('HGET', KEYS[1], 'cancel') == '1' then
  return 1
end
return 0
"""

_FINISH = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('DEL', KEYS[2])
redis.call('LREM', KEYS[3], 0, redis.call('HGET', KEYS[1], 'id'))
return 1
"""

_CANCEL = (
    _BUMP_QUEUED
    + """
local prefix, id, now = ARGV[1], ARGV[2], ARGV[3]
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return false
end
if state == 'queued' then
  redis.call('ZREM', KEYS[2], id)
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'phase', 'cancelled before it ran',
             'finished_at', now)
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
  redis.call('LREM', prefix .. 'unfinished', 0, id)
  bump_queued(prefix, KEYS[2])
elseif state == 'running' and redis.call('HGET', KEYS[1], 'cancel') ~= '1' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
return state
"""
)

# A running job whose heartbeat is gone: its worker died (or froze past the TTL). Checked and
# rewritten in one step, so of two replicas reading it at once only one rewrites it.
_LOST = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'failed', 'phase', 'failed', 'error', ARGV[2],
           'finished_at', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('LREM', KEYS[3], 0, redis.call('HGET', KEYS[1], 'id'))
return 1
"""


def decoded(reply: bytes | str) -> str:
    """A string reply as str. The client decodes no replies (connection.redis_client), so it is
    bytes; redis-py types a reply `bytes | str` whichever way a client is set."""
    return reply.decode() if isinstance(reply, bytes) else reply


def now_text() -> str:
    return datetime.now(UTC).isoformat()


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def failure_text(error: ServiceError) -> str:
    return json.dumps(
        {"status": error.status, "message": error.message, "retry_after": error.retry_after}
    )


def outcome_fields(outcome: Outcome) -> dict[str, str]:
    """A finished job's outcome as the fields of its hash (what _view reads back)."""
    fields = {"state": outcome.state.value, "phase": outcome.phase}
    if outcome.image is not None:
        fields["image"] = outcome.image.model_dump_json()
    if outcome.error is not None:
        fields["error"] = outcome.error
    if outcome.failure is not None:
        fields["failure"] = failure_text(outcome.failure)
    return fields


def failure_from_text(text: str | None) -> ServiceError | None:
    """The ServiceError a worker's job failed with, as the web replica raises it (its status,
    message and Retry-After: what the answer is made of)."""
    if not text:
        return None
    data = json.loads(text)
    error = ServiceError(data["message"], retry_after=data["retry_after"])
    error.status = data["status"]
    return error


def _failure(fields: dict) -> ServiceError | None:
    """What a synchronous request for the job raises: what its worker recorded, or for a job
    failed as lost (fail_lost's error) WorkerLost, a 503 a retry can help."""
    if recorded := failure_from_text(_text(fields, "failure")):
        return recorded
    error = _text(fields, "error")
    if _text(fields, "state") == JobState.FAILED.value and error and error.startswith(LOST):
        return WorkerLost(error)
    return None


@dataclass(frozen=True)
class Claimed:
    job_id: str
    request: GenerationRequest
    created_at: datetime
    started_at: datetime


class JobStore:
    """The atomic reads and transitions of jobs in Redis; the web board and the workers both
    go through it."""

    def __init__(self, client: redis.Redis, *, heartbeat_ttl: float) -> None:
        self.redis = client
        self.heartbeat_ttl = heartbeat_ttl
        self._submit = client.register_script(_SUBMIT)
        # Every transition a waiting client can see is announced (_announced); a claim or a
        # cancel moves the queue, so every queued job's position with it.
        self._claim = self._announced(client.register_script(_CLAIM), every_job=True)
        self._update = self._announced(client.register_script(_UPDATE))
        self._finish = self._announced(client.register_script(_FINISH))
        self._cancel = self._announced(client.register_script(_CANCEL), every_job=True)
        self._lost = self._announced(client.register_script(_LOST))

    def _announced(self, script: Script, *, every_job: bool = False) -> Callable[..., Any]:
        """The transition `script`, then its job announced on CHANGED (its id, the job hash
        being its first key; or EVERY_JOB), for the requests waiting on it
        (imagegen.distributed.changes). The one place that notifies. An announcement that
        fails is not the transition's failure: waiters read their job every second anyway."""

        def run(*, keys: list[str], args: list[Any]) -> Any:
            result = script(keys=keys, args=args)
            changed = EVERY_JOB if every_job else keys[0].removeprefix(job_key(""))
            with contextlib.suppress(redis.RedisError):
                self.redis.publish(CHANGED, changed)
            return result

        return run

    @property
    def ttl_ms(self) -> int:
        return int(self.heartbeat_ttl * 1000)

    # -- the web side -----------------------------------------------------------------------

    def add(
        self,
        job_id: str,
        request: GenerationRequest,
        *,
        owner: str | None,
        batch: str | None,
        queue_max: int,
        keep: int,
    ) -> bool:
        """Queues the job unless the shared queue is full; False when it is."""
        fields: dict[str, str | int] = {
            "id": job_id,
            "request": request.model_dump_json(),
            "owner": owner or "",
            "batch": batch or "",
            "state": JobState.QUEUED.value,
            "phase": "waiting for its turn",
            "created_at": now_text(),
            "step": 0,
            "steps": 0,
        }
        flat = [item for pair in fields.items() for item in pair]
        keys = [QUEUED, RECENT, SEQUENCE, IDLE]
        return bool(self._submit(keys=keys, args=[PREFIX, job_id, queue_max, keep, *flat]))

    def forget(self, job_id: str) -> None:
        """Takes back a job whose message could not be sent (it would never run)."""
        with self.redis.pipeline() as pipe:
            # One call a line: redis-py types a pipeline's commands as the client's (their
            # replies), not as the pipeline they return.
            pipe.zrem(QUEUED, job_id)
            pipe.zrem(RECENT, job_id)
            pipe.lrem(UNFINISHED, 0, job_id)
            pipe.delete(job_key(job_id))
            pipe.execute()

    def cancel(self, job_id: str) -> str | None:
        """The state the job was in when asked (None: unknown). A queued job is cancelled
        and never runs; a running one is marked: its worker reads the mark with its next
        heartbeat (within a second) or step, and stops at the model's next block."""
        state = self._cancel(keys=[job_key(job_id), QUEUED], args=[PREFIX, job_id, now_text()])
        return state.decode() if state else None

    def view(self, job_id: str) -> JobView | None:
        return self.views([job_id])[0]

    def views(self, job_ids: list[str]) -> list[JobView | None]:
        """Each job as one consistent picture (its fields, position and heartbeat read in one
        transaction). A running job whose heartbeat is gone is failed here, once."""
        raw = self._read(job_ids)
        lost = [
            job_id
            for job_id, (fields, _, beating) in zip(job_ids, raw, strict=True)
            if fields.get(b"state") == b"running" and not beating
        ]
        if lost:
            for job_id in lost:
                self.fail_lost(job_id)
            raw = self._read(job_ids)
        return [_view(fields, rank) if fields else None for fields, rank, _ in raw]

    def revision(self, job_id: str) -> int | None:
        value = self.redis.hget(job_key(job_id), "rev")
        return None if value is None else int(value)

    def unfinished_ids(self) -> list[str]:
        """Oldest first: the jobs queued or running, in the order they were submitted."""
        return [decoded(i) for i in cast(list[bytes], self.redis.lrange(UNFINISHED, 0, -1))]

    def recent_ids(self, limit: int | None = None) -> list[str]:
        """Newest first."""
        end = -1 if limit is None else limit - 1
        # Member names only (no WITHSCORES), undecoded (see decoded); redis-py's type for every
        # form of the reply also holds (member, score) pairs.
        members = cast(list[bytes], self.redis.zrevrange(RECENT, 0, end))
        return [i.decode() for i in members]

    def fail_lost(self, job_id: str) -> bool:
        message = (
            f"{LOST}job {job_id} was running on a worker whose heartbeat stopped "
            f"(no sign of it for {self.heartbeat_ttl:g} s, JOB_HEARTBEAT_TTL); it was not "
            "run again"
        )
        keys = [job_key(job_id), beat_key(job_id), UNFINISHED]
        return bool(self._lost(keys=keys, args=[now_text(), message]))

    def _read(self, job_ids: list[str]) -> list[tuple[dict, int | None, bool]]:
        with self.redis.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.hgetall(job_key(job_id))
                pipe.zrank(QUEUED, job_id)
                pipe.exists(beat_key(job_id))
            replies = pipe.execute()
        return [(replies[i], replies[i + 1], replies[i + 2]) for i in range(0, len(replies), 3)]

    # -- the worker side --------------------------------------------------------------------

    def claim(self, worker: str) -> Claimed | None:
        """Takes the oldest waiting job for this worker (running, with its heartbeat)."""
        now = now_text()
        job_id = self._claim(keys=[QUEUED, IDLE], args=[PREFIX, worker, now, self.ttl_ms])
        if job_id is None:
            return None
        job_id = job_id.decode()
        request, created = self.redis.hmget(job_key(job_id), "request", "created_at")
        if request is None or created is None:  # add writes both; only forget removes them
            raise LookupError(f"job {job_id} was claimed without its request")
        return Claimed(
            job_id=job_id,
            request=GenerationRequest.model_validate_json(request),
            created_at=datetime.fromisoformat(decoded(created)),
            started_at=datetime.fromisoformat(now),
        )

    def update(self, job_id: str, **fields: Any) -> int:
        """-1: the job is no longer running here (found lost); 1: a cancel was asked for."""
        flat = [item for pair in fields.items() for item in pair]
        return self._update(keys=[job_key(job_id)], args=flat)

    def finish(self, job_id: str, **fields: Any) -> bool:
        fields["finished_at"] = now_text()
        flat = [item for pair in fields.items() for item in pair]
        return bool(self._finish(keys=[job_key(job_id), beat_key(job_id), UNFINISHED], args=flat))

    def beat(self, job_id: str, worker: str) -> bool:
        """Refreshes the running job's heartbeat; True when the job is to stop (a cancel was
        asked for, or it is no longer running: found lost), read in the same round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(beat_key(job_id), worker, px=self.ttl_ms)
            pipe.hmget(job_key(job_id), "state", "cancel")
            _, (state, cancel) = pipe.execute()
        return state != b"running" or cancel == b"1"


def _text(fields: dict, name: str) -> str | None:
    value = fields.get(name.encode())
    return value.decode() if value else None


def _field(fields: dict, name: str) -> str:
    """A field every job's hash has from the start (add writes it)."""
    return fields[name.encode()].decode()


def _view(fields: dict, rank: int | None) -> JobView:
    state = JobState(_field(fields, "state"))
    started, finished = _time(_text(fields, "started_at")), _time(_text(fields, "finished_at"))
    denoise_started = _text(fields, "denoise_started")  # the worker's wall clock
    progress = job_progress(
        state=state,
        step=int(_text(fields, "step") or 0),
        steps=int(_text(fields, "steps") or 0),
        started_at=started,
        finished_at=finished,
        now=datetime.now(UTC),
        denoise_seconds=time.time() - float(denoise_started) if denoise_started else None,
    )
    phase = _text(fields, "phase") or ""
    if state is JobState.RUNNING and _text(fields, "cancel") == "1":
        phase = CANCELLING
    image = _text(fields, "image")
    return JobView(
        id=_field(fields, "id"),
        state=state,
        position=rank + 1 if state is JobState.QUEUED and rank is not None else None,
        phase=phase,
        progress=progress,
        parameters=GenerationRequest.model_validate_json(_field(fields, "request")),
        created_at=datetime.fromisoformat(_field(fields, "created_at")),
        started_at=started,
        finished_at=finished,
        error=_text(fields, "error"),
        image=ImageRecord.model_validate_json(image) if image else None,
        owner=_text(fields, "owner"),
        batch=_text(fields, "batch"),
        failure=_failure(fields),
        revision=int(_text(fields, "rev") or 0),
    )
