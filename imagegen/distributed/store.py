"""The jobs of a distributed deployment, in Redis, read by every replica and worker.

Redis is already the broker. A job needs what a result backend lacks. Transitions check the
state they start from. Each job has a revision, and each running job a heartbeat. Each
transition is one Lua script. A submit applies queue_policy to the queue read under WATCH, in
one MULTI. A claim applies queue_policy.pick to the queue one script reads, and takes the chosen
job by compare-and-set. The keys are listed in docs/distributed.md, "Redis keys".

Heartbeats run on the store's own `clock`, not TTL keys. A heartbeat missed while the store
was away says nothing about the worker. So time counts only while the store is seen reachable.
After an outage, every worker has a whole JOB_HEARTBEAT_TTL to beat again."""

import contextlib
import json
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import redis
from redis.commands.core import Script

from core.errors import ServiceError
from core.request_context import current_request_id, is_request_id
from imagegen import metrics
from imagegen.errors import JobStoreBusy, QueueFull, WorkerLost
from imagegen.generation import queue_policy
from imagegen.generation.execution import Outcome
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import CANCELLING, FINISHED, JobState, JobView, job_progress
from imagegen.generation.previews import Preview
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.stored_ids import is_job_id, is_key_name

log = logging.getLogger(__name__)

PREFIX = "imagegen:"
QUEUED, RECENT, SEQUENCE, IDLE, WORKERS, PULLS, UNFINISHED, RUNNING, CLOCK = (
    PREFIX + name
    for name in (
        "queued", "recent", "sequence", "idle", "workers", "pull", "unfinished", "running",
        "clock",
    )
)  # fmt: skip
# The fair order: each key's latest round, and the round of the job claimed last.
ROUNDS, SERVED = PREFIX + "rounds", PREFIX + "served"
FINISHED_STATES = ("succeeded", "failed", "cancelled")
# A job whose worker is lost runs once more. Workers die for their own reasons; twice in a row
# points at the job.
RUNS_PER_JOB = 2
# How a lost job's error begins: its answer is WorkerLost's.
LOST = "worker lost: "
# Every transition is announced here: the job's id, or EVERY_JOB.
CHANGED = PREFIX + "changed"
EVERY_JOB = "*"


# Submit's tries when the queue moved under its decision, then 503. Only a crowd of submits gets
# here.
SUBMIT_TRIES = 50


def job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def preview_key(job_id: str) -> str:
    """Written over at each preview, deleted with the job, and expiring after PREVIEW_TTL_MS
    anyway."""
    return f"{PREFIX}job:{job_id}:preview"


PREVIEW_TTL_MS = 24 * 3600 * 1000


def worker_key(name: str) -> str:
    return f"{PREFIX}worker:{name}"


def pull_key(model: str) -> str:
    """The count of pulls asked for a MODELS entry, which every worker that may run it follows
    (MODEL_ID's is PULLS)."""
    return f"{PULLS}:{model}"


def unfinished_key(model: str) -> str:
    """One model's queued and running jobs, one entry each: what KEDA scales that model's
    worker pool on (WORKER_MODELS)."""
    return f"{UNFINISHED}:{model}"


# The store's reachable time (ms). A gap over max_gap (half the TTL) adds nothing. After one over
# the TTL, every running job's heartbeat is set to now, so each worker gets a whole TTL to beat
# again. Ticks under 0.1 s apart are not written, so frequent readers do not write at every read.
_TICK = """
local function tick(clock, running, max_gap)
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local at = tonumber(redis.call('HGET', clock, 'at'))
  local reach = tonumber(redis.call('HGET', clock, 'reach')) or 0
  if at then
    local gap = now - at
    if gap > 0 and gap <= max_gap then
      if gap < 100 then
        return reach + gap
      end
      reach = reach + gap
    elseif gap > 2 * max_gap then
      for _, id in ipairs(redis.call('ZRANGE', running, 0, -1)) do
        redis.call('ZADD', running, reach, id)
      end
    end
  end
  redis.call('HSET', clock, 'at', string.format('%d', now), 'reach', string.format('%d', reach))
  return reach
end
"""

# A job leaving the queue moves every position behind it, so their revisions grow too.
_BUMP_QUEUED = """
local function bump_queued(prefix, queued)
  for _, other in ipairs(redis.call('ZRANGE', queued, 0, -1)) do
    redis.call('HINCRBY', prefix .. 'job:' .. other, 'rev', 1)
  end
end
"""

# What a submit's decision reads, in one step under WATCH. Workers whose heartbeat is gone are not
# idle, whatever they said last. Reads only.
_QUEUE_STATE = """
local prefix, owner = ARGV[1], ARGV[2]
local live, dead = 0, {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if redis.call('EXISTS', prefix .. 'worker:' .. name) == 1 then
    live = live + 1
  else
    table.insert(dead, name)
  end
end
local keys = {}
for _, other in ipairs(redis.call('LRANGE', KEYS[7], 0, -1)) do
  table.insert(keys, redis.call('HGET', prefix .. 'job:' .. other, 'key') or '')
end
local recent = {}
for _, other in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  table.insert(recent, other)
  table.insert(recent, redis.call('HGET', prefix .. 'job:' .. other, 'state') or '')
end
return {redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'), live, dead, keys,
        redis.call('HGET', KEYS[5], owner) or '0', redis.call('GET', KEYS[6]) or '0',
        redis.call('GET', KEYS[3]) or '0', recent, redis.call('TIME')[1]}
"""

# What a claim's choice reads (queue_policy.pick): the store's time, each waiting job in queue
# order with its model, passes and queued time, and the record of every other idle worker, which
# says what it holds. Reads only.
_CLAIM_STATE = """
local prefix, worker = ARGV[1], ARGV[2]
local time = redis.call('TIME')
local jobs = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local found = redis.call('HMGET', prefix .. 'job:' .. id, 'model', 'passed', 'queued_at')
  table.insert(jobs, id)
  table.insert(jobs, found[1] or '')
  table.insert(jobs, found[2] or '0')
  table.insert(jobs, found[3] or '')
end
local idle = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if name ~= worker then
    local record = redis.call('GET', prefix .. 'worker:' .. name)
    if record then
      table.insert(idle, name)
      table.insert(idle, record)
    end
  end
end
return {time[1], time[2], jobs, idle}
"""

# A worker takes the job queue_policy.pick chose (ARGV[6]), whichever message woke it, only if the
# queue still starts with the jobs it passed (ARGV[7..]) and then it: a compare-and-set, 0 when the
# queue moved. Each passed job counts the pass. A job run again keeps its place. Answers the id and
# the attempt number.
_CLAIM = (
    _BUMP_QUEUED
    + _TICK
    + """
local prefix, worker, now, max_gap = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local id, ahead = ARGV[6], #ARGV - 6
local head = redis.call('ZRANGE', KEYS[1], 0, ahead)
if #head ~= ahead + 1 or head[ahead + 1] ~= id then
  return 0
end
for i = 1, ahead do
  if head[i] ~= ARGV[6 + i] then
    return 0
  end
end
local round = math.floor(tonumber(redis.call('ZSCORE', KEYS[1], id)) / tonumber(ARGV[5]))
redis.call('ZREM', KEYS[1], id)
for i = 1, ahead do
  redis.call('HINCRBY', prefix .. 'job:' .. ARGV[6 + i], 'passed', 1)
end
if round > tonumber(redis.call('GET', KEYS[5]) or '0') then
  redis.call('SET', KEYS[5], round)
end
local key = prefix .. 'job:' .. id
local attempts = cjson.decode(redis.call('HGET', key, 'attempts') or '[]')
table.insert(attempts, {worker = worker, started_at = now})
redis.call('HSET', key, 'state', 'running', 'started_at', now, 'phase', 'loading the model',
           'worker', worker, 'attempt', #attempts, 'attempts', cjson.encode(attempts))
redis.call('HINCRBY', key, 'rev', 1)
redis.call('ZADD', KEYS[3], tick(KEYS[4], KEYS[3], max_gap), id)
redis.call('SREM', KEYS[2], worker)
bump_queued(prefix, KEYS[1])
return {id, #attempts}
"""
)

# Whether the job runs this attempt: a worker found lost but only slow must not write over the next
# run. And whether a cancel was asked for.
_CURRENT = """
local function current(key, attempt)
  return redis.call('HGET', key, 'state') == 'running'
    and redis.call('HGET', key, 'attempt') == attempt
end
local function cancel_asked(key)
  if redis.call('HGET', key, 'cancel') == '1' then
    return 1
  end
  return 0
end
"""

# A running job's change from its worker. -1: this run is no longer current; 1: cancel asked;
# else 0.
_UPDATE = (
    _CURRENT
    + """
if not current(KEYS[1], ARGV[1]) then
  return -1
end
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return cancel_asked(KEYS[1])
"""
)

# The current run's outcome only, checked and written in one step. A run found lost never stores its
# result.
_FINISH = (
    _CURRENT
    + """
if not current(KEYS[1], ARGV[1]) then
  return 0
end
local id = redis.call('HGET', KEYS[1], 'id')
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('ZREM', KEYS[2], id)
redis.call('LREM', KEYS[3], 0, id)
local model = redis.call('HGET', KEYS[1], 'model')
if model and model ~= '' then
  redis.call('LREM', KEYS[3] .. ':' .. model, 0, id)
end
return 1
"""
)

# The running job's heartbeat. -1: this run is no longer current (stop); 1: cancel asked; 0: go on.
_BEAT = (
    _CURRENT
    + _TICK
    + """
local reach = tick(KEYS[3], KEYS[2], tonumber(ARGV[3]))
if not current(KEYS[1], ARGV[2]) then
  return -1
end
redis.call('ZADD', KEYS[2], reach, ARGV[1])
return cancel_asked(KEYS[1])
"""
)

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
  local model = redis.call('HGET', KEYS[1], 'model')
  if model and model ~= '' then
    redis.call('LREM', prefix .. 'unfinished:' .. model, 0, id)
  end
  bump_queued(prefix, KEYS[2])
elseif state == 'running' and redis.call('HGET', KEYS[1], 'cancel') ~= '1' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
return state
"""
)

# Every running job a whole TTL behind the clock has lost its worker. A cancelled one ends
# cancelled; one with fewer than RUNS_PER_JOB runs is queued first; the rest fail, naming their
# workers. One step, so of two judges only one acts.
_SWEEP = (
    _BUMP_QUEUED
    + _TICK
    + """
local prefix, ttl, max_gap, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local runs, ttl_text = tonumber(ARGV[5]), ARGV[6]
local reach = tick(KEYS[2], KEYS[1], max_gap)
local handled = {}
local requeued = false
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf',
                               '(' .. string.format('%d', reach - ttl))) do
  redis.call('ZREM', KEYS[1], id)
  local key = prefix .. 'job:' .. id
  if redis.call('HGET', key, 'state') == 'running' then
    local attempts = cjson.decode(redis.call('HGET', key, 'attempts') or '[]')
    local names = {}
    for _, attempt in ipairs(attempts) do
      table.insert(names, attempt.worker)
    end
    if #attempts > 0 then
      attempts[#attempts].lost_at = now
    end
    local worker = names[#names] or 'unknown'
    local done
    if redis.call('HGET', key, 'cancel') == '1' then
      done = 'cancelled'
      redis.call('HSET', key, 'state', 'cancelled', 'phase', 'cancelled while running',
                 'finished_at', now)
    elseif #attempts < runs then
      done = 'requeued'
      requeued = true
      redis.call('HSET', key, 'state', 'queued', 'step', 0, 'steps', 0, 'phase',
                 'waiting for its turn: its worker ' .. worker .. ' was lost, it runs again')
      redis.call('HDEL', key, 'started_at', 'denoise_started')
      -- Its lost run's preview goes too: the next run's previews start from step 0 again.
      redis.call('HSET', key, 'preview_step', 0)
      redis.call('DEL', key .. ':preview')
      local place = redis.call('HGET', key, 'score') or redis.call('HGET', key, 'seq')
      redis.call('ZADD', KEYS[3], place, id)
    else
      done = 'failed'
      local lost = 'lost ' .. #names .. ' workers, ' .. table.concat(names, ' and ') ..
                   ', each of which'
      if #names == 2 and names[1] == names[2] then  -- one worker (frozen, back, lost again)
        lost = 'lost its worker ' .. names[1] .. ' twice, which each time'
      end
      redis.call('HSET', key, 'state', 'failed', 'phase', 'failed', 'finished_at', now, 'error',
                 'worker lost: job ' .. id .. ' ' .. lost .. ' stopped beating for ' ..
                 ttl_text .. ' s (JOB_HEARTBEAT_TTL) while the job store was reachable; ' ..
                 'it is not run again')
    end
    if done ~= 'requeued' then
      redis.call('LREM', KEYS[4], 0, id)
      local model = redis.call('HGET', key, 'model')
      if model and model ~= '' then
        redis.call('LREM', KEYS[4] .. ':' .. model, 0, id)
      end
    end
    redis.call('HSET', key, 'attempts', cjson.encode(attempts))
    redis.call('HINCRBY', key, 'rev', 1)
    table.insert(handled, id)
    table.insert(handled, done)
  end
end
if requeued then
  bump_queued(prefix, KEYS[3])
end
return handled
"""
)


def decoded(reply: bytes | str) -> str:
    """The client decodes no replies, but redis-py types a reply `bytes | str` either way."""
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
    """The hash fields _view reads back."""
    fields = {"state": outcome.state.value, "phase": outcome.phase}
    if outcome.image is not None:
        fields["image"] = outcome.image.model_dump_json()
    if outcome.error is not None:
        fields["error"] = outcome.error
    if outcome.failure is not None:
        fields["failure"] = failure_text(outcome.failure)
    return fields


def failure_from_text(text: str | None) -> ServiceError | None:
    """The ServiceError a worker recorded, with its status, message and Retry-After."""
    if not text:
        return None
    data = json.loads(text)
    error = ServiceError(data["message"], retry_after=data["retry_after"])
    error.status = data["status"]
    return error


def _failure(fields: dict) -> ServiceError | None:
    """What the worker recorded; a job failed as lost raises WorkerLost, a 503 a retry can help."""
    if recorded := failure_from_text(_text(fields, "failure")):
        return recorded
    error = _text(fields, "error")
    if _text(fields, "state") == JobState.FAILED.value and error and error.startswith(LOST):
        return WorkerLost(error)
    return None


def _checked_claim(
    job_id: str, attempt: int, request: Any, created: Any, now: str, rid: Any, key: Any
) -> "Claimed":
    """A claimed job's fields checked against the forms web replicas write; ValueError names the
    first bad one."""
    owner = decoded(key) or None if key else None
    if not is_job_id(job_id):
        raise ValueError("its id is not a job id")
    if owner is not None and not is_key_name(owner):
        raise ValueError("its key is not a key's name")
    request_id = decoded(rid) if rid else None
    return Claimed(
        job_id=job_id,
        attempt=attempt,
        request=GenerationRequest.model_validate_json(request),  # an edit's digests too
        created_at=datetime.fromisoformat(decoded(created)),
        started_at=datetime.fromisoformat(now),
        request_id=request_id if request_id and is_request_id(request_id) else None,
        key=owner,
    )


@dataclass(frozen=True)
class Claimed:
    job_id: str
    attempt: int  # 1, or 2 when its first worker was lost: what its writes are checked against
    request: GenerationRequest
    created_at: datetime
    started_at: datetime
    request_id: str | None = None  # the X-Request-ID of the request that queued it
    key: str | None = None  # the API key it belongs to: its image is recorded as that key's


class JobStore:
    """The atomic reads and transitions of jobs; the web board and the workers both use it.

    `wake` sends the message that makes a worker take the next job. A requeued job needs one;
    without it (tests) the job waits for the next message."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        heartbeat_ttl: float,
        wake: Callable[[str], None] | None = None,
    ) -> None:
        self.redis = client
        self.heartbeat_ttl = heartbeat_ttl
        self.wake = wake
        self._queue_state = client.register_script(_QUEUE_STATE)
        # Only transitions a client can see are announced. An empty sweep is no news: announcing it
        # would wake the queue's streams, whose reads sweep again, in a loop.
        self._claim = client.register_script(_CLAIM)
        self._claim_state = client.register_script(_CLAIM_STATE)
        self._update = self._announced(client.register_script(_UPDATE))
        self._finish = self._announced(client.register_script(_FINISH))
        self._cancel = client.register_script(_CANCEL)
        self._beat = client.register_script(_BEAT)
        self._sweep = client.register_script(_SWEEP)

    def _announce(self, *changed: str) -> None:
        """The one place that notifies, on CHANGED: each changed job, and EVERY_JOB for a queue
        move.

        A failed announcement does not fail the transition: waiters read their job every
        second anyway."""
        with contextlib.suppress(redis.RedisError):
            for item in changed:
                self.redis.publish(CHANGED, item)

    def _announced(self, script: Script) -> Callable[..., Any]:
        """Runs `script` on the job whose hash is its first key, then announces it."""

        def run(*, keys: list[str], args: list[Any]) -> Any:
            result = script(keys=keys, args=args)
            self._announce(keys[0].removeprefix(job_key("")))
            return result

        return run

    @property
    def ttl_ms(self) -> int:
        return int(self.heartbeat_ttl * 1000)

    @property
    def max_gap_ms(self) -> int:
        """The longest gap between ticks still counted as the store reachable."""
        return self.ttl_ms // 2

    # -- the web side -----------------------------------------------------------------------

    def add(
        self,
        job_id: str,
        request: GenerationRequest,
        *,
        owner: str | None,
        batch: str | None,
        key: str | None = None,
        key_limit: int | None = None,
        queue_max: int,
        keep: int,
        model: str = "",
    ) -> bool:
        """Queues the job, or refuses it with nothing written: False when full, KeyQueueLimit at
        the limit.

        The decision is written in one MULTI only if nothing it read changed; else it decides
        again. So one key's simultaneous requests cannot pass its limit on any replica. `model`
        is the repo id the job runs on, which the claim's choice and its model's list read."""
        fields: dict[str, str | int] = {
            "model": model,
            "passed": 0,
            "id": job_id,
            "request": request.model_dump_json(),
            "owner": owner or "",
            "batch": batch or "",
            "key": key or "",
            "state": JobState.QUEUED.value,
            "phase": "waiting for its turn",
            "created_at": now_text(),
            "step": 0,
            "steps": 0,
            "request_id": current_request_id() or "",  # its X-Request-ID, for the logs
        }
        for _ in range(SUBMIT_TRIES):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    watched = (QUEUED, RECENT, SEQUENCE, IDLE, ROUNDS, SERVED, UNFINISHED)
                    pipe.watch(*watched, job_key(job_id))
                    if pipe.exists(job_key(job_id)):
                        # A try whose reply was lost wrote it (redis-py then raises WatchError):
                        # queued once, not twice.
                        return True
                    state = self._queue_state(
                        keys=[QUEUED, RECENT, SEQUENCE, IDLE, ROUNDS, SERVED, UNFINISHED],
                        args=[PREFIX, key or ""],
                        client=pipe,
                    )
                    self._queue_job(pipe, job_id, fields, state, key, key_limit, queue_max, keep)
                    return True
                except QueueFull:
                    return False
                except redis.WatchError:
                    continue  # the queue moved under this decision: decide again
        raise JobStoreBusy()  # submits so many at once that this one never got its turn

    def _queue_job(
        self,
        pipe: Any,
        job_id: str,
        fields: dict[str, str | int],
        state: list[Any],
        key: str | None,
        key_limit: int | None,
        queue_max: int,
        keep: int,
    ) -> None:
        """Writes queue_policy's decision in one MULTI; WatchError when anything read has
        changed."""
        queued, idle, dead, keys, round_text, served, arrival, recent, clock = state
        queue_policy.admit(
            key_jobs=queue_policy.key_jobs((decoded(k) for k in keys), key),
            key_limit=key_limit,
            waiting=queue_policy.waiting_jobs(len(queued) // 2, int(idle)),
            queue_max=queue_max,
        )
        arrival = int(arrival) + 1
        rounds = {key or "": int(round_text)}
        round_ = queue_policy.fair_round(rounds, key, served=int(served))
        place = queue_policy.order(round_, arrival)
        passed = [decoded(queued[i]) for i in range(0, len(queued), 2)
                  if float(queued[i + 1]) > place]  # fmt: skip
        states = [(decoded(recent[i]), decoded(recent[i + 1])) for i in range(0, len(recent), 2)]
        gone = [other for other, found in states if not found]
        finished = [other for other, found in states if found in FINISHED]
        pipe.multi()
        pipe.set(SEQUENCE, arrival)
        pipe.hset(ROUNDS, key or "", round_)
        fields = {**fields, "queued_at": int(clock)}  # the store's time: pick's `since`
        pipe.hset(job_key(job_id), mapping={"seq": arrival, "score": place, "rev": 1, **fields})
        pipe.zadd(QUEUED, {job_id: place})
        pipe.zadd(RECENT, {job_id: arrival})
        for other in passed:  # the jobs it passed move down one place
            pipe.hincrby(job_key(other), "rev", 1)
        pipe.rpush(UNFINISHED, job_id)
        if fields["model"]:
            pipe.rpush(unfinished_key(str(fields["model"])), job_id)
        for other in gone + queue_policy.forget(finished, keep):
            pipe.zrem(RECENT, other)
            pipe.delete(job_key(other), preview_key(other))
        if dead:
            pipe.srem(IDLE, *dead)
        pipe.execute()

    def forget(self, job_id: str) -> None:
        """Takes back a job whose message could not be sent: it would never run."""
        model = self.redis.hget(job_key(job_id), "model")
        with self.redis.pipeline() as pipe:
            # One call a line: redis-py types a pipeline's commands as the client's.
            pipe.zrem(QUEUED, job_id)
            pipe.zrem(RECENT, job_id)
            pipe.lrem(UNFINISHED, 0, job_id)
            if model:
                pipe.lrem(unfinished_key(decoded(model)), 0, job_id)
            pipe.delete(job_key(job_id))
            pipe.delete(preview_key(job_id))
            pipe.execute()

    def cancel(self, job_id: str) -> str | None:
        """The job's state when asked (None: unknown).

        A queued job never runs. A running one is marked. Its worker reads the mark within a
        second and stops at the model's next block."""
        state = self._cancel(keys=[job_key(job_id), QUEUED], args=[PREFIX, job_id, now_text()])
        if not state:
            return None
        before = state.decode()
        if before == "queued":  # cancelled: the jobs behind it move up
            self._announce(job_id, EVERY_JOB)
        elif before == "running":  # marked: its phase says cancelling
            self._announce(job_id)
        return before

    def view(self, job_id: str) -> JobView | None:
        return self.views([job_id])[0]

    def views(self, job_ids: list[str]) -> list[JobView | None]:
        """Each job's fields and position, read in one transaction.

        With a job running, readers sweep lost jobs first. So a request gets its answer with
        every worker gone."""
        raw = self._read(job_ids)
        if any(fields.get(b"state") == b"running" for fields, _ in raw) and self.sweep():
            raw = self._read(job_ids)
        return [_view(fields, rank) if fields else None for fields, rank in raw]

    def revision(self, job_id: str) -> int | None:
        value = self.redis.hget(job_key(job_id), "rev")
        return None if value is None else int(value)

    def unfinished_ids(self) -> list[str]:
        """Oldest first."""
        return [decoded(i) for i in cast(list[bytes], self.redis.lrange(UNFINISHED, 0, -1))]

    def recent_ids(self, limit: int | None = None) -> list[str]:
        """Newest first."""
        end = -1 if limit is None else limit - 1
        # Member names only, undecoded; redis-py's type also allows (member, score) pairs.
        members = cast(list[bytes], self.redis.zrevrange(RECENT, 0, end))
        return [i.decode() for i in members]

    def sweep(self) -> list[tuple[str, str]]:
        """Requeues, fails or cancels each running job a whole JOB_HEARTBEAT_TTL behind the
        clock.

        Every live worker sweeps at each beat. So a lost job is handled within the TTL and a
        beat."""
        args: list[str | int] = [PREFIX, self.ttl_ms, self.max_gap_ms, now_text(),
                                 RUNS_PER_JOB, f"{self.heartbeat_ttl:g}"]  # fmt: skip
        reply = self._sweep(keys=[RUNNING, CLOCK, QUEUED, UNFINISHED], args=args)
        handled = [(decoded(reply[i]), decoded(reply[i + 1])) for i in range(0, len(reply), 2)]
        if handled:  # each handled job changed; one queued again moved the queue
            self._announce(*(job_id for job_id, _ in handled), EVERY_JOB)
        for job_id, done in handled:
            log.warning("job %s: its worker was lost; %s", job_id, done)
            if done != "requeued":  # it ended here, in whichever process judged it
                metrics.JOBS_FINISHED.labels(outcome=done).inc()
            if done == "requeued" and self.wake is not None:
                self.wake(job_id)
        return handled

    def attempts(self, job_id: str) -> list[dict[str, str]]:
        """Each run, oldest first: worker, start, and `lost_at` unless current or finished."""
        stored = self.redis.hget(job_key(job_id), "attempts")
        return json.loads(stored) if stored else []

    def _read(self, job_ids: list[str]) -> list[tuple[dict, int | None]]:
        with self.redis.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.hgetall(job_key(job_id))
                pipe.zrank(QUEUED, job_id)
            replies = pipe.execute()
        return [(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]

    # -- the worker side --------------------------------------------------------------------

    def claim(
        self,
        worker: str,
        *,
        held: Collection[str] = (),
        may_run: Collection[str] | None = None,
        default_model: str = "",
    ) -> Claimed | None:
        """Takes the job queue_policy.pick chooses for this worker: `held` its resident models,
        `may_run` its WORKER_MODELS (None: every model), a job of no model `default_model`'s.

        None when no job is left for it. A job whose fields are not what a web replica writes is
        failed unread. So a forged job names no file."""
        while True:
            now = now_text()
            claimed = self._claim_chosen(worker, now, held, may_run, default_model)
            if claimed is None:
                return None
            job_id, attempt = decoded(claimed[0]), int(claimed[1])
            self._announce(job_id, EVERY_JOB)  # it runs; the jobs behind it move up
            request, created, rid, key = self.redis.hmget(
                job_key(job_id), "request", "created_at", "request_id", "key"
            )
            if request is None or created is None:  # add writes both; only forget removes them
                raise LookupError(f"job {job_id} was claimed without its request")
            try:
                return _checked_claim(job_id, attempt, request, created, now, rid, key)
            except ValueError as error:  # pydantic's ValidationError is one too
                log.error("job %r is not one this service wrote; failed: %s",
                          job_id, str(error).splitlines()[0])  # fmt: skip
                self.finish(job_id, attempt, state=JobState.FAILED.value, phase="failed",
                            error="the job's stored fields are not valid")  # fmt: skip

    def waiting(
        self, worker: str, default_model: str = ""
    ) -> tuple[float, list[str], list[queue_policy.Waiting], dict[str, dict]]:
        """The store's time, the waiting jobs' ids and what pick needs of each, in queue order,
        and the other idle workers' records by name (`models`: what each holds)."""
        seconds, micros, jobs, idle = self._claim_state(keys=[QUEUED, IDLE], args=[PREFIX, worker])
        now = int(seconds) + int(micros) / 1e6
        ids, waiting = [], []
        for i in range(0, len(jobs), 4):
            ids.append(decoded(jobs[i]))
            since = decoded(jobs[i + 3])
            waiting.append(queue_policy.Waiting(
                model=decoded(jobs[i + 1]) or default_model, passed=int(jobs[i + 2]),
                since=float(since) if since else now,
            ))  # fmt: skip
        others = {decoded(idle[i]): json.loads(idle[i + 1]) for i in range(0, len(idle), 2)}
        return now, ids, waiting, others

    def _claim_chosen(
        self,
        worker: str,
        now: str,
        held: Collection[str],
        may_run: Collection[str] | None,
        default_model: str,
    ) -> Any:
        """pick's choice over the jobs this worker may run, claimed if the queue has not moved
        under it; else chosen again. None when pick leaves every job to others."""
        for _ in range(SUBMIT_TRIES):
            clock, ids, waiting, others = self.waiting(worker, default_model)
            held_by_idle = {m for record in others.values() for m in record.get("models", [])}
            runnable = [
                i for i, job in enumerate(waiting) if may_run is None or job.model in may_run
            ]
            index = queue_policy.pick(
                [waiting[i] for i in runnable], held, now=clock, held_by_idle=held_by_idle
            )
            if index is None:
                return None
            position = runnable[index]
            chosen, ahead = ids[position], ids[:position]
            args: list[str | int] = [PREFIX, worker, now, self.max_gap_ms, queue_policy.ROUND_SPAN]
            args += [chosen, *ahead]
            claimed = self._claim(keys=[QUEUED, IDLE, RUNNING, CLOCK, SERVED], args=args)
            if claimed != 0:
                return claimed
        raise JobStoreBusy()  # claims so many at once that this one never got its turn

    def update(self, job_id: str, attempt: int, /, **fields: Any) -> int:
        """-1: this run is no longer current (found lost); 1: a cancel was asked for."""
        flat = [item for pair in fields.items() for item in pair]
        return self._update(keys=[job_key(job_id)], args=[attempt, *flat])

    def finish(self, job_id: str, attempt: int, /, **fields: Any) -> bool:
        """False, with nothing written, when this run was found lost."""
        fields["finished_at"] = now_text()
        flat = [item for pair in fields.items() for item in pair]
        keys = [job_key(job_id), RUNNING, UNFINISHED]
        return bool(self._finish(keys=keys, args=[attempt, *flat]))

    def write_preview(self, job_id: str, attempt: int, preview: Preview) -> int:
        """Writes over the last preview (partial images under their own fields, at most
        PARTIALS).

        Then records the step in the job; that is refused for a run no longer current."""
        names = [""] if preview.partial is None else ["", f"partial{preview.partial}:"]
        fields = {f"{name}{key}": value for name in names for key, value in (
            ("step", preview.step), ("steps", preview.steps), ("width", preview.width),
            ("height", preview.height), ("type", preview.media_type), ("data", preview.data),
        )}  # fmt: skip
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(preview_key(job_id), mapping=cast(Any, fields))
            pipe.pexpire(preview_key(job_id), PREVIEW_TTL_MS)
            pipe.execute()
        return self.update(job_id, attempt, preview_step=preview.step)

    def preview(self, job_id: str, partial: int | None = None) -> Preview | None:
        """The latest preview, or partial image `partial`."""
        name = "" if partial is None else f"partial{partial}:"
        keys = ("step", "steps", "width", "height", "type", "data")
        stored = self.redis.hmget(preview_key(job_id), [name + key for key in keys])
        if any(value is None for value in stored):
            return None
        step, steps, width, height, media_type, data = cast(list[bytes], stored)
        return Preview(
            step=int(step), steps=int(steps), width=int(width), height=int(height),
            media_type=media_type.decode(), data=data, partial=partial,
        )  # fmt: skip

    def beat(self, job_id: str, attempt: int) -> bool:
        """True when the job is to stop (cancel asked, or run found lost), in the same round
        trip."""
        keys = [job_key(job_id), RUNNING, CLOCK]
        return self._beat(keys=keys, args=[job_id, attempt, self.max_gap_ms]) != 0


def _text(fields: dict, name: str) -> str | None:
    value = fields.get(name.encode())
    return value.decode() if value else None


def _field(fields: dict, name: str) -> str:
    """A field every job's hash has from the start."""
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
        key=_text(fields, "key"),
        failure=_failure(fields),
        revision=int(_text(fields, "rev") or 0),
        request_id=_text(fields, "request_id"),
        preview_step=int(_text(fields, "preview_step") or 0),
    )
