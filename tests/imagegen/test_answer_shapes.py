"""The image service's answers, byte for byte: the schemas shape the service's objects
(JobView, ImageRecord) exactly as the hand-built dicts they replaced did. Each expected string
was captured from the service before that change.

Two deliberate changes since: a job's `parameters` gained `scheduler` (null: the model's own)
and `adjusted` (what the service changed from what the client sent), because a job reports
what will run; and every scheduler is answered by A1111's name (a record made without a
chosen scheduler said the model's class, "EulerDiscreteScheduler", and now "Euler"; a chosen
`lcm` is "LCM"). Everything else is byte for byte as it was."""

from dataclasses import replace
from datetime import UTC, datetime

from config.api import api
from imagegen.api.schemas import ImagePage, JobOut
from imagegen.generation.images import GenerationParameters, ImageRecord
from imagegen.generation.job_board import JobProgress, JobState, JobView
from imagegen.generation.presets import Adjustment
from imagegen.generation.render import GenerationRequest
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
    error=None, image=RECORD,
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
        'mages/20261122T093302728900Z-a1b2c3.png"}'
    )


def test_a_queued_job_answers_exactly_as_before():
    assert answer(JobOut, QUEUED) == (
        '{"id": "0000000000000001", "state": "queued", "position": 3, "phase": "waiting f'
        'or its turn", "progress": {"step": 0, "steps": 0, "fraction": 0.0, "elapsed_seco'
        'nds": null, "eta_seconds": null}, "parameters": {"prompt": "q", "negative_prompt'
        '": "n", "steps": 4, "guidance": 0.0, "scheduler": null, "size": null, "seed": 7,'
        ' "force_cpu": false, "adjusted": []}, "created_at": "2026-11-22T09:31:12.004Z", '
        '"started_at": null, "finished_at": null, "error": null, "image": null, "image_ur'
        'l": null}'
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
        'eration_seconds": 110.718}}], "next": "/images?limit=1&before=20261122T093302728'
        '900Z-a1b2c3"}'
    )


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
