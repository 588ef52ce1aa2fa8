"""Reads of the image service: the model's state, jobs and stored images. Routes of every
protocol call these; they raise imagegen.errors for what does not exist."""

import json
import math
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core import signing
from PIL import Image

from imagegen.backend import Backend
from imagegen.errors import ImageLinkExpired, ImageLinkInvalid, ImageNotFound
from imagegen.generation.edit_inputs import input_digests
from imagegen.generation.estimates import Estimate
from imagegen.generation.images import GenerationParameters, ImageRecord, is_image_id
from imagegen.generation.job_board import CANCELLING, FINISHED, JobState, JobView
from imagegen.generation.previews import Preview
from imagegen.generation.requests import GenerationRequest
from imagegen.generation.upscale_request import upscale_inputs
from imagegen.model.download_size import documented_download_bytes
from imagegen.model.status import ModelStatus

# Image links are signed with SECRET_KEY under their own salt, so no other signed value of
# the project can pass for one.
_IMAGE_LINK = signing.TimestampSigner(salt="imagegen.image-link")


@dataclass(frozen=True)
class ImagePage:
    items: list[ImageRecord]
    next: str | None  # the next page's path, newest first; None on the last


def model_status(backend: Backend) -> ModelStatus:
    return backend.models.status()


def offered_models(backend: Backend, default: ModelStatus | None = None) -> list[dict[str, Any]]:
    """Each offered model's state as this process sees it, MODEL_ID's first (its state is
    `default`, the top level's, when given). In distributed mode, as the workers hold them."""
    default = default or model_status(backend)
    answer = []
    for model in backend.offered().models:
        loader = backend.loader_of(model)
        status = default if model.default else backend.handle_of(model).status()
        resident = status.state == "ready" if backend.distributed else loader.resident
        rules = model.rules
        answer.append(
            {
                "id": model.id, "revision": model.source.revision, "default": model.default,
                "state": status.state, "weights_on_share": status.weights_on_share,
                "resident": resident,
                "preset": {
                    "name": rules.preset, "steps": rules.steps, "guidance": rules.guidance,
                    "scheduler": rules.scheduler,
                    "max_steps": rules.max_steps, "max_guidance": rules.max_guidance,
                    "native_size": share_native_size(model.source.path),
                },
            }
        )  # fmt: skip
    return answer


def share_native_size(path: Path) -> list[int] | None:
    """The size a request that sends none gets, read from the configs on the share (the
    UNet's sample size times the VAE's scale, as the loaded pipeline computes it)."""
    try:
        unet = json.loads((path / "unet" / "config.json").read_text())
        vae = json.loads((path / "vae" / "config.json").read_text())
        side = int(unet["sample_size"]) * 2 ** (len(vae["block_out_channels"]) - 1)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [side, side]


def model_download_estimate(backend: Backend) -> int | None:
    """About how many bytes a cold pull of the configured model fetches, before any pull has
    asked the hub (imagegen.model.download_size); None when no figure is documented."""
    return documented_download_bytes(backend.loader.source)


def generation_rules(backend: Backend) -> dict[str, Any]:
    """The defaults and caps a generation request meets here, and the adapters
    (MODEL_ADAPTERS) the model's preset is recognised from (GET /api and GET /model/status
    show them, so a client can see which model preset applies without sending a request)."""
    rules = asdict(backend.jobs.rules)
    rules.pop("settings")  # what they were made from (GenerationRules.under), not a rule
    rules["schedulers"] = sorted(rules["schedulers"]) if rules["schedulers"] else None
    rules["adapters"] = [asdict(adapter) for adapter in backend.loader.source.adapters]
    return rules


@dataclass(frozen=True)
class SyncEstimate:
    """How long a request would take if sent now, and what a synchronous one is told."""

    estimate: Estimate | None  # None: nothing measured nor counted here yet
    limit_seconds: float | None  # the most a synchronous one may be estimated at; None: any
    refused: bool  # a synchronous request would be refused (services.generation_run)
    message: str  # for a person: the refusal's own message when refused
    # The estimate alone, in words ("About 9 s (4 steps at 64x64: 9 s)"); None without one.
    # What the page shows: it sends every request asynchronously, so no limit applies to it.
    about: str | None = None


def generation_estimate(
    backend: Backend, *, request: GenerationRequest, count: int, timeout: float
) -> SyncEstimate:
    """The estimate of `count` images of `request` submitted now (imagegen.generation.
    estimates), held to GEN_SYNC_REFUSE_FACTOR x `timeout` (the synchronous wait)."""
    found = backend.jobs.estimate(request, count=count)
    factor = settings.GEN_SYNC_REFUSE_FACTOR
    limit = factor * timeout if factor else None
    refused = found is not None and limit is not None and found.seconds > limit
    if found is None:
        counted_later = "; its work is counted once the model is on the share (POST /model/pull)"
        message = "No estimate yet: " + (
            "no image of the model's own size has been measured here yet (name a size, or "
            "make one image without one)"
            if request.size is None
            else "nothing has been measured here for this model (every image made is measured)"
        )
        message += counted_later
    elif refused and request.upscale is not None:
        assert limit is not None
        message = (
            f"This upscale would take about {_seconds(found.seconds)} here (a guess from the "
            f"network's counted work, docs/image-api.md), past the {limit:g} s a synchronous "
            f"request may take ({factor:g} x GEN_SYNC_TIMEOUT, {timeout:g} s), so it is refused "
            "now. Send it asynchronously (async=true, then follow /jobs/<id>), or ask for a "
            "smaller scale"
        )
    elif refused:
        assert limit is not None
        message = (
            f"This request would take about {_seconds(found.seconds)} here "
            f"({_breakdown(found)}), past the {limit:g} s a synchronous request may take "
            f"({factor:g} x GEN_SYNC_TIMEOUT, {timeout:g} s), so it is refused now rather than "
            "cancelled at GEN_SYNC_TIMEOUT. Send it asynchronously (POST /generate with "
            "async=true, then follow /jobs/<id>), or ask for fewer steps or a smaller size"
        )
    else:
        within = f"; a synchronous request may take up to {limit:g} s" if limit else ""
        message = f"About {_seconds(found.seconds)} ({_breakdown(found)}){within}"
    about = None if found is None else f"About {_seconds(found.seconds)} ({_breakdown(found)})"
    return SyncEstimate(found, limit, refused, message, about)


def _seconds(value: float) -> str:
    return f"{math.ceil(value)} s"


def _breakdown(found: Estimate) -> str:
    """What the estimate is made of, in words."""
    size = f"{found.size[0]}x{found.size[1]}"
    images = f"{found.count} images of " if found.count > 1 else ""
    each = " each" if found.count > 1 else ""
    text = f"{images}{found.steps} steps at {size}: {_seconds(found.image_seconds)}{each}"
    if found.queue_seconds - found.load_seconds >= 0.5:
        text += f", after {_seconds(found.queue_seconds - found.load_seconds)} for the jobs ahead"
    if found.load_seconds >= 0.5:
        text += f", after {_seconds(found.load_seconds)} to load its model first (a swap)"
    if found.basis != found.size:
        text += f"; scaled from {found.basis[0]}x{found.basis[1]} by its pixels"
    if found.counted:
        text += "; from the model's work counted over this machine's pace: nothing measured yet"
    return text


def visible(owner: str | None, seen_by: str | None) -> bool:
    """Whether a job or image of API key `owner` is shown to `seen_by`: a key that is not an
    admin (apikeys.auth.seen_by) sees its own only; None (an admin, API_TOKEN, an open
    service) sees everything. Another key's is answered 404, not 403: ids are not confirmed."""
    return seen_by is None or owner == seen_by


def job_get(backend: Backend, *, job_id: str, seen_by: str | None = None) -> JobView:
    job = backend.jobs.lookup(job_id)
    if job is None or not visible(job.key, seen_by):
        raise backend.job_not_found()
    return job


def webhook_record(backend: Backend, *, job_id: str) -> dict[str, Any] | None:
    """What the job's webhook did: its receiver, event, state and each try; None when the job
    named none."""
    return backend.webhooks.record(job_id)


def job_preview(backend: Backend, *, job_id: str, partial: int | None = None) -> Preview | None:
    """The job's latest preview, or its partial image number `partial` (an OpenAI stream's);
    None before it is made (or for a job not known)."""
    return backend.jobs.preview(job_id, partial)


def job_wait(
    backend: Backend, *, job_id: str, after: int, timeout: float, seen_by: str | None = None
) -> JobView:
    """The job as soon as it changes past revision `after` (a state, a phase, its place in
    the queue, a step), or as it is after `timeout` seconds: what the event stream watches,
    so it wakes for changes instead of polling."""
    view = backend.jobs.wait_change(job_id, after, timeout)
    if view is None or not visible(view.key, seen_by):
        raise backend.job_not_found()
    return view


def job_list(
    backend: Backend, *, limit: int, unfinished: bool = False, seen_by: str | None = None
) -> list[JobView]:
    """The newest jobs, or only the queued and running ones: those are read from the
    board's own list of them, so one that runs long while many newer ones finish is never
    beyond `limit`'s reach. A key's own are picked from every job remembered (JOBS_KEEP)."""
    jobs = backend.jobs
    if unfinished:
        found = jobs.unfinished()
    else:
        found = jobs.recent(limit if seen_by is None else settings.JOBS_KEEP)
    return [job for job in found if visible(job.key, seen_by)][:limit]


@dataclass(frozen=True)
class JobPage:
    items: list[JobView]
    next: str | None  # the next page's path, in job_list's order; None on the last


def job_page(
    backend: Backend,
    *,
    limit: int,
    before: str | None,
    unfinished: bool = False,
    seen_by: str | None = None,
) -> JobPage:
    """job_list's jobs in GET /images' paging shape: the `limit` after the job `before`, and
    the next page's path while more follow. Job ids are not ordered, so the page is cut from
    every job remembered (JOBS_KEEP) rather than by comparing ids; after a job no longer
    remembered, none is (the oldest are forgotten first): the page is empty."""
    jobs = backend.jobs
    found = jobs.unfinished() if unfinished else jobs.recent(settings.JOBS_KEEP)
    found = [job for job in found if visible(job.key, seen_by)]
    if before is not None:
        ids = [job.id for job in found]
        found = found[ids.index(before) + 1 :] if before in ids else []
    items = found[:limit]
    query = f"/jobs?paged=true&limit={limit}" + ("&unfinished=true" if unfinished else "")
    more = len(found) > limit
    return JobPage(items=items, next=f"{query}&before={items[-1].id}" if more else None)


def image_get(backend: Backend, *, image_id: str, seen_by: str | None = None) -> ImageRecord:
    record = backend.images.get(image_id)
    if record is None or not visible(record.key, seen_by):
        raise ImageNotFound()
    return record


def image_png(backend: Backend, *, image_id: str, seen_by: str | None = None) -> Path:
    if seen_by is not None:
        image_get(backend, image_id=image_id, seen_by=seen_by)  # another key's: 404
    path = backend.images.png_path(image_id)
    if not is_image_id(image_id) or not path.is_file():
        raise ImageNotFound()
    return path


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def image_input(backend: Backend, *, digest: str, seen_by: str | None = None) -> tuple[Path, str]:
    """An edit's stored input (the image or mask as sent) and its media type. A key that is
    not an admin (`seen_by`) gets only an input one of its own images or unfinished jobs
    names: another key's picture is as unknown to it as that key's images (404)."""
    if not _SHA256.match(digest):
        raise ImageNotFound()
    path = backend.images.input_path(digest)
    if not path.is_file() or not _names_input(backend, digest, seen_by):
        raise ImageNotFound()
    with Image.open(path) as image:
        return path, image.get_format_mimetype() or "application/octet-stream"


def _names_input(backend: Backend, digest: str, seen_by: str | None) -> bool:
    """Whether an image or unfinished job of key `seen_by` (None: anyone) used this input.
    Its unfinished jobs first (few); then its records, read through its index as GET /images
    reads them."""
    if seen_by is None:
        return True
    jobs = backend.jobs.unfinished()
    if any(digest in _inputs_of(job.parameters) for job in jobs if job.key == seen_by):
        return True
    records = backend.images.records(key=seen_by)
    return any(digest in _inputs_of(r.parameters) for r in records)


def _inputs_of(parameters: GenerationRequest | GenerationParameters) -> set[str]:
    return input_digests(parameters.edit) | upscale_inputs(parameters.upscale)


def image_page(
    backend: Backend, *, limit: int, before: str | None, seen_by: str | None = None
) -> ImagePage:
    records = backend.images.page(limit=limit, before=before, key=seen_by)
    more = len(records) == limit
    return ImagePage(
        items=records,
        next=f"/images?limit={limit}&before={records[-1].id}" if more else None,
    )


def _link_message(image_id: str, output_format: str | None, compression: int | None) -> str:
    """What a link's signature covers: the image and the format and quality it is served
    in, so a link cannot be turned into a request for other encodings of the image (each
    one CPU spent). A PNG link (no format) signs the id alone."""
    if output_format is None and compression is None:
        return image_id
    return f"{image_id}/{output_format or ''}/{'' if compression is None else compression}"


def image_link_signature(
    *, image_id: str, output_format: str | None = None, compression: int | None = None
) -> str:
    """The signature of a link to this one image in this format (its time and HMAC), valid
    IMAGE_URL_TTL seconds: what lets a client fetch the image without the token (Open WebUI
    fetches an OpenAI `url` answer with no credentials of ours)."""
    message = _link_message(image_id, output_format, compression)
    return _IMAGE_LINK.sign(message).removeprefix(f"{message}:")


def image_png_by_link(
    backend: Backend,
    *,
    image_id: str,
    signature: str,
    output_format: str | None = None,
    compression: int | None = None,
) -> Path:
    message = _link_message(image_id, output_format, compression)
    try:
        _IMAGE_LINK.unsign(f"{message}:{signature}", max_age=settings.IMAGE_URL_TTL)
    except signing.SignatureExpired:
        raise ImageLinkExpired() from None
    except signing.BadSignature:
        raise ImageLinkInvalid() from None
    return image_png(backend, image_id=image_id)


def client_jobs(backend: Backend, *, client: str) -> list[JobView]:
    """The jobs this client's protocol requests submitted (apikeys.auth.client_identity),
    oldest first, as far as the jobs are remembered (JOBS_KEEP)."""
    return backend.jobs.client_jobs(client)


@dataclass(frozen=True)
class BatchProgress:
    """Where this client's oldest unfinished request stands (A1111's /progress)."""

    jobs: list[JobView]  # its jobs, in order; empty when it has nothing under way
    done: int  # of those, the finished ones
    current: JobView | None  # the one running, else the next to run
    fraction: float  # of the whole request, 0 to 1
    eta_seconds: float | None
    interrupted: bool  # one of its jobs was cancelled or is being stopped


def client_progress(backend: Backend, *, client: str) -> BatchProgress:
    mine = client_jobs(backend, client=client)
    batch = next((job.batch for job in mine if job.state not in FINISHED), None)
    views = [job for job in mine if batch and job.batch == batch]
    if not views:
        return BatchProgress(
            jobs=[], done=0, current=None, fraction=0.0, eta_seconds=None, interrupted=False
        )
    done = sum(view.state in FINISHED for view in views)
    unfinished = [view for view in views if view.state not in FINISHED]
    current = next((v for v in unfinished if v.state is JobState.RUNNING), unfinished[0])
    running = sum(view.progress.fraction for view in views if view.state is JobState.RUNNING)
    fraction = (done + running) / len(views)
    started = [view.started_at for view in views if view.started_at is not None]
    eta = None
    if fraction > 0 and started:
        elapsed = time.time() - min(started).timestamp()
        eta = round(elapsed / fraction - elapsed, 3)
    interrupted = any(
        view.state is JobState.CANCELLED or view.phase == CANCELLING for view in views
    )
    return BatchProgress(jobs=views, done=done, current=current, fraction=round(fraction, 4),
                         eta_seconds=eta, interrupted=interrupted)  # fmt: skip
