"""Stored generated images: a PNG and a JSON record per image, in OUTPUT_DIR.

Both are written under temporary names and renamed, the PNG first and the record last: a
record exists only beside its complete image, and a crash leaves at most an orphan PNG that
is never listed. Ids sort by creation time, so the newest-first listing reads only the
records of the page it returns.

The PNG carries the generation parameters in its text chunks (`parameters`, in the form the
popular UIs read, and `imagegen` as JSON); only parameters, never ids or timings, so the same
request and seed give the same PNG bytes.
"""

import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from PIL import Image, PngImagePlugin
from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from core.timestamps import iso_ms
from imagegen.atomic_files import write_atomically
from imagegen.generation.requests import EditParameters, without_absent_edit
from imagegen.generation.schedulers import infotext_sampler
from imagegen.generation.stored_ids import is_digest, is_key_name

_ID = re.compile(r"^\d{8}T\d{12}Z-[0-9a-f]{6}$")


class GenerationParameters(BaseModel):
    """What produced an image: enough to produce it again. Stored in the record and the PNG,
    and answered as they are."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    negative_prompt: str | None
    steps: int
    guidance: float
    width: int
    height: int
    seed: int
    # A1111's name for the sampler that ran ("Euler a", "DPM++ 2M Karras", "PLMS": the
    # model's own); records written before these names hold a table id or a class name.
    scheduler: str
    model_id: str
    revision: str | None
    # An edit's inputs and strength (imagegen.generation.requests); absent: text-to-image.
    edit: EditParameters | None = None

    # Text-to-image answers, records and PNGs carry no `edit` key at all.
    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        # No return annotation: pydantic then documents the model's own fields.
        return without_absent_edit(self, handler)

    def a1111_text(self) -> str:
        lines = [self.prompt]
        if self.negative_prompt:
            lines.append(f"Negative prompt: {self.negative_prompt}")
        # A1111's own words, so its "PNG Info" restores the sampler and the schedule type.
        lines.append(
            f"Steps: {self.steps}, Sampler: {infotext_sampler(self.scheduler)}, "
            f"CFG scale: {self.guidance:g}, "
            f"Seed: {self.seed}, Size: {self.width}x{self.height}, Model: {self.model_id}"
            + (f", Model hash: {self.revision[:10]}" if self.revision else "")
            + (
                f", Denoising strength: {self.edit.strength:g}"
                + (f", Mask blur: {self.edit.mask_blur}" if self.edit.mask else "")
                if self.edit
                else ""
            )
        )
        return "\n".join(lines)


class ImageRecord(BaseModel):
    """One stored image's record: the JSON file beside its PNG, and the API's answer."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: str
    parameters: GenerationParameters
    device: str
    timings: dict[str, float]
    # The API key that made it (apikeys.auth), whose own it is; absent on an open service.
    key: str | None = None

    # Records and answers of an open service carry no `key` at all.
    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        if isinstance(data, dict) and data.get("key") is None:
            data.pop("key", None)
        return data


def new_image_id(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%S%f") + "Z-" + secrets.token_hex(3)


def is_image_id(value: str) -> bool:
    return bool(_ID.match(value))


def image_url(image_id: str) -> str:
    return f"/images/{image_id}.png"


def png_bytes(image: Image.Image, parameters: GenerationParameters) -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("parameters", parameters.a1111_text())
    info.add_text("imagegen", json.dumps(parameters.model_dump(), sort_keys=True))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", pnginfo=info)
    return buffer.getvalue()


# Beside the images: a folder per API key holding an empty file per image of the key, named
# by its id, so a key's listing reads a directory of names, not every record on the share.
KEY_INDEX = "by-key"
# Written once the index holds every record saved before it existed (built at its first use).
INDEX_COMPLETE = ".complete"


class ImageStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def save(
        self,
        png: bytes,
        parameters: GenerationParameters,
        *,
        device: str,
        timings: dict,
        key: str | None = None,
    ) -> ImageRecord:
        now = datetime.now(UTC)
        record = ImageRecord(
            id=new_image_id(now),
            created_at=iso_ms(now),
            parameters=parameters,
            device=device,
            timings={name: round(value, 3) for name, value in timings.items()},
            key=key,
        )
        write_atomically(self.png_path(record.id), png)
        write_atomically(
            self._record_path(record.id), json.dumps(record.model_dump(), indent=2).encode()
        )
        self._index(record)
        return record

    def save_input(self, data: bytes) -> str:
        """Stores an edit's input as sent, under its sha256 (the same file twice is stored
        once), before its job is queued: in distributed mode the worker reads it from here,
        on the share. Answers the sha256."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.input_path(digest)
        if path.is_file():
            with contextlib.suppress(FileNotFoundError):  # pruned meanwhile: written anew
                os.utime(path)  # in use again: young for the prune's grace (services)
                return digest
        write_atomically(path, data)
        return digest

    def read_input(self, digest: str) -> bytes:
        """An input's bytes, or a FileNotFoundError naming the input and where it was
        looked for (a worker whose share lacks it fails the job saying so)."""
        path = self.input_path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"the edit's input {digest} is not in {path.parent}") from None

    def input_path(self, digest: str) -> Path:
        if not is_digest(digest):  # never a path: the store's files only
            raise ValueError(f"not an input's sha256: {digest!r}")
        return self.root / "inputs" / digest

    def input_ages(self) -> dict[str, float]:
        """Every stored input: its sha256 and seconds since it was written."""
        folder = self.root / "inputs"
        if not folder.is_dir():
            return {}
        now = time.time()
        ages = {}
        for path in folder.iterdir():
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                if path.is_file() and is_digest(path.name):
                    ages[path.name] = now - path.stat().st_mtime
        return ages

    def remove_input(self, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.input_path(digest).unlink()

    def records(self, *, key: str | None = None) -> Iterator[ImageRecord]:
        """Every stored record, in no order; with `key`, that API key's, read through its
        index (the other keys' records are not read)."""
        if not self.root.is_dir():
            return
        if key is not None:
            ids = self._key_ids(key)
        else:
            ids = [path.name[: -len(".json")] for path in self.root.glob("*.json")]
        for image_id in ids:
            if (record := self.get(image_id)) is not None and (key is None or record.key == key):
                yield record

    def get(self, image_id: str) -> ImageRecord | None:
        if not is_image_id(image_id):
            return None
        try:
            return ImageRecord.model_validate_json(self._record_path(image_id).read_bytes())
        except (OSError, ValidationError):
            return None

    def delete(self, image_id: str) -> ImageRecord | None:
        """Removes the image: its record first, so a listing never shows a record whose PNG
        is gone (a crash between the two leaves an orphan PNG, as a crash in save does).
        None when there is no such record, also for the second of two deletes at once:
        removing the record is what decides."""
        record = self.get(image_id)
        if record is None:
            return None
        try:
            self._record_path(image_id).unlink()
        except FileNotFoundError:
            return None
        self.png_path(image_id).unlink(missing_ok=True)
        if record.key is not None:
            self._key_folder(record.key).joinpath(image_id).unlink(missing_ok=True)
        return record

    def png_path(self, image_id: str) -> Path:
        return self.root / f"{image_id}.png"

    def page(
        self, *, limit: int, before: str | None = None, key: str | None = None
    ) -> list[ImageRecord]:
        """Newest first; `before` is the id the previous page ended with; with `key`, only
        that API key's images."""
        if not self.root.is_dir():
            return []
        if key is not None:  # its index: the other keys' records are not read
            ids = sorted(self._key_ids(key), reverse=True)
        else:
            ids = sorted((p.name[: -len(".json")] for p in self.root.glob("*.json")), reverse=True)
        if before is not None:
            ids = [i for i in ids if i < before]
        records = []
        for image_id in ids:
            record = self.get(image_id)
            if record is not None and (key is None or record.key == key):
                records.append(record)
            if len(records) == limit:
                break
        return records

    def _record_path(self, image_id: str) -> Path:
        return self.root / f"{image_id}.json"

    def _key_folder(self, key: str) -> Path:
        if not is_key_name(key):  # a key's name (apikeys) or API_TOKEN: never a path
            raise ValueError(f"not a key's name: {key!r}")
        return self.root / KEY_INDEX / key

    def _index(self, record: ImageRecord) -> None:
        if record.key is not None:
            folder = self._key_folder(record.key)
            folder.mkdir(parents=True, exist_ok=True)
            folder.joinpath(record.id).touch()

    def _key_ids(self, key: str) -> list[str]:
        """The ids of a key's images, from its index; a share written before the index
        existed is indexed whole once, at the first listing of any key (every record read
        that one time). A name left by a record deleted meanwhile finds no record: skipped."""
        complete = self.root / KEY_INDEX / INDEX_COMPLETE
        if not complete.exists():
            for record in self.records():
                self._index(record)
            complete.parent.mkdir(parents=True, exist_ok=True)
            complete.touch()
        folder = self._key_folder(key)
        if not folder.is_dir():
            return []
        return [path.name for path in folder.iterdir() if is_image_id(path.name)]
