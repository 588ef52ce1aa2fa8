"""Request and response bodies of the todo API; pydantic enforces the field rules.

Strict mode: a number is not a title. Unknown keys are refused rather than ignored, so a
misspelt `descripton` is an error, not a silently lost field.
"""

from typing import Annotated

from ninja import Schema
from pydantic import AfterValidator, ConfigDict, Field

from todos.documents import DESCRIPTION_MAX, TITLE_MAX

BATCH_MAX = 1000


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must contain a non-space character")
    return value


Title = Annotated[str, Field(min_length=1, max_length=TITLE_MAX), AfterValidator(_not_blank)]
Description = Annotated[str, Field(max_length=DESCRIPTION_MAX)]


class StrictIn(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)


class TodoIn(StrictIn):
    title: Title
    description: Description | None = None


class TodoBody(StrictIn):
    todo: TodoIn


class TodoBatchBody(StrictIn):
    todos: Annotated[list[TodoIn], Field(min_length=1, max_length=BATCH_MAX)]


class TodoOut(Schema):
    id: str
    title: str
    description: str | None
    createdAt: str
    updatedAt: str | None


class DeletedCount(Schema):
    deletedCount: int


class Version(Schema):
    version: str


class ErrorDetail(Schema):
    field: str
    message: str


class ErrorOut(Schema):
    message: str
    details: list[ErrorDetail] | None = None


class TodoEnvelope(Schema):
    data: TodoOut
    error: None = None


class TodoListEnvelope(Schema):
    data: list[TodoOut]
    error: None = None


class DeletedCountEnvelope(Schema):
    data: DeletedCount
    error: None = None


class VersionEnvelope(Schema):
    data: Version
    error: None = None


class ErrorEnvelope(Schema):
    data: None = None
    error: ErrorOut | str
