"""The image service's answers, byte for byte: the schemas shape the service's objects
(JobView, ImageRecord) exactly as the hand-built dicts they replaced did. Each expected string
was captured from the service before that change.

Deliberate changes since: a job's `parameters` gained `scheduler` (null: the model's own)
and `adjusted` (what the service changed from what the client sent), because a job reports
what will run; and every scheduler is answered by A1111's name (a record made without a
chosen scheduler said the model's class, "EulerDiscreteScheduler", and now "Euler"; a chosen
`lcm` is "LCM"). And the model status gained `generation` at its end, GET /api's
`generation` `adapters` at its end, so a client sees the preset in force, and a job gained
`preview_step` and `preview_url` at its end, the live preview, and `request_id` after them
(the X-Request-ID that queued it) (what each answered before is still its beginning, byte
for byte). Everything else is byte for byte as it was."""

from dataclasses import replace
from datetime import UTC, datetime

from config.api import api
from imagegen.api.schemas import GenerationInForce, ImagePage, JobOut, ModelStatusOut
from imagegen.generation.images import GenerationParameters, ImageRecord
from imagegen.generation.job_board import JobProgress, JobState, JobView
from imagegen.generation.presets import Adjustment
from imagegen.generation.requests import GenerationRequest
from imagegen.model.status import AdapterView, DecoderView, DownloadBytes, ModelStatus, WorkerModel
from imagegen.selectors import ImagePage as ImagePageView

PARAMETERS = GenerationParameters(
    prompt="a lighthouse", negative_prompt=None, steps=20, guidance=7.0, width=1024,
    height=1024, seed=42, scheduler="Euler", model_id="org/m",
    revision="abc123",
)  # fmt: skip
RECORD = ImageRecord(
    id="20261122T093302728900Z-a1b2c3", created_at="2026-11-22T09:33:02.728Z",
    parameters=PARAMETERS, device="cpu",
    timings={"queued_seconds": 0.006, "model_wait_seconds": 0.0, "generation_seconds": 110.718},
)  # fmt: skip
CREATED = datetime(2026, 11, 22, 9, 31, 12, 4000, tzinfo=UTC)

SUCCEEDED = JobView(
    id="9f2c4e1ab07d3c55", state=JobState.SUCCEEDED, position=None, phase="done",
    progress=JobProgress(
        step=20, steps=20, fraction=1.0, elapsed_seconds=110.718, eta_seconds=None
    ),
    parameters=GenerationRequest(
        prompt="a lighthouse", steps=20, guidance=7.0, size=(1024, 1024), seed=42
    ),
    created_at=CREATED,
    started_at=datetime(2026, 11, 22, 9, 31, 12, 10500, tzinfo=UTC),
    finished_at=datetime(2026, 11, 22, 9, 33, 2, 728900, tzinfo=UTC),
    error=None, image=RECORD, request_id="req-1",
)  # fmt: skip
QUEUED = JobView(
    id="0000000000000001", state=JobState.QUEUED, position=3, phase="waiting for its turn",
    progress=JobProgress(step=0, steps=0, fraction=0.0, elapsed_seconds=None, eta_seconds=None),
    parameters=GenerationRequest(
        prompt="q", negative_prompt="n", steps=4, guidance=0.0, size=None, seed=7
    ),
    created_at=CREATED, started_at=None, finished_at=None, error=None, image=None,
)  # fmt: skip


def answer(schema, obj) -> str:
    """What Ninja writes for a route declaring `schema` that returns `obj`."""
    data = schema.model_validate(obj).model_dump()
    return api.renderer.render(None, data, response_status=200)


def test_a_finished_job_answers_exactly_as_before():
    assert answer(JobOut, SUCCEEDED) == (
        '{"id": "9f2c4e1ab07d3c55", "state": "succeeded", "position": null, "phase": "don'
        'e", "progress": {"step": 20, "steps": 20, "fraction": 1.0, "elapsed_seconds": 11'
        '0.718, "eta_seconds": null}, "parameters": {"prompt": "a lighthouse", "negative_'
        'prompt": null, "steps": 20, "guidance": 7.0, "scheduler": null, "size": [1024, 1'
        '024], "seed": 42, "force_cpu": false, "adjusted": []}, "created_at": "2026-11-22'
        'T09:31:12.004Z", "started_at": "2026-11-22T09:31:12.010Z", "finished_at": "2026-'
        '11-22T09:33:02.728Z", "error": null, "image": {"id": "20261122T093302728900Z-a1b'
        '2c3", "created_at": "2026-11-22T09:33:02.728Z", "parameters": {"prompt": "a ligh'
        'thouse", "negative_prompt": null, "steps": 20, "guidance": 7.0, "width": 1024, "'
        'height": 1024, "seed": 42, "scheduler": "Euler", "model_id": "o'
        'rg/m", "revision": "abc123"}, "device": "cpu", "timings": {"queued_seconds": 0.0'
        '06, "model_wait_seconds": 0.0, "generation_seconds": 110.718}}, "image_url": "/i'
        'mages/20261122T093302728900Z-a1b2c3.png", "preview_step": 0, "preview_url": null, '
        '"request_id": "req-1"}'
    )


def test_a_queued_job_answers_exactly_as_before():
    assert answer(JobOut, QUEUED) == (
        '{"id": "0000000000000001", "state": "queued", "position": 3, "phase": "waiting f'
        'or its turn", "progress": {"step": 0, "steps": 0, "fraction": 0.0, "elapsed_seco'
        'nds": null, "eta_seconds": null}, "parameters": {"prompt": "q", "negative_prompt'
        '": "n", "steps": 4, "guidance": 0.0, "scheduler": null, "size": null, "seed": 7,'
        ' "force_cpu": false, "adjusted": []}, "created_at": "2026-11-22T09:31:12.004Z", '
        '"started_at": null, "finished_at": null, "error": null, "image": null, "image_ur'
        'l": null, "preview_step": 0, "preview_url": null, "request_id": null}'
    )


def test_an_image_record_answers_exactly_as_before():
    assert answer(ImageRecord, RECORD) == (
        '{"id": "20261122T093302728900Z-a1b2c3", "created_at": "2026-11-22T09:33:02.728Z"'
        ', "parameters": {"prompt": "a lighthouse", "negative_prompt": null, "steps": 20,'
        ' "guidance": 7.0, "width": 1024, "height": 1024, "seed": 42, "scheduler": "Euler'
        '", "model_id": "org/m", "revision": "abc123"}, "device": "cpu",'
        ' "timings": {"queued_seconds": 0.006, "model_wait_seconds": 0.0, "generation_sec'
        'onds": 110.718}}'
    )


def test_an_image_page_answers_exactly_as_before():
    page = ImagePageView(items=[RECORD], next="/images?limit=1&before=" + RECORD.id)
    assert answer(ImagePage, page) == (
        '{"items": [{"id": "20261122T093302728900Z-a1b2c3", "created_at": "2026-11-22T09:'
        '33:02.728Z", "parameters": {"prompt": "a lighthouse", "negative_prompt": null, "'
        'steps": 20, "guidance": 7.0, "width": 1024, "height": 1024, "seed": 42, "schedul'
        'er": "Euler", "model_id": "org/m", "revision": "abc123"}, "devi'
        'ce": "cpu", "timings": {"queued_seconds": 0.006, "model_wait_seconds": 0.0, "gen'
        'eration_seconds": 110.718}, "url": "/images/20261122T093302728900Z-a1b2c3.png"}],'
        ' "next": "/images?limit=1&before=20261122T093302728900Z-a1b2c3"}'
    )  # as before, with each item's PNG (url), as a job's image_url


def test_a_job_with_a_chosen_scheduler_and_a_clamped_value_answers_them():
    adjusted = [
        Adjustment(field="steps", asked=20, applied=8),
        Adjustment(field="scheduler", asked="euler_a", applied="lcm"),
    ]
    parameters = GenerationRequest(
        prompt="q", steps=8, guidance=1.0, scheduler="lcm", seed=7, adjusted=adjusted
    )
    job = replace(QUEUED, parameters=parameters)
    assert (
        '"parameters": {"prompt": "q", "negative_prompt": null, "steps": 8, "guidance": 1.0, '
        '"scheduler": "LCM", "size": null, "seed": 7, "force_cpu": false, "adjusted": [{"field": '
        '"steps", "asked": 20, "applied": 8}, {"field": "scheduler", "asked": "Euler a", '
        '"applied": "LCM"}]}' in answer(JobOut, job)
    )


# The model status as it answered before `generation` was added beside it (captured then).
STATUS = ModelStatus(
    state="ready", device="cpu", model_path="/models/stabilityai--stable-diffusion-xl-base-1.0",
    model_id="stabilityai/stable-diffusion-xl-base-1.0", revision="main", variant="fp16",
    commit="4621659840", weights_on_share=True, error=None,
    download=DownloadBytes(bytes_done=7, bytes_total=7),
    adapters=[AdapterView(repo="ByteDance/SDXL-Lightning",
                          file="sdxl_lightning_4step_lora.safetensors", scale=1.0)],
    decoder=DecoderView(kind="full", repo=None),
)  # fmt: skip
STATUS_BEFORE = (
    '{"state": "ready", "device": "cpu", "model_path": "/models/stabilityai--stable-diffusion-'
    'xl-base-1.0", "model_id": "stabilityai/stable-diffusion-xl-base-1.0", "revision": "main"'
    ', "variant": "fp16", "commit": "4621659840", "weights_on_share": true, "error": null, "do'
    'wnload": {"bytes_done": 7, "bytes_total": 7}, "adapters": [{"repo": "ByteDance/SDXL-Ligh'
    'tning", "file": "sdxl_lightning_4step_lora.safetensors", "scale": 1.0}], "decoder": {"ki'
    'nd": "full", "repo": null}'
)
# Added after `decoder` with INPAINT_MODEL_ID (null when none is configured).
STATUS_NOW = f'{STATUS_BEFORE}, "inpaint": null'
# GET /api's `generation` as it answered before `adapters` was added to it (captured then).
RULES = {
    "preset": "sdxl-lightning-4step", "steps": 4, "guidance": 0.0, "scheduler": "euler_trailing",
    "max_steps": 8, "max_guidance": 1.0, "schedulers": ["ddim_trailing", "euler_trailing"],
}  # fmt: skip
RULES_BEFORE = (
    '{"preset": "sdxl-lightning-4step", "steps": 4, "guidance": 0.0, "scheduler": "euler_tra'
    'iling", "max_steps": 8, "max_guidance": 1.0, "schedulers": ["ddim_trailing", "euler_tra'
    'iling"]'
)
ADAPTERS = (
    '"adapters": [{"repo": "ByteDance/SDXL-Lightning", "file": "sdxl_lightning_4step_lora.saf'
    'etensors", "scale": 1.0}]'
)


def test_the_model_status_answers_as_before_with_the_rules_in_force_at_the_end():
    selector_rules = {**RULES, "adapters": [STATUS.adapters[0].model_dump()]}
    out = ModelStatusOut(**STATUS.model_dump(), generation=selector_rules)
    assert answer(ModelStatus, STATUS) == f"{STATUS_NOW}}}"  # the schema it answered with
    assert answer(ModelStatusOut, out) == f'{STATUS_NOW}, "generation": {RULES_BEFORE}}}}}'


def test_the_model_status_of_distributed_mode_keeps_its_workers_before_the_rules():
    workers = [WorkerModel(name="worker-1", state="ready", error=None, job=None)]
    status = STATUS.model_copy(update={"workers": workers})
    out = ModelStatusOut(**status.model_dump(), generation=RULES)
    assert answer(ModelStatusOut, out) == (
        f'{STATUS_NOW}, "workers": [{{"name": "worker-1", "state": "ready", "error": null, '
        f'"job": null, "models": [], "worker_models": [], "loads": {{}}, "swaps": {{}}}}], '
        f'"generation": {RULES_BEFORE}}}}}'
    )


def test_the_index_rules_answer_as_before_with_the_adapters_at_the_end():
    rules = {**RULES, "adapters": [STATUS.adapters[0].model_dump()]}
    assert answer(GenerationInForce, rules) == f"{RULES_BEFORE}, {ADAPTERS}}}"


def test_a_job_with_a_preview_answers_its_step_and_url_at_its_end():
    shown = answer(JobOut, replace(QUEUED, state=JobState.RUNNING, position=None, preview_step=3))
    assert shown.endswith(
        '"preview_step": 3, "preview_url": "/jobs/0000000000000001/preview", "request_id": null}'
    )
