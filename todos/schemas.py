"""Request and response bodies of the todo API; pydantic enforces the field rules.

Strict mode: a number is not a title. Unknown keys are refused rather than ignored, so a
misspelt `descripton` is an error, not a silently lost field.

The models are plain pydantic models, which Ninja takes as they are. Ninja's `Schema` base
adds a Python getter around every object it validates (for Django ORM objects and its
`resolve_*` methods), which cost 8 us per todo in a list, more than reading it from the
database; and it validates a body with `extra="forbid"` twice. Nothing here needs either:
TodoOut resolves its keys with pydantic's own aliases and validators, in one pass.
"""

from datetime import datetime
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field

from core.text import NOT_BLANK, NotBlank
from core.timestamps import iso_ms
from todos.cursors import Cursor
from todos.documents import DESCRIPTION_MAX, TITLE_MAX

BATCH_MAX = 1000
PAGE_MAX = 1000


Description = Annotated[str, Field(max_length=DESCRIPTION_MAX)]


class StrictIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TodoIn(StrictIn):
    # The bounds before the not-blank rule, as a Field default: "" is too short, not blank.
    title: NotBlank = Field(min_length=1, max_length=TITLE_MAX, description=f"unique; {NOT_BLANK}")
    description: Description | None = None


class TodoBody(StrictIn):
    todo: TodoIn


class TodoBatchBody(StrictIn):
    todos: Annotated[list[TodoIn], Field(min_length=1, max_length=BATCH_MAX)]


class TodoListQuery(BaseModel):
    """`GET /todos` is the whole list unless `limit` bounds it."""

    limit: Annotated[int, Field(ge=1, le=PAGE_MAX)] | None = Field(
        None, description="At most this many todos; the next page's address is in `Link`."
    )
    after: Cursor | None = Field(
        None, description="Where the page starts: the cursor from the previous page's `Link`."
    )


def timestamp_text(moment: datetime | None) -> str | None:
    """core.timestamps.iso_ms's form, four times faster for what the todo reads decode to.

    The driver gives naive UTC datetimes there (see todos.documents.todos_collection), and C's
    `isoformat` writes them at millisecond precision, truncated like iso_ms, in 0.6 us where
    iso_ms's strftime takes 2.5 us: in a list of 1,000 todos, 4 ms. Anything else (an aware
    datetime, a year before 1000, where strftime writes fewer digits) goes to iso_ms itself."""
    if moment is None:
        return None
    if moment.tzinfo is None and moment.year >= 1000:
        return moment.isoformat(timespec="milliseconds") + "Z"
    return iso_ms(moment)


def _id_text(value: Any) -> str:
    return str(value)


def _stored(*names: str) -> Any:
    """Where a key is read from: a raw document's name for it first, then a Todo's."""
    return Field(validation_alias=AliasChoices(*names))


class TodoOut(BaseModel):
    """A todo in an answer: exactly these five keys, whatever the todo was read as.

    Selectors and services hand over raw documents as stored (`_id`, `createdAt`); a `Todo`
    document (`id`, `created_at`) reads the same (`from_attributes`). Each key that is not
    stored under its own name says where it comes from and how it becomes text."""

    model_config = ConfigDict(from_attributes=True)

    id: Annotated[str, BeforeValidator(_id_text)] = _stored("_id", "id")
    title: str
    description: str | None
    createdAt: Annotated[str, BeforeValidator(timestamp_text)] = _stored("createdAt", "created_at")
    updatedAt: Annotated[str | None, BeforeValidator(timestamp_text)] = _stored(
        "updatedAt", "updated_at"
    )


class DeletedCount(BaseModel):
    deletedCount: int


class Version(BaseModel):
    version: str


class ErrorDetail(BaseModel):
    field: str
    message: str


class ErrorOut(BaseModel):
    message: str
    details: list[ErrorDetail] | None = None


class TodoEnvelope(BaseModel):
    data: TodoOut
    error: None = None


class TodoListEnvelope(BaseModel):
    data: list[TodoOut]
    error: None = None


class DeletedCountEnvelope(BaseModel):
    data: DeletedCount
    error: None = None


class VersionEnvelope(BaseModel):
    data: Version
    error: None = None


class ErrorEnvelope(BaseModel):
    data: None = None
    error: ErrorOut | str
