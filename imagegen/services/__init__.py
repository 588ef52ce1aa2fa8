"""What the image service does on request, for routes of every protocol.

Every route calls these with the process's Backend, so each rule lives here once. They raise
imagegen.errors, which the API's handlers answer. This module names every concern's module, so
a route imports `services` alone."""

from imagegen.services.admission import KeyQuota, key_admit
from imagegen.services.checkpoints import (
    checkpoint_choose,
    checkpoint_current,
    checkpoint_switching,
)
from imagegen.services.edit_intake import edit_request
from imagegen.services.hires import A1111_FIELDS, NATIVE_FIELDS, HiresAsked, with_hires
from imagegen.services.inputs import INPUT_GRACE_SECONDS, image_delete, inputs_release
from imagegen.services.jobs import (
    generation_interrupt,
    generation_result,
    generation_run,
    generation_submit,
    generation_submit_keyed,
    generation_submit_waited,
    generation_waited_result,
    job_cancel,
)
from imagegen.services.loras import with_loras
from imagegen.services.models import model_pull, with_model
from imagegen.services.shared_runs import generation_run_shared
from imagegen.services.upscale_intake import upscale_request
from imagegen.services.webhooks import (
    NO_SECRET,
    SYNC_WEBHOOK,
    WebhookPlan,
    webhook_plan,
    webhook_secrets,
    webhook_watch,
    webhooks_start,
)

__all__ = [
    "A1111_FIELDS",
    "INPUT_GRACE_SECONDS",
    "NATIVE_FIELDS",
    "NO_SECRET",
    "SYNC_WEBHOOK",
    "HiresAsked",
    "KeyQuota",
    "WebhookPlan",
    "checkpoint_choose",
    "checkpoint_current",
    "checkpoint_switching",
    "edit_request",
    "generation_interrupt",
    "generation_result",
    "generation_run",
    "generation_run_shared",
    "generation_submit",
    "generation_submit_keyed",
    "generation_submit_waited",
    "generation_waited_result",
    "image_delete",
    "inputs_release",
    "job_cancel",
    "key_admit",
    "model_pull",
    "upscale_request",
    "webhook_plan",
    "webhook_secrets",
    "webhook_watch",
    "webhooks_start",
    "with_hires",
    "with_loras",
    "with_model",
]
