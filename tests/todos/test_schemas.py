"""TodoOut shapes whatever a todo was read as, and writes timestamps in the one form."""

from datetime import UTC, datetime, timedelta, timezone

import bson
import pytest
from bson import ObjectId
from bson.codec_options import CodecOptions

from core.timestamps import iso_ms
from todos.documents import Todo
from todos.schemas import TodoOut, timestamp_text

ID = ObjectId("6b02ab5220f488b9b36cc1cd")
CREATED = datetime(2026, 11, 22, 7, 46, 15, 728999)
UPDATED = datetime(2026, 11, 23, 0, 0, 0, 5000)
SHAPED = {
    "id": "6b02ab5220f488b9b36cc1cd",
    "title": "buy milk",
    "description": None,
    "createdAt": "2026-11-22T07:46:15.728Z",
    "updatedAt": "2026-11-23T00:00:00.005Z",
}


def test_a_raw_document_and_a_todo_document_shape_alike():
    raw = {
        "_id": ID,
        "title": "buy milk",
        "description": None,
        "createdAt": CREATED,
        "updatedAt": UPDATED,
        "pendingBatch": "ignored",
    }
    todo = Todo(
        id=ID,
        title="buy milk",
        description=None,
        created_at=CREATED.replace(tzinfo=UTC),
        updated_at=UPDATED.replace(tzinfo=UTC),
    )
    assert TodoOut.model_validate(raw).model_dump() == SHAPED
    assert TodoOut.model_validate(todo).model_dump() == SHAPED
    assert list(TodoOut.model_validate(raw).model_dump()) == list(SHAPED)  # the key order


def decoded(moment: datetime, **options) -> datetime:
    """The datetime as the driver hands it back with these codec options."""
    raw = bson.encode({"at": moment})
    return bson.decode(raw, codec_options=CodecOptions(**options))["at"]


MOMENTS = [
    datetime(2026, 11, 22, 7, 46, 15, 0),
    datetime(2026, 11, 22, 7, 46, 15, 999),  # under a millisecond: truncated, not rounded
    datetime(2026, 11, 22, 7, 46, 15, 999999),
    datetime(1970, 1, 1),
    datetime(9999, 12, 31, 23, 59, 59, 999000),
    datetime(1000, 1, 1),
    datetime(999, 12, 31, 23, 59, 59),  # strftime writes "999": the fallback keeps that
    datetime(5, 1, 2, 3, 4, 5, 6000),
]


@pytest.mark.parametrize("moment", MOMENTS, ids=str)
@pytest.mark.parametrize(
    "read_as",
    [
        lambda m: m,
        lambda m: decoded(m),
        lambda m: decoded(m, tz_aware=True),
        lambda m: decoded(m, tz_aware=True, tzinfo=UTC),
        lambda m: m.replace(tzinfo=UTC),
        lambda m: m.replace(tzinfo=UTC).astimezone(timezone(timedelta(hours=-5))),
    ],
    ids=["naive", "driver naive", "driver aware", "driver aware UTC", "aware", "UTC-5"],
)
def test_timestamp_text_is_iso_ms_exactly(moment, read_as):
    try:
        value = read_as(moment)
    except OverflowError:  # -5 h before year 1, or a year BSON can't hold
        pytest.skip("not representable")
    assert timestamp_text(value) == iso_ms(value)


def test_no_timestamp_is_null():
    assert timestamp_text(None) is None
