"""What the image service does on request: pull the model, run generations, cancel them.

Routes of every protocol (the native form API, and the OpenAI and AUTOMATIC1111 adapters and
the page that come next) call these, so each rule (the queue's bound, the synchronous wait
and its timeout, what a finished job answers) lives here once. They raise imagegen.errors,
which config/api.py turns into answers.
"""

import contextlib
import functools
import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from functools import cache
from typing import NamedTuple, ParamSpec, TypeVar

from django.conf import settings

from apikeys.selectors import Caller, key_webhook_secret
from core.errors import FieldError, ServiceError
from core.request_context import current_surface
from imagegen import backend, metrics, selectors
from imagegen.errors import (
    BatchTimeout,
    EventStreamsBusy,
    ImageNotFound,
    JobCancelled,
    JobFailed,
    JobFinished,
    KeyQueueLimit,
    KeyRateLimit,
    KeyStreamsBusy,
    PastSyncTimeout,
    SyncTimeout,
    SyncWaitersBusy,
)
from imagegen.generation import framing
from imagegen.generation.edit_inputs import (
    INPUT_PIXELS_FACTOR,
    MARKS_NOTHING,
    check_inputs,
    input_digests,
    picture_mask,
)
from imagegen.generation.images import ImageRecord
from imagegen.generation.job_board import FINISHED, JobState, JobView
from imagegen.generation.parameters import working_size
from imagegen.generation.requests import SEED_MAX, EditRequest, GenerationRequest, edit_settings
from imagegen.generation.shared_runs import SharedRun
from imagegen.webhooks.addresses import Allowance, UrlRefused, check_url
from imagegen.webhooks.delivery import Dispatcher, Policy
from imagegen.webhooks.outbox import Watch


def model_pull() -> bool:
    """Starts the download-and-load job unless one runs; False when already ready. In
    distributed mode the download runs here once and every running worker loads."""
    return backend.models().pull()


def edit_request(
    *,
    request: GenerationRequest,
    image: bytes,
    mask: bytes | None,
    strength: float | None = None,
    mask_blur: int | None = None,
    resize_mode: int | None = None,
    only_masked: bool = False,
    only_masked_padding: int | None = None,
) -> GenerationRequest:
    """`request` made an edit of `image` (with `mask`, an inpainting): every rule checked
    first (a FieldError naming the field otherwise, with nothing written), then both files
    stored (the image store, on the share in distributed mode: the job's request names them
    by sha256). Its size is the one sent, else the input's as the model takes it
    (imagegen.generation.parameters.working_size), so the job shows it from the start; the
    input is brought to it by `resize_mode` (any value but 1 and 2 as 0). A setting not sent
    (None) takes its default (imagegen.generation.requests.edit_settings).

    `only_masked`: "only masked" with `only_masked_padding`. The answer is then the
    input's size as the model takes it, and a size sent is the one the cut-out is worked at
    (A1111's inpaint_full_res); the cut-out is decided here, from the mask, so the record
    says what ran from the start. Without a mask it changes nothing."""
    asked = edit_settings(
        strength=strength, mask_blur=mask_blur, resize_mode=resize_mode,
        only_masked=only_masked, only_masked_padding=only_masked_padding,
    )  # fmt: skip
    low, high = settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE
    checked = check_inputs(image, mask, max_pixels=INPUT_PIXELS_FACTOR * high * high)
    mode, padding = asked.resize_mode, asked.only_masked_padding
    size = request.size or working_size(checked.size, low=low, high=high)
    region = None
    only_masked = padding is not None and checked.mask is not None
    if only_masked:
        size = working_size(checked.size, low=low, high=high)
    if checked.mask is not None:
        # A mark that the framing cuts away (resize_mode 1) or a resize blurs to nothing
        # marks nothing either: refused as the mask as sent would be (check_inputs).
        framed = picture_mask(checked.mask, size=size, resize_mode=mode)
        if framed.getextrema()[1] == 0:
            where = f"once brought to {size[0]}x{size[1]} (resize_mode {mode})"
            raise FieldError("mask", f"{where}, {MARKS_NOTHING}")
        if only_masked:
            region = framing.only_masked_region(
                framed, padding=padding or 0, reach=2 * asked.mask_blur,
                size=request.size, low=low, high=high,
            )  # fmt: skip
    store = backend.image_store()
    edit = EditRequest(
        source=store.save_input(checked.image),
        mask=None if checked.mask is None else store.save_input(checked.mask),
        strength=asked.strength,
        mask_blur=asked.mask_blur,
        resize_mode=mode,
        only_masked=region,
    )
    return request.model_copy(update={"edit": edit, "size": size})


def key_admit(*, key: str, max_queued: int | None, per_minute: int | None, count: int) -> None:
    """Whether an API key may queue `count` more images now (429 if not): `max_queued`
    against its jobs queued or running on the board (every replica's in distributed mode),
    then `per_minute` against its count this minute, counted here when admitted. The first
    answers a request for more than the key has left before anything is queued; what holds
    the limit is each job's submit, which counts the key's jobs in the step that queues it
    (`key_limit`), so requests of one key at the same instant cannot pass it together. The
    second is exact (imagegen.generation.rates)."""
    if max_queued is not None:
        mine = sum(1 for job in backend.jobs().unfinished() if job.key == key)
        if mine + count > max_queued:
            raise KeyQueueLimit(max_queued, count)
    if per_minute is not None:
        wait = backend.rates().take(key, count, per_minute)
        if wait is not None:
            raise KeyRateLimit(per_minute, count, wait)


class KeyOwner(NamedTuple):
    """The API key a request's jobs belong to (None: an open service) and its --max-queued,
    which each job's submit counts (JobBoard.submit's `key_limit`)."""

    key: str | None
    limit: int | None


P = ParamSpec("P")
T = TypeVar("T")


def _prunes_refused_inputs(call: Callable[P, T]) -> Callable[P, T]:
    """An edit refused or ended without an image (its `request`'s inputs stored already:
    edit_request) leaves no input behind that nothing names (_prune_inputs)."""

    @functools.wraps(call)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return call(*args, **kwargs)
        except ServiceError:
            request = kwargs.get("request")
            if isinstance(request, GenerationRequest) and request.edit is not None:
                _prune_inputs(input_digests(request.edit))
            raise

    return wrapped


@cache
def _waiter_places() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(settings.SYNC_WAITERS_MAX)


def _sync_waiter(call: Callable[P, T]) -> Callable[P, T]:
    """A synchronous request holds one of SYNC_WAITERS_MAX places while it waits for its
    images, or is refused at once (503 with Retry-After) before anything is queued: each
    holds a thread until its images are made, and joiners of one job (identical requests,
    one Idempotency-Key) are no exception, so without a bound below the thread count a few
    clients hold them all."""

    @functools.wraps(call)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> T:
        with sync_waiter_place():
            return call(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def sync_waiter_place() -> Iterator[None]:
    """One of SYNC_WAITERS_MAX places, held for the block (a caller that waits for its image
    itself: an MCP tool), or SyncWaitersBusy at once: the bound _sync_waiter holds."""
    places = _waiter_places()
    if not places.acquire(blocking=False):
        raise SyncWaitersBusy()
    try:
        yield
    finally:
        places.release()


@_prunes_refused_inputs
def generation_submit(
    *,
    request: GenerationRequest,
    job_id: str | None = None,
    client: str | None = None,
    key: str | None = None,
    key_limit: int | None = None,
) -> JobView:
    """Queues a generation, or refuses it at once (nothing to load, queue full, the key's
    `key_limit` reached); `job_id`: one chosen before (a keyed run's, registered first:
    imagegen.generation.shared_runs); `client`: a protocol request's client (an OpenAI
    stream), whose /progress then shows it, as a batch of one; `key`: the API key it belongs
    to (config.auth), `key_limit` its --max-queued (JobBoard.submit)."""
    batch = None if client is None else secrets.token_hex(8)
    job = backend.jobs().submit(
        request, job_id=job_id, owner=client, batch=batch, key=key, key_limit=key_limit
    )
    metrics.JOBS_SUBMITTED.labels(surface=current_surface()).inc()
    return job


def _failure(job: JobView) -> ServiceError:
    return job.failure or JobFailed(job.error)


def _image(job: JobView) -> ImageRecord:
    """A succeeded job's image: every board sets it with the state (execution.run_job)."""
    assert job.image is not None, f"job {job.id} succeeded without its image"
    return job.image


def generation_result(*, job: JobView, timeout: float | None) -> ImageRecord:
    """Waits for the job's image. A client that stops waiting (the timeout) has its job
    cancelled, since nobody will collect the image; a job that finished in the meantime
    still answers with its image."""
    return _answer(backend.jobs().wait(job.id, timeout) or job, alone=True)


def _answer(job: JobView, *, alone: bool) -> ImageRecord:
    """The image of a job waited for, or why there is none. One still unfinished (the
    timeout) is cancelled when nobody else (`alone`) waits for it."""
    jobs = backend.jobs()
    if job.state not in FINISHED:
        if not alone:
            raise BatchTimeout([job.id], cancelled=False)
        with contextlib.suppress(JobFinished):  # it may have finished just now
            jobs.cancel(job.id)
        job = jobs.lookup(job.id) or job
        if job.state not in FINISHED or job.state is JobState.CANCELLED:
            raise SyncTimeout(job.id)
    if job.state is JobState.CANCELLED:
        raise JobCancelled()
    if job.state is JobState.FAILED:
        raise _failure(job)
    return _image(job)  # neither queued, running, cancelled nor failed: succeeded


def _refuse_past_timeout(request: GenerationRequest, count: int, timeout: float | None) -> None:
    """A synchronous request that the estimate puts past GEN_SYNC_REFUSE_FACTOR x its
    `timeout` is refused now, with nothing queued, rather than cancelled at the timeout (a
    504 minutes later); with nothing measured yet nothing is refused."""
    if timeout is None or not settings.GEN_SYNC_REFUSE_FACTOR:  # 0: none refused, none asked
        return
    verdict = selectors.generation_estimate(request=request, count=count, timeout=timeout)
    if verdict.refused:
        raise PastSyncTimeout(verdict.message)


@_prunes_refused_inputs
@_sync_waiter
def generation_run(
    *,
    request: GenerationRequest,
    timeout: float | None,
    client: str = "",
    idempotency_key: str | None = None,
    key: str | None = None,
    key_limit: int | None = None,
) -> tuple[JobView, ImageRecord]:
    """A synchronous generation: submitted as a job like any other, then waited for; refused
    at once when it cannot finish in time (asynchronous ones are taken as they come). With
    an Idempotency-Key, a retry joins the job its first attempt queued (_keyed_job)."""
    if idempotency_key is not None:
        job, last = _keyed_job(
            request, timeout, client, idempotency_key, KeyOwner(key, key_limit), wait=True
        )
        return job, _answer(job, alone=last)
    _refuse_past_timeout(request, 1, timeout)
    job = generation_submit(request=request, key=key, key_limit=key_limit)
    return job, generation_result(job=job, timeout=timeout)


@_prunes_refused_inputs
def generation_submit_waited(
    *,
    request: GenerationRequest,
    timeout: float,
    key: str | None = None,
    key_limit: int | None = None,
) -> JobView:
    """The job of a synchronous generation whose caller waits for it itself (an MCP tool,
    which reports its progress meanwhile) and then asks generation_result with what is left
    of `timeout`: refused at once when it cannot finish within `timeout`, as
    generation_run refuses."""
    _refuse_past_timeout(request, 1, timeout)
    return generation_submit(request=request, key=key, key_limit=key_limit)


@_prunes_refused_inputs
def generation_waited_result(
    *, request: GenerationRequest, job: JobView, timeout: float
) -> ImageRecord:
    """generation_result for the job generation_submit_waited queued for `request`: an edit
    that ends without its image (the timeout) leaves no input behind, as generation_run's."""
    return generation_result(job=job, timeout=timeout)


@_prunes_refused_inputs
def generation_submit_keyed(
    *,
    request: GenerationRequest,
    client: str,
    idempotency_key: str,
    key: str | None = None,
    key_limit: int | None = None,
) -> JobView:
    """An asynchronous POST /generate with an Idempotency-Key: its retry answers the job
    the first attempt queued (_keyed_job), not a second one."""
    owner = KeyOwner(key, key_limit)
    return _keyed_job(request, None, client, idempotency_key, owner, wait=False)[0]


def _keyed_job(
    request: GenerationRequest,
    timeout: float | None,
    client: str,
    idempotency_key: str,
    owner: KeyOwner,
    *,
    wait: bool,
) -> tuple[JobView, bool]:
    """POST /generate with an Idempotency-Key: the first request from this client with the
    key queues the job; a retry with the same key (after a timeout on the client's side, a
    dropped connection, or a 503 while the job store was unreachable, when the job may have
    been queued and run on) joins that job, queued, running or succeeded, on any replica,
    for GEN_SYNC_TIMEOUT + 60 s after its last attempt; a job that failed or was cancelled
    is queued anew (_joinable). The body does not count: the key decides alone, as under
    /v1. Returns the job (when `wait`, once finished or at `timeout`) and whether no other
    attempt waits for it still (only then may the timeout cancel it). `owner`: the API key
    the job belongs to and its --max-queued."""
    key = _run_key(request, 1, client, f"generate:{idempotency_key}")

    def submit(job_ids: list[str]) -> None:
        if wait:
            _refuse_past_timeout(request, 1, timeout)
        generation_submit(request=request, job_id=job_ids[0], key=owner.key, key_limit=owner.limit)

    runs = backend.runs()
    run = runs.join_or_submit(key, submit=submit, unfinished=_joinable, keep=True)
    try:
        job = _views(run.jobs)[0]
        if wait:
            job = backend.jobs().wait(job.id, timeout) or job
    finally:
        last = runs.leave(run)
    return job, last


def _joinable(job_ids: list[str]) -> bool:
    """Whether a retry with the same Idempotency-Key may join these jobs: none failed, was
    cancelled or was forgotten (JOBS_KEEP); a retry of one of those queues anew."""
    jobs = backend.jobs()
    views = [jobs.lookup(job_id) for job_id in job_ids]
    return all(
        view is not None and view.state not in (JobState.FAILED, JobState.CANCELLED)
        for view in views
    )


def image_delete(*, image_id: str, seen_by: str | None = None) -> ImageRecord:
    """Removes a stored image (its PNG and its record) from OUTPUT_DIR, the one store of
    both job modes; answers the record it removed. The job that made it still names it in
    GET /jobs until the job is forgotten (JOBS_KEEP); its image_url then answers 404. An
    edit's inputs go with it unless another image or job names them (_prune_inputs)."""
    selectors.image_get(image_id=image_id, seen_by=seen_by)  # another key's: 404
    record = backend.image_store().delete(image_id)
    if record is None:
        raise ImageNotFound()
    _prune_inputs(input_digests(record.parameters.edit))
    return record


# An input named by no image and no unfinished job is removed once this old: younger, its
# request may still be on its way to being queued (save_input makes a reused one young).
INPUT_GRACE_SECONDS = 600


def _prune_inputs(freed: set[str]) -> None:
    """Removes the inputs no stored image and no unfinished job names: those of `freed`
    (a deleted edit's, a refused edit's) at once, any other once INPUT_GRACE_SECONDS old
    (left by a crash). Nothing to free, nothing is read. An edit's source is the
    user's picture: it does not outlive what was made from it."""
    if not freed:  # a text-to-image delete: no scan of every record on the share for it
        return
    store = backend.image_store()
    ages = store.input_ages()
    if not ages:
        return
    named: set[str] = set()
    for job in backend.jobs().unfinished():
        named |= input_digests(job.parameters.edit)
    for record in store.records():
        named |= input_digests(record.parameters.edit)
    for digest, age in ages.items():
        if digest not in named and (digest in freed or age > INPUT_GRACE_SECONDS):
            store.remove_input(digest)


def job_cancel(*, job_id: str, seen_by: str | None = None) -> JobView:
    selectors.job_get(job_id=job_id, seen_by=seen_by)  # another key's: 404
    job = backend.jobs().cancel(job_id)
    if job is None:
        raise backend.job_not_found()
    return job


@cache
def _stream_places() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(settings.EVENT_STREAMS_MAX)


_key_streams: dict[str, int] = {}  # open event streams of each named key, in this process
_key_streams_lock = threading.Lock()


def event_stream_place(key: str | None = None) -> Callable[[], None]:
    """Takes one of the EVENT_STREAMS_MAX places for an open event stream, or refuses at
    once (503 with Retry-After): each stream holds a worker thread for minutes, and a bound
    below the thread count keeps threads for /health and every other route. A named `key`
    (config.auth.stream_key) holds at most KEY_STREAMS_MAX of them, so one key cannot take
    every place. Returns what gives the place back (once, however often it is called)."""
    if key is not None:
        with _key_streams_lock:
            if _key_streams.get(key, 0) >= settings.KEY_STREAMS_MAX:
                raise KeyStreamsBusy()
            _key_streams[key] = _key_streams.get(key, 0) + 1
    places = _stream_places()
    if not places.acquire(blocking=False):
        _give_back_key_stream(key)
        raise EventStreamsBusy()
    metrics.EVENT_STREAMS_OPEN.inc()
    once = threading.Lock()

    def give_back() -> None:
        if once.acquire(blocking=False):
            places.release()
            _give_back_key_stream(key)
            metrics.EVENT_STREAMS_OPEN.dec()

    return give_back


def _give_back_key_stream(key: str | None) -> None:
    if key is None:
        return
    with _key_streams_lock:
        left = _key_streams.pop(key, 1) - 1
        if left:
            _key_streams[key] = left


# --- synchronous requests of the protocol adapters (OpenAI, AUTOMATIC1111) ----------------


def _run_key(
    request: GenerationRequest, count: int, client: str, idempotency_key: str | None
) -> str:
    what = (
        f"key:{idempotency_key}" if idempotency_key else f"body:{count}:{request.model_dump_json()}"
    )
    return hashlib.sha256(f"{client}\n{what}".encode()).hexdigest()


def _nth_seed(request: GenerationRequest, index: int) -> GenerationRequest:
    """The request of the index-th image: seed, seed+1, ... when a seed is given (wrapping
    at SEED_MAX); with none, each job draws its own."""
    if request.seed is None or index == 0:
        return request
    return request.model_copy(update={"seed": (request.seed + index) % (SEED_MAX + 1)})


def _submit_batch(
    request: GenerationRequest,
    job_ids: list[str],
    client: str,
    timeout: float | None,
    owner: KeyOwner,
) -> None:
    """A job under each id or none: refused whole when they cannot all finish within
    `timeout`; when the queue fills part-way (or the key's --max-queued is reached: `owner`,
    its name and limit), the ones queued are cancelled (they never run) and the request is
    refused as a whole."""
    _refuse_past_timeout(request, len(job_ids), timeout)
    jobs_queue, batch, jobs = backend.jobs(), secrets.token_hex(8), []
    try:
        for index, job_id in enumerate(job_ids):
            request_n = _nth_seed(request, index)
            jobs_queue.submit(
                request_n, owner=client, batch=batch, job_id=job_id, key=owner.key,
                key_limit=owner.limit,
            )  # fmt: skip
            metrics.JOBS_SUBMITTED.labels(surface=current_surface()).inc()
            jobs.append(job_id)
    except Exception:  # the queue filled up, the model went away, the store stopped answering
        # Every job tried, the failing one too (the store may have taken it and lost its
        # answer): none is left to run for nobody. A cancel the store cannot take is given up:
        # the request's own error is the answer.
        for job_id in job_ids[: len(jobs) + 1]:
            with contextlib.suppress(Exception):
                jobs_queue.cancel(job_id)
        raise


def _views(job_ids: list[str]) -> list[JobView]:
    """The jobs as they are now; one forgotten meanwhile (JOBS_KEEP) counts as failed."""
    jobs = backend.jobs()
    return [jobs.lookup(job_id) or _forgotten(job_id) for job_id in job_ids]


def _forgotten(job_id: str) -> JobView:
    raise JobFailed(f"job {job_id} is no longer known")


def _join_or_submit(
    key: str,
    request: GenerationRequest,
    count: int,
    client: str,
    timeout: float | None,
    owner: KeyOwner,
    *,
    keyed: bool,
) -> SharedRun:
    """A twin's run is joined whatever its estimate (its jobs were taken already); a new one
    is estimated first."""

    def submit(job_ids: list[str]) -> None:
        _submit_batch(request, job_ids, client, timeout, owner)

    if keyed:  # as POST /generate's key (_keyed_job): a retry joins its twin, even finished
        return backend.runs().join_or_submit(
            key, submit=submit, unfinished=_joinable, count=count, keep=True
        )
    return backend.runs().join_or_submit(
        key,
        submit=submit,
        unfinished=lambda jobs: any(_unfinished(job_id) for job_id in jobs),
        count=count,
    )


def _unfinished(job_id: str) -> bool:
    """A job forgotten meanwhile (JOBS_KEEP) counts as finished: the request queues anew."""
    job = backend.jobs().lookup(job_id)
    return job is not None and job.state not in FINISHED


def _wait(job_ids: list[str], timeout: float | None, *, partial: bool) -> None:
    """Until every job is done, one fails, or (unless `partial`) one is cancelled."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for job_id in job_ids:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        job = backend.jobs().wait(job_id, remaining)
        if job is None or job.state not in FINISHED or job.state is JobState.FAILED:
            return
        if job.state is JobState.CANCELLED and not partial:
            return


def _cancel_unfinished(jobs: list[JobView]) -> list[str]:
    """Cancels the jobs still queued or running; returns their ids."""
    cancelled = []
    for job in jobs:
        if job.state not in FINISHED:
            with contextlib.suppress(JobFinished):  # it may have finished just now
                backend.jobs().cancel(job.id)
                cancelled.append(job.id)
    return cancelled


@_prunes_refused_inputs
@_sync_waiter
def generation_run_shared(
    *,
    request: GenerationRequest,
    count: int,
    client: str,
    idempotency_key: str | None,
    timeout: float | None,
    partial: bool = False,
    key: str | None = None,
    key_limit: int | None = None,
) -> list[ImageRecord]:
    """A synchronous request for `count` images, as the OpenAI and A1111 routes make: one
    ordinary job per image (seed, seed+1, ... when a seed is given), all in the one queue.

    Clients of these protocols wait, and retry when they stop waiting: a request from the
    same client (config.auth.client_identity) with the same Idempotency-Key, or without one
    the same request, that arrives while its twin's jobs are queued or running joins them
    instead of queueing them again, and gets the same images; with a key, also once they
    succeeded (a retry of an answer lost on the way), as POST /generate's (_keyed_job). A
    new request whose estimate is past GEN_SYNC_REFUSE_FACTOR x `timeout` is refused at
    once (PastSyncTimeout). A
    request that gives up (`timeout`) cancels the jobs only if nobody else waits for them.

    A job cancelled meanwhile (DELETE /jobs/<id>, an A1111 interrupt) makes the answer 409,
    or with `partial` leaves its image out (A1111 answers what was finished). `key`: the
    API key the jobs belong to, `key_limit` its --max-queued (KeyOwner)."""
    run_key = _run_key(request, count, client, idempotency_key)
    owner = KeyOwner(key, key_limit)
    run = _join_or_submit(
        run_key, request, count, client, timeout, owner, keyed=bool(idempotency_key)
    )
    try:
        _wait(run.jobs, timeout, partial=partial)
    finally:
        last = backend.runs().leave(run)
    jobs = _views(run.jobs)
    failed = next((job for job in jobs if job.state is JobState.FAILED), None)
    cancelled = any(job.state is JobState.CANCELLED for job in jobs)
    if failed is not None or (cancelled and not partial):
        if last:
            _cancel_unfinished(jobs)
        raise _failure(failed) if failed else JobCancelled()
    if not all(job.state in FINISHED for job in jobs):  # the timeout
        if not last:
            raise BatchTimeout([j.id for j in jobs if j.state not in FINISHED], cancelled=False)
        if stopped := _cancel_unfinished(jobs):
            raise BatchTimeout(stopped, cancelled=True)
        jobs = _views(run.jobs)  # every one finished just now
    return [_image(job) for job in jobs if job.state is JobState.SUCCEEDED]


def generation_interrupt(*, client: str, running_only: bool = False) -> list[str]:
    """Cancels this client's unfinished jobs (A1111's interrupt), or only its running one
    (A1111's skip: the rest of its batch goes on); never another client's. Returns their ids."""
    jobs = backend.jobs()
    stopped = []
    for job in selectors.client_jobs(client=client):
        if job.state in FINISHED or (running_only and job.state is not JobState.RUNNING):
            continue
        with contextlib.suppress(JobFinished):
            jobs.cancel(job.id)
            stopped.append(job.id)
    return stopped


SYNC_WEBHOOK = "only with async=true: a synchronous request has its answer"
NO_SECRET = (
    "no secret to sign webhooks with: set WEBHOOK_SECRET (or give the key its own: "
    "manage.py keys webhook-secret NAME)"
)


class WebhookPlan(NamedTuple):
    """The webhook a job about to be submitted will tell, checked before it is queued."""

    url: str
    origin: str
    signer: str  # "service" (WEBHOOK_SECRET) or "key:<name>" (the key's own secret)


def webhook_plan(
    *, url: str | None, caller: Caller | None, origin: str, asynchronous: bool
) -> WebhookPlan | None:
    """The request's `webhook_url`, else (asynchronous jobs only) its key's `--webhook`,
    else WEBHOOK_URL; None when there is none. Refused now, nothing queued (400 naming where
    it came from and the rule): a URL the address rules refuse, one on a synchronous
    request, or no secret to sign with."""
    field = "webhook_url"
    if url and not asynchronous:
        raise FieldError(field, SYNC_WEBHOOK)
    if not url and asynchronous:
        if caller is not None and caller.webhook_url:
            url, field = caller.webhook_url, "the key's --webhook"
        elif settings.WEBHOOK_URL:
            url, field = settings.WEBHOOK_URL, "WEBHOOK_URL"
    if not url:
        return None
    signer = f"key:{caller.name}" if caller is not None and caller.signs_webhooks else "service"
    if signer == "service" and not settings.WEBHOOK_SECRET:
        raise FieldError(field, NO_SECRET)  # before the URL's name is looked up
    try:
        check_url(url, Allowance.parse(settings.WEBHOOK_ALLOW))
    except UrlRefused as refused:
        raise FieldError(field, refused.rule) from None
    return WebhookPlan(url, origin, signer)


def webhook_watch(*, job_id: str, plan: WebhookPlan) -> None:
    """Tells the job's webhook when it ends (imagegen.webhooks.delivery notices it)."""
    backend.webhook_outbox().watch(Watch(job_id, plan.url, plan.origin, plan.signer))


def webhook_secrets(signer: str) -> list[str]:
    """The secrets that sign for `signer` now: the key's own, else WEBHOOK_SECRET's."""
    if signer.startswith("key:") and (own := key_webhook_secret(name=signer[4:])):
        return [own]
    return list(settings.WEBHOOK_SECRET)


def webhooks_start(*, describe: Callable[[JobView, Watch], dict]) -> None:
    """The process's webhook senders, started once (imagegen.apps); they also send what a
    stopped process left in the outbox."""
    policy = Policy(
        allow=Allowance.parse(settings.WEBHOOK_ALLOW),
        retry_seconds=settings.WEBHOOK_RETRY_SECONDS,
        senders=settings.WEBHOOK_SENDERS,
    )
    _dispatcher(policy, describe).start()


@cache
def _dispatcher(policy: Policy, describe: Callable[[JobView, Watch], dict]) -> Dispatcher:
    return Dispatcher(backend.webhook_outbox(), backend.jobs(), policy, describe=describe,
                      secrets_for=webhook_secrets)  # fmt: skip
