"""What the image service can refuse; config/api.py turns each into `{"error": {"message"}}`."""

from config.errors import ServiceError


class ModelNotPulled(ServiceError):
    status = 409
    message = "The model is not on the share yet: POST /model/pull first"


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


class JobNotFound(ServiceError):
    status = 404
    message = "No such job (jobs are kept while this process runs)"


class JobFinished(ServiceError):
    status = 409

    def __init__(self, state: str) -> None:
        super().__init__(f"The job has already {state}; there is nothing to cancel")


class JobCancelled(ServiceError):
    status = 409
    message = "The job was cancelled"


class JobFailed(ServiceError):
    status = 500

    def __init__(self, error: str | None) -> None:
        super().__init__(f"The generation failed: {error}")


class SyncTimeout(ServiceError):
    status = 504

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"No image within GEN_SYNC_TIMEOUT; job {job_id} is cancelled (a running job stops "
            f"at the end of its current step: GET /jobs/{job_id} shows when). "
            "Long generations: POST /generate with async=true and poll /jobs/<id>"
        )


class ImageNotFound(ServiceError):
    status = 404
    message = "No such image"
