"""The queue's model affinity, as the pure policy both boards apply."""

from imagegen.generation.queue_policy import OVERTAKE_LIMIT, OVERTAKE_SECONDS, Waiting, pick

NOW = 1_000.0


def waiting(*models: str, passed: int = 0, since: float = NOW) -> list[Waiting]:
    return [Waiting(model=m, passed=passed, since=since) for m in models]


def test_a_job_for_the_held_model_runs_before_one_that_needs_a_swap():
    assert pick(waiting("b", "a", "b"), {"a"}, now=NOW) == 1


def test_the_head_runs_when_its_model_is_held():
    assert pick(waiting("a", "b", "a"), {"a"}, now=NOW) == 0


def test_with_no_job_for_a_held_model_the_head_runs_and_swaps():
    assert pick(waiting("b", "c"), {"a"}, now=NOW) == 0
    assert pick(waiting("b", "c"), set(), now=NOW) == 0


def test_a_job_passed_its_limit_is_passed_no_more():
    queue = [Waiting("b", OVERTAKE_LIMIT, NOW), *waiting("a")]
    assert pick(queue, {"a"}, now=NOW) == 0
    queue = [Waiting("b", OVERTAKE_LIMIT - 1, NOW), *waiting("a")]
    assert pick(queue, {"a"}, now=NOW) == 1


def test_a_job_waiting_its_seconds_is_passed_no_more():
    queue = [Waiting("b", 0, NOW - OVERTAKE_SECONDS), *waiting("a")]
    assert pick(queue, {"a"}, now=NOW) == 0


def test_a_job_an_idle_worker_holds_is_left_to_that_worker():
    # This worker holds a; an idle one holds b: the b job is theirs, whatever its passes.
    queue = [Waiting("b", OVERTAKE_LIMIT, NOW), *waiting("c")]
    assert pick(queue, {"a"}, now=NOW, held_by_idle={"b"}) == 1
    assert pick(waiting("b"), {"a"}, now=NOW, held_by_idle={"b"}) is None


def test_an_empty_queue_has_nothing_to_pick():
    assert pick([], {"a"}, now=NOW) is None
