"""The queue's rules, written once: admit, order and forget.

Both boards apply them, so a rule changed here changes in both modes. The functions are pure: the
boards only store."""

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from imagegen.errors import KeyQueueLimit, QueueFull

# A waiting job's place is round x ROUND_SPAN + arrival (mod ROUND_SPAN). Redis sorts its queue by
# it.
ROUND_SPAN = 1_000_000

# A job needing a model no worker holds may be passed by jobs for a held model this many times,
# or for this many seconds, whichever comes first. Then it runs next, and the swap with it. A
# swap costs a load (tens of seconds for an SDXL from the share), so a few passes save a swap on
# most mixes while no job waits more than about three other jobs' time.
OVERTAKE_LIMIT = 3
OVERTAKE_SECONDS = 120.0


def admit(*, key_jobs: int, key_limit: int | None, waiting: int, queue_max: int) -> None:
    """Refuses a new job, with nothing queued, when a rule says no.

    The key's limit is checked before the queue's bound: its answer says what the client can
    change."""
    if key_limit is not None and key_jobs >= key_limit:
        raise KeyQueueLimit(key_limit, 1)
    if waiting >= queue_max:
        raise QueueFull()


def waiting_jobs(queued: int, idle_workers: int) -> int:
    """A job queued while a worker is idle is about to run, so it is not waiting."""
    return queued - idle_workers


def key_jobs(unfinished_keys: Iterable[str | None], key: str | None) -> int:
    """How many unfinished jobs are `key`'s."""
    return sum(1 for other in unfinished_keys if (other or None) == (key or None))


def fair_round(rounds: dict[str, int], key: str | None, *, served: int) -> int:
    """The round a new job of `key` runs in, recorded in `rounds`.

    One job per waiting key a round, so a batch of 8 does not block other keys. Jobs of no key
    share one turn."""
    name = key or ""
    found = max(served, rounds.get(name, 0)) + 1
    rounds[name] = found
    return found


def order(round_: int, arrival: int) -> int:
    """Lower runs sooner: by round, then by arrival.

    Later inputs, such as a worker's loaded model, would weigh in here."""
    return round_ * ROUND_SPAN + arrival % ROUND_SPAN


@dataclass(frozen=True)
class Waiting:
    """What the choice needs of a waiting job, in queue order."""

    model: str  # the repo id it runs on
    passed: int  # how often a later job has run before it
    since: float  # when it was queued, in the clock `pick` gets as `now`


def pick(
    waiting: Sequence[Waiting],
    held: Collection[str],
    *,
    now: float,
    held_by_idle: Collection[str] = (),
    limit: int = OVERTAKE_LIMIT,
    seconds: float = OVERTAKE_SECONDS,
) -> int | None:
    """The index of the job a worker holding `held` runs next; None leaves them all to others.

    A job for a held model runs before one that needs a swap, so a mix of two models does not swap
    on every job. A job passed `limit` times or for `seconds` stops being passed: the worker swaps
    for it. A job whose model another idle worker holds is left to that worker, so no job waits
    for a swap while a worker holding its model is idle. Fair turns hold within that bound."""
    for index, job in enumerate(waiting):
        if job.model in held:
            return index
        if job.model in held_by_idle:
            continue
        if job.passed >= limit or now - job.since >= seconds:
            return index
    return next((index for index, job in enumerate(waiting) if job.model not in held_by_idle), None)


def round_of(place: int) -> int:
    """The round served once this place's job starts."""
    return place // ROUND_SPAN


def place_in(queue: Sequence[int], place: int) -> int:
    """The index after every job of an earlier or equal place."""
    index = len(queue)
    while index > 0 and queue[index - 1] > place:
        index -= 1
    return index


def forget(finished: Sequence[str], keep: int) -> list[str]:
    """All finished jobs but the `keep` newest. Unfinished ones stay: a client waits on them."""
    return list(finished[: max(0, len(finished) - keep)])
