"""What the image service can refuse; config/api.py turns each into the error shape of the
route's protocol (imagegen/api/errors.py)."""

import redis

from core.errors import ServiceError


class ModelNotPulled(ServiceError):
    status = 409
    message = "The model is not on the share yet: POST /model/pull first"


class OfferedModelNotPulled(ModelNotPulled):
    """A request naming a MODELS entry that is not on the share: 409 naming it and how to
    pull it; nothing is queued."""

    def __init__(self, model_id: str) -> None:
        super().__init__(
            f"The model {model_id} is offered but not on the share yet: POST "
            f"/model/pull?model={model_id} (or manage.py pull_model --model {model_id}) first"
        )


def naming_model(exc: ServiceError, model_id: str) -> ServiceError:
    """`exc` (a 503 of the model's state) for a MODELS entry: the model named, and its pull
    by name, since a bare POST /model/pull acts on MODEL_ID."""
    text = exc.message.replace("The model", f"The model {model_id}", 1)
    text = text.replace("POST /model/pull", f"POST /model/pull?model={model_id}")
    named = ServiceError(text, retry_after=exc.retry_after)
    named.status = exc.status
    return named


class ModelNotOffered(ServiceError):
    """A model looked up by name (GET /v1/models/<id>) that this service does not offer."""

    status = 404

    def __init__(self, asked: str, offered: list[str]) -> None:
        super().__init__(f"No model {asked!r} here; offered: {', '.join(offered)}")


class NoWorkerForModel(ServiceError):
    """Distributed mode: a job for a model no live worker may run (WORKER_MODELS); nothing is
    queued."""

    status = 503
    retry_after = 30

    def __init__(self, model_id: str, workers: list[str]) -> None:
        super().__init__(
            f"No live worker may run the model {model_id}: the WORKER_MODELS of every live "
            f"worker ({', '.join(workers)}) leaves it out; start a worker whose WORKER_MODELS "
            "names it (or leaves WORKER_MODELS unset)"
        )


class ModelLoading(ServiceError):
    status = 503
    message = "The model is still loading; try again shortly"
    retry_after = 30


class ModelDownloading(ServiceError):
    status = 503
    message = "The model is still downloading; try again when /model/status says ready"
    retry_after = 60


class ModelFailed(ServiceError):
    status = 503

    def __init__(self, error: str | None) -> None:
        super().__init__(f"The model failed to load: {error}. POST /model/pull to retry")


class QueueFull(ServiceError):
    status = 503
    message = "Too many generations are waiting; try again later"
    retry_after = 60


class KeyQueueLimit(ServiceError):
    """An API key's `--max-queued` reached (OpenAI's status for a rate limit: its SDK raises
    RateLimitError and honours Retry-After); other keys still get through."""

    status = 429
    retry_after = 5

    def __init__(self, limit: int, count: int) -> None:
        also = f" (this request asks for {count})" if count > 1 else ""
        super().__init__(
            f"This API key may have {limit} generations queued or running at once{also}; "
            "try again when one has finished"
        )


class KeyRateLimit(ServiceError):
    """An API key's `--per-minute` reached: 429 until the minute's window ends."""

    status = 429

    def __init__(self, limit: int, count: int, retry_after: int) -> None:
        also = f" (this request asks for {count})" if count > 1 else ""
        super().__init__(
            f"This API key may start {limit} images a minute{also}; try again in {retry_after} s",
            retry_after=retry_after,
        )


class JobNotFound(ServiceError):
    status = 404
    message = "No such job (jobs are kept while this process runs)"


class PreviewNotYet(ServiceError):
    status = 404
    message = "No preview yet: one is made after the job's first denoising step (PREVIEW)"


class JobNotInStore(JobNotFound):
    """Distributed mode's 404: the jobs are the store's (Redis), not a process's."""

    def __init__(self, keep: int) -> None:
        super().__init__(
            f"No such job (the job store, Redis, keeps every unfinished job and the newest "
            f"{keep} finished ones, JOBS_KEEP; a Redis without persistence loses them all "
            "when it restarts)"
        )


class JobStoreBusy(ServiceError, redis.ConnectionError):
    """Every place for a call waiting on the job store is taken (JOB_STORE_MAX_CONCURRENT):
    Redis is slow or gone, and each waiting call holds one of the worker's threads, which
    /health and the other routes need too. A redis ConnectionError as well, so code that
    rides over a store outage (a worker's heartbeat, /model/status) rides over this."""

    status = 503
    message = (
        "Too many requests are waiting for the job store (Redis) (JOB_STORE_MAX_CONCURRENT); "
        "try again shortly"
    )
    retry_after = 5
    may_follow_a_queued_job = True  # e.g. the read after a submit, or a synchronous wait's


# How each final state reads after "The job": "has already cancelled" is not English.
_ENDED = {"cancelled": "was already cancelled"}


class JobFinished(ServiceError):
    status = 409

    def __init__(self, state: str) -> None:
        ended = _ENDED.get(state, f"has already {state}")
        super().__init__(f"The job {ended}; there is nothing to cancel")


class JobCancelled(ServiceError):
    status = 409
    message = "The job was cancelled"


class JobFailed(ServiceError):
    """The generation itself raised (the pipeline, or storing its image): the same request
    would raise again, so 500 with no Retry-After (and under /v1 `x-should-retry: false`).
    Failures a retry can help carry their own status (WorkerLost, ModelLoading)."""

    status = 500

    def __init__(self, error: str | None) -> None:
        super().__init__(f"The generation failed: {error}")


class WorkerLost(ServiceError):
    """The job's worker died under it (an out-of-memory kill, a node taken away): nothing was
    wrong with the request, so a retry can help: 503 with Retry-After."""

    status = 503
    retry_after = 10

    def __init__(self, error: str) -> None:
        super().__init__(f"The generation did not finish: {error}. Send the request again")


class SyncTimeout(ServiceError):
    status = 504

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"No image within GEN_SYNC_TIMEOUT; job {job_id} is cancelled (a running job stops "
            f"at the model's next block: GET /jobs/{job_id} shows when). "
            "Long generations: POST /generate with async=true and poll /jobs/<id>"
        )


class PastSyncTimeout(ServiceError):
    """A synchronous request estimated past GEN_SYNC_REFUSE_FACTOR x GEN_SYNC_TIMEOUT: told
    at once (the message names the estimate and what to do), not with a 504 after it."""

    status = 400


class ImageNotFound(ServiceError):
    status = 404
    message = "No such image"


class BatchTimeout(ServiceError):
    """A synchronous request of several jobs (the OpenAI and A1111 routes) that waited
    GEN_SYNC_TIMEOUT. Its unfinished jobs are cancelled unless another request that joined
    them (identical, or with the same Idempotency-Key) is still waiting for them."""

    status = 504

    def __init__(self, job_ids: list[str], *, cancelled: bool) -> None:
        jobs = ", ".join(job_ids)
        if cancelled:
            what = (
                "cancelled (a running job stops at the model's next block: GET /jobs/<id> "
                "shows when). Long generations: POST /generate with async=true and poll "
                "/jobs/<id>"
            )
        else:
            what = (
                "still running for another request that is waiting for them (an identical "
                "one, or one with the same Idempotency-Key)"
            )
        super().__init__(f"No image within GEN_SYNC_TIMEOUT; job(s) {jobs}: {what}")


class ImageLinkInvalid(ServiceError):
    status = 403
    message = "This image link is not valid (its signature does not match)"


class ImageLinkExpired(ServiceError):
    status = 403
    message = "This image link has expired (IMAGE_URL_TTL); generate the image again"


class SyncWaitersBusy(ServiceError):
    """Every place for a synchronous request waiting for its images is taken
    (SYNC_WAITERS_MAX): each holds one of the worker's threads until its images are made."""

    status = 503
    message = (
        "Too many synchronous requests are waiting (SYNC_WAITERS_MAX); try again shortly, or "
        "submit the generation asynchronously"
    )
    retry_after = 5


class KeyStreamsBusy(ServiceError):
    """This API key has KEY_STREAMS_MAX event streams open already; other keys still get
    theirs."""

    status = 503
    message = (
        "This API key has too many event streams open (KEY_STREAMS_MAX); close one, or read "
        "the job with GET /jobs/<id>"
    )
    retry_after = 5


class EventStreamsBusy(ServiceError):
    """Every place for an open event stream is taken (EVENT_STREAMS_MAX): each stream holds
    one of the worker's threads for its whole life, and /health needs one too."""

    status = 503
    message = (
        "Too many event streams are open (EVENT_STREAMS_MAX); try again shortly, or read the "
        "job with GET /jobs/<id>"
    )
    retry_after = 5


class LoraNotPulled(ServiceError):
    """A prompt's `<lora:...>` tag naming a LORAS entry not yet on the share: 409 saying how
    to pull it; nothing is queued."""

    status = 409

    def __init__(self, tag: str, name: str) -> None:
        super().__init__(
            f"{tag}: the LoRA {name} is offered but not on the share yet: POST /model/pull "
            "(or manage.py pull_model) first"
        )
