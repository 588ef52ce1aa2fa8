"""MAX_BODY_BYTES for multipart bodies too.

Django's own limit skips file parts. This handler comes first in FILE_UPLOAD_HANDLERS. It
refuses an oversized body before any part is read (413)."""

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
