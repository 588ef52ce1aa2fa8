"""The cursor of a bounded `GET /todos?limit=N`: where the next page starts.

A keyset cursor (createdAt, id), not an offset, so inserts and deletes never shift a page. The
text is opaque, so its form may change."""

import base64
import binascii
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LAYOUT = struct.Struct(">q12s")  # createdAt in ms since the epoch, then the ObjectId
_TEXT_LENGTH = 27  # base64 of 20 bytes, without its padding
NOT_A_CURSOR = "is not a cursor of this service (follow the Link header)"


@dataclass(frozen=True, slots=True)
class Cursor:
    created_at: datetime
    id: ObjectId

    @classmethod
    def after(cls, document: dict[str, Any]) -> "Cursor":
        """The cursor of the page after this raw todo."""
        return cls(document["createdAt"], document["_id"])

    def encode(self) -> str:
        created_at = self.created_at
        if created_at.tzinfo is None:
            created_at = created_at.replace(tzinfo=UTC)
        milliseconds = (created_at - _EPOCH) // timedelta(milliseconds=1)
        packed = _LAYOUT.pack(milliseconds, self.id.binary)
        return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> "Cursor":
        """Raises ValueError for anything `encode` did not write."""
        if len(text) != _TEXT_LENGTH:
            raise ValueError(NOT_A_CURSOR)
        try:
            milliseconds, id_bytes = _LAYOUT.unpack(base64.urlsafe_b64decode(text + "="))
            cursor = cls(_EPOCH + timedelta(milliseconds=milliseconds), ObjectId(id_bytes))
        except (binascii.Error, struct.error, OverflowError, ValueError):
            raise ValueError(NOT_A_CURSOR) from None
        if cursor.encode() != text:  # one text per cursor: no other spelling is accepted
            raise ValueError(NOT_A_CURSOR)
        return cursor

    @classmethod
    def __get_pydantic_core_schema__(
        cls, _source: Any, _handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Validated from its text, documented as a string."""
        return core_schema.no_info_after_validator_function(
            cls.decode,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(cls.encode),
        )
