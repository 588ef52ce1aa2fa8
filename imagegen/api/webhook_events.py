"""What a webhook event carries as its `data`: the job as GET /jobs/<id> answers it at that
moment, and, for a succeeded job, its image's signed link (the one the OpenAI route answers,
valid IMAGE_URL_TTL seconds), so a receiver needs no second call and no token."""

from typing import Any

from imagegen import selectors
from imagegen.api.schemas import JobOut
from imagegen.generation.job_board import JobView
from imagegen.webhooks.outbox import Watch


def event_data(view: JobView, watch: Watch) -> dict[str, Any]:
    data = JobOut.model_validate(view).model_dump(mode="json")
    data.pop("webhook", None)  # the delivery's own record: not part of what it tells
    if view.image is not None:
        signature = selectors.image_link_signature(image_id=view.image.id)
        data["image_link"] = f"{watch.origin}/v1/images/{view.image.id}.png?signature={signature}"
    return data
