"""Stored generated images: a PNG and a JSON record per image, in OUTPUT_DIR.

The record is renamed into place last, so it exists only beside a complete image. The PNG
holds no ids or timings, so a request and seed give the same bytes."""

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
from imagegen.generation import hires as hires_fix
from imagegen.generation.hires import Hires
from imagegen.generation.requests import EditParameters, without_absent_fields
from imagegen.generation.schedulers import infotext_sampler
from imagegen.generation.stored_ids import is_digest, is_key_name
from imagegen.generation.upscale_request import UpscaleParameters

_ID = re.compile(r"^\d{8}T\d{12}Z-[0-9a-f]{6}$")


class LoraRan(BaseModel):
    """A LoRA the image ran with, at its weight: what a card shows and a request can send back."""

    model_config = ConfigDict(frozen=True)

    name: str
    weight: float


class GenerationParameters(BaseModel):
    """Enough to produce the image again. Stored in the record and the PNG."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    negative_prompt: str | None
    steps: int
    guidance: float
    width: int
    height: int
    seed: int
    # A1111's name for the sampler that ran. Older records hold a table id or a class name.
    scheduler: str
    model_id: str
    revision: str | None
    # An edit's inputs and strength (imagegen.generation.requests); absent: text-to-image.
    edit: EditParameters | None = None
    # The prompt's LoRAs as A1111 writes them: `name: short hash`, comma-separated; absent: none.
    lora_hashes: str | None = None
    # The LoRAs it ran with and their weights, in the prompt's order; absent: none.
    loras: tuple[LoraRan, ...] = ()
    # What an upscale ran (POST /upscale, A1111's extras); absent: a generation.
    upscale: UpscaleParameters | None = None
    # The hires fix that made the image at hires.size (width and height are its first pass's,
    # as A1111's Size); absent: none.
    hires: Hires | None = None

    # Text-to-image answers, records and PNGs carry no `edit` key at all, nor `lora_hashes`
    # or `loras` without LoRAs.
    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler):
        # No return annotation: pydantic then documents the model's own fields.
        data = without_absent_fields(self, handler, ("lora_hashes", "loras", "upscale", "hires"))
        return data

    def a1111_text(self) -> str:
        if self.upscale is not None:
            return upscale_text(self)
        return self._generation_text()

    def _generation_text(self) -> str:
        lines = [self.prompt]
        if self.negative_prompt:
            lines.append(f"Negative prompt: {self.negative_prompt}")
        # A1111's own words, so its "PNG Info" restores sampler and schedule type.
        lines.append(
            f"Steps: {self.steps}, Sampler: {infotext_sampler(self.scheduler)}, "
            f"CFG scale: {self.guidance:g}, "
            f"Seed: {self.seed}, Size: {self.width}x{self.height}, Model: {self.model_id}"
            + (f", Model hash: {self.revision[:10]}" if self.revision else "")
            + (f', Lora hashes: "{self.lora_hashes}"' if self.lora_hashes else "")
            + (
                f", Denoising strength: {self.edit.strength:g}"
                + (f", Mask blur: {self.edit.mask_blur}" if self.edit.mask else "")
                if self.edit
                else ""
            )
            + (f", {hires_fix.infotext(self.hires)}" if self.hires else "")
        )
        return "\n".join(lines)


def upscale_text(parameters: GenerationParameters) -> str:
    """An upscale's infotext as A1111's extras writes it: the source's own text when it was
    generated here, then the postprocessing's keys."""
    upscale = parameters.upscale
    assert upscale is not None, "an upscale's record"
    extras = f"Postprocess upscale by: {upscale.scale:g}, Postprocess upscaler: {upscale.upscaler}"
    if upscale.upscaler_2 is not None:
        extras += (
            f", Postprocess upscaler 2: {upscale.upscaler_2}, "
            f"Postprocess upscaler 2 visibility: {upscale.upscaler_2_visibility:g}"
        )
    if not parameters.model_id:  # an upload, or a source no longer stored
        return extras
    return f"{parameters._generation_text()}, {extras}"


class ImageRecord(BaseModel):
    """The JSON file beside a PNG, and the API's answer."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: str
    parameters: GenerationParameters
    device: str
    timings: dict[str, float]
    # The API key whose image it is; absent on an open service.
    key: str | None = None

    # An open service's records carry no `key` at all.
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


# A folder per API key with an empty file per image, so a key's listing reads names, not records.
KEY_INDEX = "by-key"
# Written once the index holds every earlier record (built at first use).
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
        """Stores an edit's input under its sha256, before its job is queued.

        Identical inputs are stored once. In distributed mode the worker reads it from the share."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.input_path(digest)
        if path.is_file():
            with contextlib.suppress(FileNotFoundError):  # pruned meanwhile: written anew
                os.utime(path)  # in use again: young for the prune's grace (services)
                return digest
        write_atomically(path, data)
        return digest

    def read_input(self, digest: str) -> bytes:
        """The FileNotFoundError names the input and where it looked, so the failed job says why."""
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
        """Each stored input's sha256 and its age in seconds."""
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
        """In no order. With `key`, only that key's, read through its index."""
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
        """Removes the record first, so a listing never shows one without its PNG.

        None when there is no such record, also for the loser of two deletes at once."""
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
        """Newest first, after `before`; with `key`, that key's only."""
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
        """A key's image ids, from its index; a share older than the index is indexed whole once."""
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
