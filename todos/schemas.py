"""Request and response bodies of the todo API; pydantic enforces the field rules.

Strict, and unknown keys are refused: a misspelt `descripton` is an error, not a lost field.
Plain pydantic models, since Ninja's `Schema` costs 8 us a todo in a list."""

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
    # Bounds before the not-blank rule: "" is too short, not blank.
    title: NotBlank = Field(min_length=1, max_length=TITLE_MAX, description=f"unique; {NOT_BLANK}")
    description: Description | None = None


class TodoBody(StrictIn):
    todo: TodoIn


class TodoBatchBody(StrictIn):
    todos: Annotated[list[TodoIn], Field(min_length=1, max_length=BATCH_MAX)]


class TodoListQuery(BaseModel):
    """The whole list unless `limit` bounds it."""

    limit: Annotated[int, Field(ge=1, le=PAGE_MAX)] | None = Field(
        None, description="At most this many todos; the next page's address is in `Link`."
    )
    after: Cursor | None = Field(
        None, description="Where the page starts: the cursor from the previous page's `Link`."
    )


def timestamp_text(moment: datetime | None) -> str | None:
    """core.timestamps.iso_ms's form, four times faster for naive UTC datetimes; others go to
    iso_ms."""
    if moment is None:
        return None
    if moment.tzinfo is None and moment.year >= 1000:
        return moment.isoformat(timespec="milliseconds") + "Z"
    return iso_ms(moment)


def _id_text(value: Any) -> str:
    return str(value)


def _stored(*names: str) -> Any:
    """A raw document's name for the key first, then a Todo's."""
    return Field(validation_alias=AliasChoices(*names))


class TodoOut(BaseModel):
    """A todo in an answer: exactly these five keys, whatever it was read as.

    Raw documents (`_id`, `createdAt`) and `Todo` documents (`id`, `created_at`) read the
    same."""

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
