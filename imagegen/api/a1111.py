"""The AUTOMATIC1111 web UI's API (`/sdapi/v1`): what webuiapi and Open WebUI's
"Automatic1111" engine send, translated into the service's own request and answered in
A1111's shapes.

A thin translator: txt2img is services.generation_run_shared, the same queue and jobs as
POST /generate (a model is loaded lazily from the share, 409 without weights), and img2img
the same after services.edit_request, the native form's edit rules. POST /options switches
the model of a caller's requests that name none (services.checkpoint_choose: it loads, in
process); no route here downloads a model. "This client" (whose jobs /interrupt and /skip stop
and /progress reports) is apikeys.auth.client_identity: its credential and its address.
Errors keep the image service's `{"error": {"message"}}` shape.
"""

import io
import json
from pathlib import Path
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from ninja import Router, Schema
from ninja.errors import ValidationError
from PIL import Image, ImageOps
from pydantic import ConfigDict, Field, JsonValue, ValidationInfo, field_validator

from apikeys.auth import client_identity, owner_key, request_caller, token_or_basic_required
from core.errors import FieldError
from core.version import app_version
from imagegen import selectors, services
from imagegen.api.bounds import AtLeast, AtMost
from imagegen.api.protocol import admit, decode_base64, png_base64, run_for_client
from imagegen.api.schemas import PROMPT_MAX, errors
from imagegen.backend import current_backend
from imagegen.generation.catalog import UnknownModel, name_part, parse_models
from imagegen.generation.edit_inputs import INPUT_PIXELS_FACTOR, read_image
from imagegen.generation.hires import LATENT_MODES, SCALE_DEFAULT, Hires, hires_upscaler_names
from imagegen.generation.images import ImageRecord
from imagegen.generation.infotext import png_info
from imagegen.generation.job_board import JobState, JobView
from imagegen.generation.parameters import working_size
from imagegen.generation.requests import (
    MASK_BLUR_DEFAULT,
    MASK_BLUR_MAX,
    ONLY_MASKED_PADDING_MAX,
    SEED_MAX,
    STRENGTH_DEFAULT,
    GenerationRequest,
)
from imagegen.generation.schedulers import (
    A1111_SAMPLERS,
    A1111_SCHEDULES,
    UnknownScheduler,
    a1111_parts,
    a1111_scheduler,
)
from imagegen.model.loras import lora_file_metadata

router = Router(tags=["automatic1111"])
auth = token_or_basic_required()


def batch_limit(limit: int) -> str:
    return f"batch_size times n_iter must be at most {limit} (GEN_MAX_N)"


# One message for every refused sampler and schedule type, naming none of the client's text,
# so the schema fuzzer's allow-list can name it (not every pair of listed names is offered).
SAMPLER_RULE = (
    f"must be one of the samplers {', '.join(A1111_SAMPLERS)}, with a schedule type it has "
    f"({', '.join(A1111_SCHEDULES)}; Karras and SGM Uniform not with every sampler); older "
    "combined names such as 'DPM++ 2M Karras' work too"
)
# The documented names (the mapping also takes any case, `_` for a space, and the older
# combined and k_ names): what a client picks from, and all a fuzzer sends.
SAMPLER_NAMES: list[JsonValue] = [*A1111_SAMPLERS, None]
SCHEDULE_NAMES: list[JsonValue] = [
    *A1111_SCHEDULES,
    *(s.lower().replace(" ", "_") for s in A1111_SCHEDULES),
    None,
]


def scheduler_fields(sampler_name: str | None, scheduler: str | None) -> dict[str, Any]:
    """The GenerationRequest fields for an A1111 sampler and schedule type, mapped onto the
    service's schedulers (imagegen/generation/schedulers.py): webuiapi sends "Euler a" and
    "automatic" unasked, and those run as Euler a. No sampler: the service's default. An
    unknown pair is a 400 naming `sampler_name` and listing what is accepted."""
    try:
        return {"scheduler": a1111_scheduler(sampler_name, scheduler)}
    except UnknownScheduler:
        raise ValidationError([{"loc": ("body", "sampler_name"), "msg": SAMPLER_RULE}]) from None


def model_titles() -> list[str]:
    """The names POST /options takes, as the settings offer them at start: each offered
    model's title (its repo id) and model name (its name part), MODEL_ID's first."""
    ids = [settings.MODEL_ID, *(entry.repo for entry in parse_models(settings.MODELS))]
    return list(dict.fromkeys(name for model_id in ids for name in (model_id, name_part(model_id))))


CHECKPOINT = "sd_model_checkpoint"
CHECKPOINT_FIELD = f"override_settings.{CHECKPOINT}"
OVERRIDE_SETTINGS = (
    f"{CHECKPOINT}: the model of this request alone, a title /sd-models lists, a model name "
    "or a repo id (with MODELS unset, ignored: MODEL_ID runs); every other key is ignored"
)


def chosen_checkpoint(generation: GenerationRequest, checkpoint: JsonValue) -> GenerationRequest:
    """`generation` run by the model override_settings.sd_model_checkpoint names: a title as
    /sd-models lists it (the repo id), a model name (the unique name part) or a repo id. With
    MODELS unset it is ignored: there is one model, and A1111 clients send the checkpoint
    they last saw; with MODELS set an unknown one is a 400 naming the field and
    listing the offered titles, before anything is stored or queued."""
    backend = current_backend()
    offered = backend.offered()
    if checkpoint is None or not offered.several:
        return services.with_loras(backend, generation)
    if not isinstance(checkpoint, str):
        raise FieldError(CHECKPOINT_FIELD, f"must be a title /sd-models lists; offered: "
                         f"{', '.join(offered.ids)}")  # fmt: skip
    try:
        model = offered.find(checkpoint)
    except UnknownModel as unknown:
        raise FieldError(CHECKPOINT_FIELD, unknown.rule) from None
    return services.with_model(backend, generation.model_copy(update={"model": model.id}))


# A side in pixels within GEN_MIN_SIDE to GEN_MAX_SIDE, read per request.
Side = Annotated[int, AtLeast("GEN_MIN_SIDE"), AtMost("GEN_MAX_SIDE")]


class Txt2ImgIn(Schema):
    """A1111's txt2img body. Every field is optional and an omitted one takes this service's
    default (GEN_DEFAULT_STEPS, not A1111's 50; the model's native size).
    override_settings.sd_model_checkpoint picks the model of this request alone
    (chosen_checkpoint); enable_hr and its hr_* fields run the hires fix (txt2img only);
    A1111's other keys (the other override_settings, hr_sampler_name, alwayson_scripts, ...)
    are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    prompt: str | None = Field("", max_length=PROMPT_MAX)
    negative_prompt: str | None = Field("", max_length=PROMPT_MAX)
    seed: int | None = Field(-1, ge=-1, le=SEED_MAX, description="-1: random; image i: seed + i")
    batch_size: Annotated[int, Field(ge=1), AtMost("GEN_MAX_N")] | None = Field(1)
    n_iter: Annotated[int, Field(ge=1), AtMost("GEN_MAX_N")] | None = Field(
        1, description=batch_limit(settings.GEN_MAX_N)
    )
    steps: Annotated[int, Field(ge=1), AtMost("GEN_MAX_STEPS")] | None = Field(None)
    cfg_scale: Annotated[float, Field(ge=0), AtMost("GEN_MAX_GUIDANCE")] | None = Field(
        None, allow_inf_nan=False
    )
    width: Side | None = Field(
        None, multiple_of=8,
        description="omitted: the height's value, or with both omitted the model's native size",
    )  # fmt: skip
    height: Side | None = Field(
        None, multiple_of=8,
        description="omitted: the width's value, or with both omitted the model's native size",
    )  # fmt: skip
    sampler_name: str | None = Field(None, json_schema_extra={"enum": SAMPLER_NAMES})
    sampler_index: str | None = Field(
        None, json_schema_extra={"enum": SAMPLER_NAMES}, description="older name of sampler_name"
    )
    scheduler: str | None = Field(
        None, json_schema_extra={"enum": SCHEDULE_NAMES}, description="the schedule type"
    )
    send_images: bool | None = True
    save_images: bool | None = Field(False, description="every image is stored either way")
    override_settings: dict[str, JsonValue] | None = Field(None, description=OVERRIDE_SETTINGS)
    enable_hr: bool | None = Field(False, description="txt2img: the hires fix (docs/image-api.md)")
    hr_scale: float | None = Field(
        None, allow_inf_nan=False, description="with enable_hr: the result's scale, above 1; "
        "default 2 (ignored with hr_resize_x or hr_resize_y)",
    )  # fmt: skip
    hr_resize_x: int | None = Field(
        0, ge=0, description="with enable_hr: the result's width; 0: from hr_resize_y, or none"
    )
    hr_resize_y: int | None = Field(
        0, ge=0, description="with enable_hr: the result's height; 0: from hr_resize_x, or none"
    )
    hr_upscaler: str | None = Field(
        None, json_schema_extra={"enum": [*hires_upscaler_names(settings.UPSCALERS), None]},
        description="with enable_hr: a latent mode (/latent-upscale-modes) or an upscaler "
        "(/upscalers), any case; default Latent",
    )  # fmt: skip
    hr_second_pass_steps: Annotated[int, Field(ge=0), AtMost("GEN_MAX_STEPS")] | None = Field(
        0, description="with enable_hr: the second pass's steps; 0: the first pass's"
    )
    hr_prompt: str | None = Field("", max_length=PROMPT_MAX, description="empty: the prompt")
    hr_negative_prompt: str | None = Field(
        "", max_length=PROMPT_MAX, description="empty: the negative prompt"
    )
    denoising_strength: float | None = Field(
        None, allow_inf_nan=False,
        description="with enable_hr: how far the second pass noises the upscaled picture, "
        "0 < s <= 1; default 0.7",
    )  # fmt: skip

    @field_validator("n_iter")
    @classmethod
    def _batch_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        if (value or 1) * (info.data.get("batch_size") or 1) > settings.GEN_MAX_N:
            raise ValueError(batch_limit(settings.GEN_MAX_N))
        return value

    @property
    def count(self) -> int:
        return (self.batch_size or 1) * (self.n_iter or 1)

    def to_request(self, chosen: str | None = None) -> GenerationRequest:
        """The service's request; with no override_settings.sd_model_checkpoint, run by
        `chosen`, the model the caller chose with POST /options (None: MODEL_ID)."""
        width, height = self.width or self.height, self.height or self.width
        generation = GenerationRequest(
            prompt=self.prompt or "",
            negative_prompt=self.negative_prompt or None,
            steps=self.steps,
            guidance=self.cfg_scale,
            size=(width, height) if width and height else None,
            seed=None if self.seed in (None, -1) else self.seed,
            **scheduler_fields(self.sampler_name or self.sampler_index, self.scheduler),
        )
        checkpoint = (self.override_settings or {}).get(CHECKPOINT)
        return chosen_checkpoint(generation, chosen if checkpoint is None else checkpoint)


class Txt2ImgOut(Schema):
    images: list[str] = Field(description="base64 PNGs")
    parameters: dict[str, Any]
    info: str = Field(description="JSON: seed, all_seeds, infotexts, ... as A1111 writes them")


INPAINTING_FILL = (
    "A1111's masked content: 1 original (the masked area starts from the input noised to "
    "denoising_strength); 0 fill, 2 latent noise and 3 latent nothing are accepted and run "
    "as 1 (at denoising_strength 1 the masked area starts from pure noise, as 2 does)"
)


class Img2ImgIn(Txt2ImgIn):
    """A1111's img2img body: txt2img's fields and the image's. Omitted fields take A1111's
    img2img defaults (denoising_strength 0.75, mask_blur 4, inpaint_full_res true with
    padding 0), and width and height the input's size; every side is rounded down to a
    multiple of 8 within GEN_MIN_SIDE..GEN_MAX_SIDE (the edits' rule). A1111's other keys
    (image_cfg_scale, initial_noise_multiplier, alwayson_scripts, ...) are accepted and
    ignored."""

    init_images: list[str] = Field(
        min_length=1, max_length=1, description="the image, base64 (a `data:` prefix allowed)"
    )
    mask: str | None = Field(
        None, description="base64, the image's size: white repaints, black keeps (inpainting)"
    )
    denoising_strength: float | None = Field(
        STRENGTH_DEFAULT, gt=0, le=1, allow_inf_nan=False,
        description="0 < s <= 1: max(1, int(steps x s)) steps run",
    )  # fmt: skip
    resize_mode: int | None = Field(
        0, description="with a width and height of another shape: 0 just resize, 1 crop and "
        "resize, 2 resize and fill; any other value as 0",
    )  # fmt: skip
    mask_blur: int | None = Field(MASK_BLUR_DEFAULT, ge=0, le=MASK_BLUR_MAX)
    inpainting_fill: int | None = Field(0, ge=0, le=3, description=INPAINTING_FILL)
    inpaint_full_res: bool | None = Field(
        True, description="only masked: the marked area's box, grown by twice mask_blur and "
        "the padding, is worked at width x height and pasted back; the answer is the image's "
        "size",
    )  # fmt: skip
    inpaint_full_res_padding: int | None = Field(0, ge=0, le=ONLY_MASKED_PADDING_MAX)
    inpainting_mask_invert: int | None = Field(0, ge=0, le=1, description="1: black repaints")
    include_init_images: bool | None = Field(
        False, description="the answer's `parameters` repeat init_images and mask"
    )
    width: Annotated[int, Field(ge=1), AtMost("GEN_MAX_SIDE")] | None = Field(
        None, description="omitted: the height's value, or with both omitted the input's size",
    )  # fmt: skip
    height: Annotated[int, Field(ge=1), AtMost("GEN_MAX_SIDE")] | None = Field(
        None, description="omitted: the width's value, or with both omitted the input's size",
    )  # fmt: skip

    def to_edit(self, chosen: str | None = None) -> GenerationRequest:
        """The edit, its inputs checked and stored (services.edit_request); a refused one
        names the field (init_images, mask, ...) and stores nothing."""
        generation = self.to_request(chosen)
        if generation.size is not None:
            low, high = settings.GEN_MIN_SIDE, settings.GEN_MAX_SIDE
            generation = generation.model_copy(
                update={"size": working_size(generation.size, low=low, high=high)}
            )
        image = decoded_image(self.init_images[0], field="init_images")
        mask = None if self.mask is None else decoded_image(self.mask, field="mask")
        if mask is not None and self.inpainting_mask_invert:
            mask = inverted(mask)
        return services.edit_request(
            current_backend(), request=generation, image=image, mask=mask,
            strength=self.denoising_strength, mask_blur=self.mask_blur,
            resize_mode=self.resize_mode, only_masked=self.inpaint_full_res is not False,
            # A1111's API pads by 0 when it is not sent (its page, and ours, by 32).
            only_masked_padding=self.inpaint_full_res_padding or 0,
        )  # fmt: skip


def decoded_image(text: str, *, field: str) -> bytes:
    """A1111's base64 image field as bytes, read once to refuse a non-image naming `field`
    (the edit's own checks name the native form's parts)."""
    data = decode_base64(text, field=field)
    read_image(data, field=field, max_pixels=_max_pixels())
    return data


def _max_pixels() -> int:
    return INPUT_PIXELS_FACTOR * settings.GEN_MAX_SIDE**2


def inverted(mask: bytes) -> bytes:
    """inpainting_mask_invert: the mask's black repaints and its white keeps."""
    buffer = io.BytesIO()
    ImageOps.invert(Image.open(io.BytesIO(mask)).convert("L")).save(buffer, format="PNG")
    return buffer.getvalue()


class PngInfoIn(Schema):
    model_config = ConfigDict(extra="ignore")

    image: str = Field(description="a PNG, base64 (a `data:` prefix allowed)")


class PngInfoOut(Schema):
    info: str = Field(description="the `parameters` text; empty when the image has none")
    items: dict[str, str] = Field(description="the image's other text chunks")
    parameters: dict[str, Any] = Field(description="`info` parsed as A1111 parses it")


class ProgressState(Schema):
    skipped: bool
    interrupted: bool
    stopping_generation: bool
    job: str
    job_count: int
    job_timestamp: str
    job_no: int
    sampling_step: int
    sampling_steps: int


class ProgressOut(Schema):
    progress: float
    eta_relative: float
    state: ProgressState
    current_image: str | None
    textinfo: str | None


class OptionsIn(Schema):
    """A1111's options. Open WebUI posts back the whole object it read, so every key but
    sd_model_checkpoint is accepted and ignored; the checkpoint switches the model of this
    caller's requests that name none (services.checkpoint_choose)."""

    model_config = ConfigDict(extra="ignore")

    sd_model_checkpoint: str | None = Field(
        None,
        json_schema_extra={"enum": list[JsonValue](model_titles())},
        description="a title /sd-models lists, a model name or a repo id",
    )


class SwitchingOut(Schema):
    """The 202 of a switch whose load outlasts GEN_SYNC_TIMEOUT."""

    sd_model_checkpoint: str
    state: str = Field(description="loading")
    message: str


class OptionsOut(Schema):
    sd_model_checkpoint: str
    sd_checkpoint_hash: str | None


class SdModel(Schema):
    title: str
    model_name: str
    hash: str | None
    sha256: str | None
    filename: str
    config: str | None


class Sampler(Schema):
    name: str
    aliases: list[str]
    options: dict[str, str]


class ScheduleType(Schema):
    name: str
    label: str
    aliases: list[str] | None
    default_rho: int
    need_inner_model: bool


def _info(
    payload: Txt2ImgIn, records: list[ImageRecord], generation: GenerationRequest
) -> dict[str, Any]:
    """A1111's `info`, from the images as they were made (with none, from `generation`):
    `sd_model_name` the repo id of the model that ran, `sd_model_hash` its commit's first 10
    characters, as /sd-models gives it."""
    made = [record.parameters for record in records]
    first = made[0] if made else None
    seeds = [p.seed for p in made]
    return {
        "prompt": payload.prompt or "",
        "all_prompts": [p.prompt for p in made],
        "negative_prompt": payload.negative_prompt or "",
        "all_negative_prompts": [p.negative_prompt or "" for p in made],
        "seed": seeds[0] if seeds else payload.seed,
        "all_seeds": seeds,
        "subseed": seeds[0] if seeds else -1,
        "all_subseeds": seeds,
        "subseed_strength": 0,
        "width": first.width if first else payload.width,
        "height": first.height if first else payload.height,
        # A1111 1.9 and later answer the sampler alone ("DPM++ 2M"); its schedule type is in
        # the infotexts ("Schedule type: Karras").
        "sampler_name": a1111_parts(first.scheduler)[0] if first else None,
        "cfg_scale": first.guidance if first else payload.cfg_scale,
        "steps": first.steps if first else payload.steps,
        "batch_size": payload.batch_size or 1,
        "restore_faces": False,
        "sd_model_name": first.model_id if first else generation.model or settings.MODEL_ID,
        "sd_model_hash": (first.revision or "")[:10] if first else None,
        "seed_resize_from_w": -1,
        "seed_resize_from_h": -1,
        "extra_generation_params": {},
        "index_of_first_image": 0,
        "infotexts": [p.a1111_text() for p in made],
        "styles": [],
        "job_timestamp": records[0].id[:15].replace("T", "") if records else "",
        "clip_skip": 1,
        "version": app_version(),
    }


@router.post(
    "/txt2img",
    auth=auth,
    response={200: Txt2ImgOut, **errors(400, 409, 413, 429, 500, 503, 504)},
    summary="A1111 txt2img: batch_size x n_iter images, each a job in the queue",
)
def txt2img(request: HttpRequest, payload: Txt2ImgIn):
    # partial: an interrupt answers the images made so far, as A1111 does.
    generation = with_hires(payload, payload.to_request(chosen_model(request)))
    records = run_for_client(request, generation, count=payload.count, partial=True)
    info = _info(payload, records, generation)
    hires = records[0].parameters.hires if records else generation.hires
    if hires is not None:  # as A1111's info says its hires fix: its steps as they ran
        info |= hires_info(hires)
    return _answer(payload, records, payload.model_dump(), info)


def hires_info(hires: Hires) -> dict[str, Any]:
    """`denoising_strength`, and the infotext's Hires entries in `extra_generation_params`."""
    size = {"Hires resize": "x".join(map(str, hires.resize))} if hires.resize else {
        "Hires upscale": hires.scale or SCALE_DEFAULT
    }  # fmt: skip
    return {
        "denoising_strength": hires.denoising_strength,
        "extra_generation_params": size
        | {"Hires steps": hires.steps, "Hires upscaler": hires.upscaler},
    }


def with_hires(payload: Txt2ImgIn, generation: GenerationRequest) -> GenerationRequest:
    """The hires fix enable_hr asks for, checked before anything is queued (a refusal names
    A1111's field); without enable_hr the hr_* fields are ignored, as A1111 does."""
    if not payload.enable_hr:
        return generation
    asked = services.HiresAsked(
        scale=payload.hr_scale, resize=(payload.hr_resize_x or 0, payload.hr_resize_y or 0),
        upscaler=payload.hr_upscaler, steps=payload.hr_second_pass_steps,
        denoising_strength=payload.denoising_strength, prompt=payload.hr_prompt,
        negative_prompt=payload.hr_negative_prompt,
    )  # fmt: skip
    return services.with_hires(
        current_backend(), generation, asked=asked, fields=services.A1111_FIELDS
    )


def chosen_model(request: HttpRequest) -> str:
    """The repo id of the model this caller chose with POST /options (else MODEL_ID's)."""
    return services.checkpoint_current(current_backend(), scope=owner_key(request)).id


def _answer(
    payload: Txt2ImgIn, records: list[ImageRecord], sent: dict[str, Any], info: dict[str, Any]
) -> Txt2ImgOut:
    """A1111's answer: the images, the request as it ran (`sent` with the values applied),
    and `info` as JSON text."""
    first = records[0].parameters if records else None
    parameters = sent | {
        "steps": first.steps if first else payload.steps,
        "cfg_scale": first.guidance if first else payload.cfg_scale,
        "width": first.width if first else payload.width,
        "height": first.height if first else payload.height,
    }
    return Txt2ImgOut(
        images=[png_base64(r) for r in records] if payload.send_images is not False else [],
        parameters=parameters,
        info=json.dumps(info),
    )


@router.post(
    "/img2img",
    auth=auth,
    response={200: Txt2ImgOut, **errors(400, 409, 413, 429, 500, 503, 504)},
    summary="A1111 img2img (inpainting with a mask): batch_size x n_iter images, each a job",
)
def img2img(request: HttpRequest, payload: Img2ImgIn):
    """The edit rules of POST /generate's form (docs/image-api.md); a retry of the same body
    by the same client joins its twin's jobs, as txt2img's does."""
    admit(request, payload.count)  # before the images are decoded
    generation = payload.to_edit(chosen_model(request))
    records = run_for_client(request, generation, count=payload.count, partial=True, admitted=True)
    sent = payload.model_dump()
    if not payload.include_init_images:  # A1111 leaves the inputs out unless asked
        sent |= {"init_images": None, "mask": None}
    edit = records[0].parameters.edit if records else None
    info = _info(payload, records, generation) | {
        "denoising_strength": edit.strength if edit else payload.denoising_strength,
        "extra_generation_params": {"Mask blur": edit.mask_blur} if edit and edit.mask else {},
    }
    return _answer(payload, records, sent, info)


@router.post("/png-info", auth=auth, response={200: PngInfoOut, **errors(400, 413)})
def png_info_read(request: HttpRequest, payload: PngInfoIn):
    """The generation parameters a PNG carries (this service's or A1111's), parsed as A1111
    parses them; an image without them answers empty ones."""
    data = decoded_image(payload.image, field="image")
    read = png_info(Image.open(io.BytesIO(data)))
    return PngInfoOut(info=read.info, items=read.items, parameters=read.parameters)


def preview_base64(job: JobView) -> str | None:
    found = selectors.job_preview(current_backend(), job_id=job.id)
    return None if found is None else found.base64()


@router.get("/progress", auth=auth, response={200: ProgressOut, **errors(400)})
def progress(request: HttpRequest, skip_current_image: bool = False):
    """This client's oldest request under way; zeros when it has none. `current_image`: the
    running job's latest preview (base64 JPEG; PREVIEW), unless skip_current_image. The load
    of a model switched to with POST /options counts as one job until it ends."""
    backend = current_backend()
    batch = selectors.client_progress(backend, client=client_identity(request))
    switching = services.checkpoint_switching(backend, scope=owner_key(request))
    current, jobs = batch.current, len(batch.jobs)
    running = current if current and current.state is JobState.RUNNING else None
    waiting = f" (queue position {current.position})" if current and current.position else ""
    return ProgressOut(
        progress=batch.fraction,
        eta_relative=batch.eta_seconds or 0.0,
        state=ProgressState(
            skipped=False,
            interrupted=batch.interrupted,
            stopping_generation=False,
            job=f"Batch {batch.done + 1} out of {jobs}" if jobs else "",
            job_count=jobs + switching,
            job_timestamp=batch.jobs[0].created_at.strftime("%Y%m%d%H%M%S") if jobs else "0",
            job_no=batch.done,
            sampling_step=running.progress.step if running else 0,
            sampling_steps=running.progress.steps if running else 0,
        ),
        current_image=None if skip_current_image or running is None else preview_base64(running),
        textinfo=current.phase + waiting if current else "loading the model" if switching else None,
    )


@router.post("/interrupt", auth=auth, response={200: dict, **errors()})
def interrupt(request: HttpRequest):
    """Stops this client's jobs (queued ones never run; the running one stops at the model's
    next block), never another client's."""
    services.generation_interrupt(current_backend(), client=client_identity(request))
    return {}


@router.post("/skip", auth=auth, response={200: dict, **errors()})
def skip(request: HttpRequest):
    """Stops this client's running job; the rest of its batch goes on."""
    services.generation_interrupt(
        current_backend(), client=client_identity(request), running_only=True
    )
    return {}


@router.get("/options", auth=auth, response={200: OptionsOut, **errors()})
def options_get(request: HttpRequest):
    """`sd_model_checkpoint`: the model this caller's requests naming none run, titled as
    /sd-models titles it; `sd_checkpoint_hash` its commit on the share."""
    backend = current_backend()
    model = services.checkpoint_current(backend, scope=owner_key(request))
    manifest = backend.loader_of(model).source.complete_manifest()
    return OptionsOut(
        sd_model_checkpoint=model.id, sd_checkpoint_hash=manifest.commit if manifest else None
    )


NULL_ANSWER = {"type": "null"}


@router.post(
    "/options",
    auth=auth,
    response={200: None, 202: SwitchingOut, **errors(400, 409, 413, 503)},
    summary="Switches the model of this caller's requests that name none; answers null",
    openapi_extra={
        "responses": {
            200: {"description": "null", "content": {"application/json": {"schema": NULL_ANSWER}}}
        }
    },
)
def options_set(request: HttpRequest, payload: OptionsIn):
    """sd_model_checkpoint switches the model this caller's A1111 requests naming none run (per
    API key where keys are on, the whole service's otherwise): JSON null once it has loaded,
    as A1111 answers (webuiapi parses the answer), or 202 when the load outlasts
    GEN_SYNC_TIMEOUT (/progress counts it as a job until it ends). A model not on the share is
    a 409: no download starts here. Every other key is accepted and ignored."""
    name = payload.sd_model_checkpoint
    if name is None:
        return JsonResponse(None, safe=False)
    backend = current_backend()
    scope = owner_key(request)
    if services.checkpoint_choose(
        backend, scope=scope, name=name, timeout=settings.GEN_SYNC_TIMEOUT
    ):
        return JsonResponse(None, safe=False)
    model = services.checkpoint_current(backend, scope=scope)
    return 202, SwitchingOut(
        sd_model_checkpoint=model.id, state="loading",
        message=f"{model.id} is loading: poll /sdapi/v1/progress until state.job_count is 0",
    )  # fmt: skip


def server_path(request: HttpRequest, path: str) -> str:
    """A path on this server as a caller may see it: whole to an admin (API_TOKEN, an admin
    key), else relative to MODEL_DIR: where the operator keeps things is not every client's
    to know. (GET /model/status's `model_path` keeps the contract's whole path for all.)"""
    caller = request_caller(request)
    if caller is not None and caller.admin:
        return path
    try:
        return str(Path(path).relative_to(settings.MODEL_DIR))
    except ValueError:
        return Path(path).name


@router.post("/refresh-checkpoints", auth=auth, response={200: dict, **errors()})
def refresh_checkpoints(request: HttpRequest):
    """A1111 rescans its checkpoint folder here (SillyTavern's refresh button, sent with no
    body); the offered model is the configured one, so there is nothing to rescan."""
    return {}


@router.get("/sd-models", auth=auth, response={200: list[SdModel], **errors()})
def sd_models(request: HttpRequest):
    """Every offered model, MODEL_ID's first: `title` its repo id, `model_name` its name part,
    `hash` its commit's first 10 characters once on the share."""
    backend = current_backend()
    listed = []
    for model in backend.offered().models:
        status = backend.loader_of(model).status()
        listed.append(
            SdModel(
                title=model.id,
                model_name=model.name,
                hash=status.commit[:10] if status.commit else None,
                sha256=None,
                filename=server_path(request, status.model_path),
                config=None,
            )
        )
    return listed


class UpscalerItem(Schema):
    name: str
    model_name: str | None
    model_path: str | None
    model_url: str | None
    scale: float | None


@router.get("/upscalers", auth=auth, response={200: list[UpscalerItem], **errors()})
def upscalers(request: HttpRequest):
    """Lanczos and Nearest (no weights, no scale of their own), then each UPSCALERS entry:
    `model_path` where its file lies on the share (relative to it for callers that are not
    admins), `model_url` the hub file, `scale` its network's own once on the share."""
    listed = current_backend().upscalers.listing()
    for item in listed:
        if item["model_path"] is not None:
            item["model_path"] = server_path(request, str(settings.MODEL_DIR / item["model_path"]))
    return listed


# What A1111 lists and this service does not have; clients ask for these lists unasked, so
# they answer empty.
def _empty(path: str, what: str) -> None:
    @router.get(
        path,
        auth=auth,
        response={200: list[dict[str, Any]], **errors()},
        summary=what,
        operation_id=f"a1111_{path.strip('/').replace('-', '_')}",
    )
    def empty(request: HttpRequest):
        return []


@router.get("/samplers", auth=auth, response={200: list[Sampler], **errors()})
def samplers(request: HttpRequest):
    """The A1111 sampler names txt2img maps onto this service's schedulers."""
    return [Sampler(name=name, aliases=[], options={}) for name in A1111_SAMPLERS]


@router.get("/schedulers", auth=auth, response={200: list[ScheduleType], **errors()})
def schedulers(request: HttpRequest):
    """A1111's schedule types (Karras and SGM Uniform not with every sampler)."""
    return [
        ScheduleType(name=label.lower().replace(" ", "_"), label=label, aliases=None,
                     default_rho=-1, need_inner_model=False)
        for label in A1111_SCHEDULES
    ]  # fmt: skip


for _path, _what in [
    ("/sd-vae", "none: the model's own VAE"),
]:
    _empty(_path, _what)


class LatentUpscaleMode(Schema):
    name: str


@router.get("/latent-upscale-modes", auth=auth, response={200: list[LatentUpscaleMode], **errors()})
def latent_upscale_modes(request: HttpRequest):
    """The hires fix's latent modes (hr_upscaler), A1111's, in its order."""
    return [LatentUpscaleMode(name=name) for name in LATENT_MODES]


class LoraOut(Schema):
    name: str
    alias: str
    path: str
    metadata: dict[str, Any]
    models: list[str]  # the offered models it fits (their layers are its layers); not A1111's


@router.get("/loras", auth=auth, response={200: list[LoraOut], **errors()})
def loras(request: HttpRequest):
    """The LoRAs a prompt may name (`<lora:name:weight>`): LORAS's, then the files dropped into
    MODEL_DIR/loras at the last refresh. `metadata` is the file's safetensors metadata (empty
    until it is on the share); `models` the offered models it fits."""
    catalog = current_backend().loras
    if catalog is None:
        return []
    listed = []
    for lora in catalog.offered():
        listed.append(
            LoraOut(
                name=lora.name, alias=lora.name, path=server_path(request, str(lora.path)),
                metadata=lora_file_metadata(lora.path) if catalog.on_share(lora) else {},
                models=catalog.fitting_models(lora),
            )
        )  # fmt: skip
    return listed


@router.post("/refresh-loras", auth=auth, response={200: dict, **errors()})
def refresh_loras(request: HttpRequest):
    """Looks again for `*.safetensors` files dropped into MODEL_DIR/loras (A1111's rescan)."""
    catalog = current_backend().loras
    if catalog is not None:
        catalog.refresh()
    return {}


@router.get("/scripts", auth=auth, response={200: dict[str, list[str]], **errors()})
def scripts(request: HttpRequest):
    """No scripts (webuiapi asks when it starts)."""
    return {"txt2img": [], "img2img": []}
