"""TODO_MAX_CONCURRENT is read at each request: a changed setting sizes the todo routes'
database places in the running process, as the image routes' places are."""

from todos.middleware import _database_slots


def places(settings, size: int) -> int:
    settings.TODO_MAX_CONCURRENT = size
    slots = _database_slots()
    taken = 0
    while slots.acquire(blocking=False):
        taken += 1
    for _ in range(taken):
        slots.release()
    return taken


def test_the_database_places_follow_the_setting_in_force(settings):
    assert places(settings, 1) == 1
    assert places(settings, 3) == 3
    assert places(settings, 1) == 1
