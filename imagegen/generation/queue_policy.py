"""The queue's rules, written once: admit, order and forget.

Both boards apply them, so a rule changed here changes in both modes. The functions are pure: the
boards only store."""

from collections.abc import Iterable, Sequence

from imagegen.errors import KeyQueueLimit, QueueFull

# A waiting job's place is round x ROUND_SPAN + arrival (mod ROUND_SPAN). Redis sorts its queue by
# it.
ROUND_SPAN = 1_000_000


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
