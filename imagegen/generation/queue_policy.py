"""The queue's rules, written once: which job is let in (admit), where it waits (order) and
which finished jobs are dropped (forget).

Both job boards apply these functions: the in-process queue (imagegen.generation.jobs) under
its lock, the distributed one (imagegen.distributed.store) between reading the shared queue
and writing it in one compare-and-set. So the boards only store; a rule changed here changes
in both modes at once. The functions are pure: they read what the board hands them and
answer a decision.
"""

from collections.abc import Iterable, Sequence

from imagegen.errors import KeyQueueLimit, QueueFull

# A waiting job's place is one number: its round x ROUND_SPAN + its arrival (mod ROUND_SPAN,
# which orders only jobs of one round, one a key). Redis keeps the queue as a set sorted by it.
ROUND_SPAN = 1_000_000


def admit(*, key_jobs: int, key_limit: int | None, waiting: int, queue_max: int) -> None:
    """Refuses a new job with nothing queued: KeyQueueLimit when its API key already has
    `key_limit` jobs queued or running (`key_jobs`), else QueueFull when `waiting` jobs already
    wait (waiting_jobs). The key's limit is checked first: its answer says what the client
    can change."""
    if key_limit is not None and key_jobs >= key_limit:
        raise KeyQueueLimit(key_limit, 1)
    if waiting >= queue_max:
        raise QueueFull()


def waiting_jobs(queued: int, idle_workers: int) -> int:
    """Jobs waiting beyond those idle workers are about to take: a job queued while a worker
    is idle is about to run, not waiting."""
    return queued - idle_workers


def key_jobs(unfinished_keys: Iterable[str | None], key: str | None) -> int:
    """How many of the unfinished (queued or running) jobs, given by their keys, are `key`'s."""
    return sum(1 for other in unfinished_keys if (other or None) == (key or None))


def fair_round(rounds: dict[str, int], key: str | None, *, served: int) -> int:
    """The round a new job of API key `key` runs in, recorded in `rounds` (each key's latest
    round). The queue takes jobs by round, then by arrival: one job of each key with waiting
    jobs a round, so a key's batch of 8 does not make every other key wait behind all 8.
    A key whose jobs are all done starts at the round after the one running (`served`), never
    in rounds gone by. Jobs of no key (an open service) share one turn."""
    name = key or ""
    found = max(served, rounds.get(name, 0)) + 1
    rounds[name] = found
    return found


def order(round_: int, arrival: int) -> int:
    """A waiting job's place in the queue: lower runs sooner (by round, then by arrival).
    The head of the queue is the job a free worker takes next. Later inputs (the model a
    worker has loaded) would weigh in here."""
    return round_ * ROUND_SPAN + arrival % ROUND_SPAN


def round_of(place: int) -> int:
    """The round a place (order) belongs to: the round served once its job starts."""
    return place // ROUND_SPAN


def place_in(queue: Sequence[int], place: int) -> int:
    """Where a job of `place` goes in a queue of places in order: after every job of an
    earlier or the same place, so jobs past that index move down one."""
    index = len(queue)
    while index > 0 and queue[index - 1] > place:
        index -= 1
    return index


def forget(finished: Sequence[str], keep: int) -> list[str]:
    """Of the finished jobs (oldest first), those to drop: all but the `keep` newest.
    Unfinished jobs are never forgotten: a client is still waiting on them."""
    return list(finished[: max(0, len(finished) - keep)])
