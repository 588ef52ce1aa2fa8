"""MAX_BODY_BYTES for multipart bodies too.

Why: Django's DATA_UPLOAD_MAX_MEMORY_SIZE counts a body without its file parts, so an
`image` part of any size was read (spooled to disk, then into memory by the edit routes)
whatever MAX_BODY_BYTES said. This upload handler, first in FILE_UPLOAD_HANDLERS, refuses a
multipart body whose length is past the limit before any part is read; a chunked body has
its length from core.chunked (at most one byte past the limit). The refusal is Django's
RequestDataTooBig, which the API answers 413 in each route's own error shape.
"""

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadhandler import FileUploadHandler


class BodyLimit(FileUploadHandler):
    def handle_raw_input(
        self, input_data: Any, META: Any, content_length: int, boundary: Any, encoding: Any = None
    ) -> None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and content_length > limit:
            raise RequestDataTooBig(f"the body is {content_length} bytes, past {limit}")

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        return raw_data  # the next handler stores it

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler makes the file
