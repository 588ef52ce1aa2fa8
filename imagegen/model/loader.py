"""The process's one pipeline and the state machine that gets it there.

State is per process: every start is `not_started`, even with the weights on the share. One
background job pulls at a time; concurrent pulls share it.

    not_started -> downloading -> loading -> ready      (cold: weights not on the share)
    not_started -> loading -> ready                      (warm: weights on the share)
    downloading | loading -> failed -> (pull) ...        (failed keeps the error; a pull retries)
"""

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any

from imagegen.errors import ModelDownloading, ModelFailed, ModelLoading, ModelNotPulled
from imagegen.model import hub, inpaint, share
from imagegen.model.adapters import Adapter, give_back_freed_memory
from imagegen.model.loras_pull import ExtraFiles, pull_with_loras
from imagegen.model.pipeline import LoadOptions, load_pipeline, load_unet
from imagegen.model.pull_failures import explain_pull_failure
from imagegen.model.share import InpaintRecord
from imagegen.model.status import (
    AdapterView,
    DecoderView,
    DownloadBytes,
    InpaintView,
    ModelStatus,
    State,
    describe,
)
from imagegen.model.unets import BASE, INPAINT, UnetSwap

log = logging.getLogger(__name__)

DRAIN_POLL = 0.05  # seconds between looks while room is made for another model

# Held while a load imports and builds the model's code. diffusers and transformers import lazily;
# two threads at once can see a half-made module ("cannot import name"). The load's hooks
# (ModelLoader.at_load) run with it held.
MODEL_CODE = threading.Lock()


class ModelLoader:
    def __init__(
        self, source: hub.ModelSource, device: str, options: LoadOptions | None = None
    ) -> None:
        self.source = source
        self.device = device
        self.options = options or LoadOptions()
        self._lock = threading.Lock()
        self._state = State.NOT_STARTED
        self._error: str | None = None
        self._pipeline: Any = None
        self.loaded_commit: str | None = None
        self.loaded_inpaint: InpaintRecord | None = None  # the checkpoint the pipeline swaps in
        self._unets: UnetSwap | None = None
        self._job_done: threading.Event | None = None
        self._progress = hub.DownloadProgress()
        # Run in the loading thread after the build, before the state turns ready. For work that
        # must not run beside a generation (imagegen.generation.work's count and pace probe). A
        # hook's failure fails the load; a hook that must not fail catches its own.
        self.at_load: list[Callable[[], None]] = []
        # Held in the loading thread from before the weights are read until the model is resident.
        # It makes room in memory, one load at a time (imagegen.model.shelf).
        self.load_guard: Callable[[], AbstractContextManager] = contextlib.nullcontext
        self._draining = False  # room is being made: no new job starts on the pipeline
        self.last_used = 0.0  # time.monotonic() of the last pipeline() or load: least recent first
        self._users = 0  # jobs running on the pipeline now: it is not freed under them
        # Pulled with the model, its state waiting for them (UPSCALERS' files, MODEL_ID's only).
        self.extra_files: tuple[ExtraFiles, ...] = ()

    def extras_missing(self) -> bool:
        return any(extra.missing() for extra in self.extra_files)

    def status(self) -> "ModelStatus":
        manifest = self.source.complete_manifest()
        with self._lock:
            state, error, progress = self._state, self._error, self._progress
        return ModelStatus(
            state=state.value,
            device=self.device,
            model_path=str(self.source.path),
            model_id=self.source.model_id,
            revision=self.source.revision,
            variant=self.source.variant,
            commit=manifest.commit if manifest else None,
            weights_on_share=manifest is not None,
            error=error,
            download=DownloadBytes(
                bytes_done=progress.bytes_done, bytes_total=progress.bytes_total
            ),
            adapters=[
                AdapterView(repo=a.repo, file=a.file, scale=a.scale) for a in self.source.adapters
            ],
            decoder=self._decoder_view(manifest),
            inpaint=self._inpaint_view(manifest),
        )

    def _inpaint_view(self, manifest: share.Manifest | None) -> InpaintView | None:
        choice = self.source.inpaint
        if choice is None:
            return None
        record = manifest.inpaint if manifest else None
        unets = self._unets
        state = "not_on_share" if record is None else "on_share"
        if unets is not None and unets.resident == INPAINT:
            state = "loaded"
        return InpaintView(
            model_id=choice.repo,
            revision=choice.revision,
            commit=record.commit if record else None,
            state=state,
        )

    def _decoder_view(self, manifest: share.Manifest | None) -> DecoderView:
        choice = self.source.decoder
        repo = choice.repo
        if choice.tiny and repo is None:
            on_share = manifest.decoder if manifest else None
            repo = on_share.repo if on_share else choice.tiny_repo(self.source.model_index())
        return DecoderView(kind=choice.kind, repo=repo)

    def pull(self) -> bool:
        """Starts the pull job unless one runs; False when the model is already ready."""
        if self._state is State.READY:
            return False
        on_share = self.source.complete_manifest() is not None
        with self._lock:
            if self._state is State.READY:
                return False
            if not self._job_running():
                self._start_job(on_share)
            return True

    def warm_start(self) -> bool:
        """WARM_START: loads a complete copy at start, so the first request skips the load.

        Off by default: the contract keeps a new process `not_started`."""
        if self.source.complete_manifest() is None:
            return False
        with self._lock:
            if self._state is State.NOT_STARTED and not self._job_running():
                self._start_job(on_share=True)
        return True

    def check_loadable(self) -> None:
        """Refuses at once what cannot become ready soon, and starts nothing.

        A refused request must not start a 14 GB load."""
        if self._state is State.READY:
            return
        on_share = self.source.complete_manifest() is not None
        with self._lock:
            self._refuse_unloadable(on_share)

    @property
    def resident(self) -> bool:
        """Whether the pipeline is in this process's memory now."""
        return self._state is State.READY

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """A job runs on the pipeline for the block; free() leaves it loaded meanwhile.

        It waits while room is made (draining), so a steady queue cannot pin a model."""
        while True:
            with self._lock:
                if not self._draining:
                    self._users += 1
                    break
            time.sleep(DRAIN_POLL)
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1

    @property
    def busy(self) -> bool:
        """Whether a job runs on the pipeline now (in_use)."""
        return self._users > 0

    @contextlib.contextmanager
    def draining(self) -> Iterator[None]:
        """No new job starts on the pipeline for the block; running ones finish."""
        with self._lock:
            self._draining = True
        try:
            yield
        finally:
            with self._lock:
                self._draining = False

    def free(self) -> bool:
        """Drops the loaded pipeline so another model can have its memory.

        The weights stay on the share. False when not loaded, pulling or in use."""
        with self._lock:
            if self._state is not State.READY or self._job_running() or self._users:
                return False
            self._pipeline = None
            self._unets = None
            self.loaded_commit = None
            self.loaded_inpaint = None
            self._state = State.NOT_STARTED
        gc.collect()  # the pipeline's modules hold reference cycles
        give_back_freed_memory()  # else malloc keeps the pages, and the next load adds to them
        log.info("model %s: freed (its weights stay on the share)", self.source.model_id)
        return True

    def pipeline(self, timeout: float) -> Any:
        """The loaded pipeline, loaded from the share if need be.

        It waits, bounded, for a load under way. What cannot load soon is refused at once."""
        self.last_used = time.monotonic()
        if self._state is State.READY:
            return self._pipeline
        on_share = self.source.complete_manifest() is not None
        with self._lock:
            self._refuse_unloadable(on_share)
            if self._state is not State.READY and not self._job_running():
                self._start_job(on_share)
            job_done = self._job_done
        if job_done is not None and not job_done.wait(timeout):
            raise ModelLoading()
        with self._lock:
            if self._state is State.READY:
                return self._pipeline
            raise ModelFailed(self._error)

    def _refuse_unloadable(self, on_share: bool) -> None:
        """Called with the lock held."""
        if self._state is State.READY:
            return
        if self._job_running():
            if self._state is State.DOWNLOADING:
                raise ModelDownloading()
        elif self._state is State.FAILED:
            raise ModelFailed(self._error)
        elif not on_share:
            raise ModelNotPulled()

    def _job_running(self) -> bool:
        return self._job_done is not None and not self._job_done.is_set()

    def _start_job(self, on_share: bool) -> None:
        """Called with the lock held.

        The state moves at once, so no later answer reports the previous job's outcome."""
        self._state = State.LOADING if on_share else State.DOWNLOADING
        self._error = None
        self._progress = hub.DownloadProgress()
        self._job_done = threading.Event()
        # A daemon: stopping must not wait for a download. An interrupted one leaves no manifest, so
        # the next pull repairs it.
        threading.Thread(
            target=self._run_job,
            args=(self._job_done, self._progress),
            name="model-pull",
            daemon=True,
        ).start()

    def _set_state(self, state: State) -> None:
        with self._lock:
            self._state = state
        log.info("model %s: %s", self.source.model_id, state.value)

    def _run_job(self, done: threading.Event, progress: hub.DownloadProgress) -> None:
        try:
            manifest = self.source.complete_manifest()
            if manifest is None or self.extras_missing():
                self._set_state(State.DOWNLOADING)
                manifest = pull_with_loras(self.source, progress, extras=self.extra_files)
            else:
                share.remove_leftovers(self.source.path, keep={f.path for f in manifest.files})
            self._set_state(State.LOADING)
            if manifest.inpaint is not None:  # before 13 GB are loaded in vain
                path = self.source.path
                inpaint.check_fits(
                    hub.unet_config(path / manifest.inpaint.folder), hub.unet_config(path)
                )
            decoder = manifest.decoder
            with self.load_guard(), MODEL_CODE:
                pipe = load_pipeline(
                    self.source.path,
                    variant=manifest.load_variant,
                    device=self.device,
                    options=self.options,
                    adapters=self._adapter_files(manifest),
                    tiny_decoder=self.source.path / decoder.folder if decoder else None,
                )
                unets = self._unet_swap(pipe, manifest) if manifest.inpaint else None
                for hook in self.at_load:
                    hook()
                with self._lock:  # resident before the guard lets the next load make room
                    self._pipeline = pipe
                    self.loaded_commit = manifest.commit
                    self.loaded_inpaint = manifest.inpaint
                    self._unets = unets
                    self._state = State.READY
                    self.last_used = time.monotonic()
            log.info("model %s: ready", self.source.model_id)
        except Exception as exc:
            log.exception("model pull failed")
            with self._lock:
                # A failed download says what to do; a failed load is the model's fault.
                downloading = self._state is State.DOWNLOADING
                self._state = State.FAILED
                if downloading:
                    self._error = explain_pull_failure(exc, self.source)
                else:
                    self._error = describe(exc)
        finally:
            done.set()

    def _adapter_files(self, manifest: share.Manifest) -> list[tuple[Adapter, Path]]:
        """The configured adapters' scales and share files, in MODEL_ADAPTERS order."""
        placed = {(a.repo, a.file): a.path for a in manifest.adapters}
        return [(a, self.source.path / placed[(a.repo, a.file)]) for a in self.source.adapters]

    def _unet_swap(self, pipe: Any, manifest: share.Manifest) -> UnetSwap:
        """The swap between the base UNet and the inpainting checkpoint's, each loaded from the
        share."""
        assert manifest.inpaint is not None
        load = partial(
            load_unet, variant=manifest.load_variant, device=self.device, options=self.options,
            pipeline_class=type(pipe), adapters=self._adapter_files(manifest),
        )  # fmt: skip
        inpaint_path = self.source.path / manifest.inpaint.folder
        return UnetSwap(
            pipe, {BASE: partial(load, self.source.path), INPAINT: partial(load, inpaint_path)}
        )

    def use_unet(self, *, inpaint: bool) -> InpaintRecord | None:
        """Puts the UNet a job runs into the ready pipeline; called in the job, after `pipeline`.

        Returns the inpainting checkpoint's record when its UNet runs, None for the base's."""
        unets = self._unets
        if unets is None:
            return None
        unets.use(INPAINT if inpaint else BASE)
        return self.loaded_inpaint if inpaint else None
