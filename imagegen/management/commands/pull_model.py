"""manage.py pull_model: the same lock-free, manifest-last download as POST /model/pull
(the model, its adapters and its decoder), without loading the model; --check verifies a
download already on the share. --model names an offered model (MODELS) instead of MODEL_ID,
--all takes every offered one in turn, --remove deletes one from the share. Without --model
the UPSCALERS files not on the share yet come too."""

import contextlib
import dataclasses
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from imagegen.backend import (
    catalog_of,
    model_source,
    offered_sources,
    offered_upscalers,
    rules_from_settings,
)
from imagegen.generation.catalog import UnknownModel
from imagegen.model import hub, share
from imagegen.model.adapters import REPO_RULE, is_repo_id
from imagegen.model.loras_pull import pull_with_loras
from imagegen.model.pull_failures import explain_pull_failure

LOG_EVERY = 10.0  # seconds between progress lines when not on a terminal


@contextlib.contextmanager
def fresh_cache(source: hub.ModelSource) -> Iterator[hub.ModelSource]:
    """The source with an empty download cache of its own (removed afterwards): --force
    fetches every file from the hub again, where the usual cache would hand back the bytes
    it kept from the last download."""
    source.cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="force-", dir=source.cache_dir) as cache:
        yield dataclasses.replace(source, cache_dir=Path(cache))


def with_extras(manifest: share.Manifest) -> str:
    """What the manifest holds beside the model, for the command's last line."""
    parts = [f"adapter {a.repo}:{a.file}" for a in manifest.adapters]
    if manifest.decoder:
        parts.append(f"decoder {manifest.decoder.repo}")
    return f" (with {', '.join(parts)})" if parts else ""


class Command(BaseCommand):
    help = (
        "Download the configured model (MODEL_ID, MODEL_REVISION, MODEL_VARIANT), its adapters "
        "(MODEL_ADAPTERS) and decoder (VAE_DECODER) to MODEL_DIR without loading it. Skips the "
        "download when a complete copy is already there."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help="verify the download on the share instead (sizes, and the hub's hashes); "
            "exits 1 naming every broken file",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="download every file from the hub again, even when the share is complete",
        )
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--model",
            metavar="ORG/NAME",
            help="an offered model (MODEL_ID or a MODELS entry, by repo id or unique name part) "
            "instead of MODEL_ID",
        )
        which.add_argument(
            "--all", action="store_true", help="every offered model in turn, MODEL_ID first"
        )
        which.add_argument(
            "--remove",
            metavar="ORG/NAME",
            help="delete an offered model's folder from the share (not MODEL_ID's; one not "
            "offered only with --force); a process that has it loaded keeps it in memory until "
            "freed, then finds it gone (409)",
        )

    def handle(self, *args, **options) -> None:
        if options["remove"]:
            self.remove(options["remove"], force=options["force"])
            return
        for source in self.sources(options):
            self.handle_one(source, options)
        if options["model"] is None and not options["check"]:
            self.pull_upscalers()

    def pull_upscalers(self) -> None:
        """The UPSCALERS files not on the share yet (each skipped when it is there)."""
        upscalers = offered_upscalers()
        fetched = upscalers.pull()
        for entry in upscalers.entries:
            done = "downloaded" if entry in fetched else "on the share already"
            self.stdout.write(f"upscaler {entry.name} ({entry.repo}:{entry.file}): {done}")

    def sources(self, options: dict) -> list[hub.ModelSource]:
        """The models this command line names: MODEL_ID's by default."""
        if options["all"]:
            return offered_sources()
        if options["model"] is None:
            return [model_source()]
        catalog = catalog_of(offered_sources(), rules_from_settings())
        try:
            return [catalog.find(options["model"]).source]
        except UnknownModel as exc:
            raise CommandError(f"--model {exc.rule}") from None

    def remove(self, name: str, *, force: bool) -> None:
        """Deletes one model's folder from the share. MODEL_ID's is refused: every process
        loads it, and a pull with no model named fetches it again. A model this deployment does
        not offer may be another's on a shared share: only with --force. Only this command's
        own process is seen: a web process or worker that has the model loaded keeps its memory."""
        catalog = catalog_of(offered_sources(), rules_from_settings())
        try:
            model_id = catalog.find(name).source.model_id
        except UnknownModel as exc:
            if not force:
                raise CommandError(
                    f"--remove {exc.rule}; a model another deployment may use is removed only "
                    "with --force"
                ) from None
            if not is_repo_id(name):
                rule = f"--remove: {name!r} is not a hub repo id ({REPO_RULE})"
                raise CommandError(rule) from None
            model_id = name
        if model_id.lower() == settings.MODEL_ID.lower():
            raise CommandError(
                f"--remove: {model_id} is MODEL_ID, the default model every process loads; "
                "change MODEL_ID first"
            )
        path = share.model_path(settings.MODEL_DIR, model_id)
        if not path.is_dir():
            self.stdout.write(f"{model_id} is not on the share ({path}); nothing to remove")
            return
        freed = share.remove_model(path)
        self.stdout.write(f"{model_id}: removed {path} ({freed} bytes)")

    def handle_one(self, source: hub.ModelSource, options: dict) -> None:
        if options["check"]:
            self.verify(source)
            return
        if options["force"]:
            with fresh_cache(source) as forced:
                self.download(forced, reuse=False)
            return
        manifest = source.complete_manifest()
        if manifest is not None:
            self.stdout.write(
                f"{source.model_id}@{manifest.commit[:12]} is complete on the share "
                f"({manifest.total_bytes} bytes in {source.path}); nothing to download"
            )
            return
        self.download(source)

    def download(self, source: hub.ModelSource, *, reuse: bool = True) -> None:
        progress = hub.DownloadProgress()
        outcome: dict = {}

        def download() -> None:
            try:
                outcome["manifest"] = pull_with_loras(source, progress, reuse=reuse)
            except Exception as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=download, daemon=True)
        worker.start()
        self.follow(worker, progress)
        if "error" in outcome:
            error = explain_pull_failure(outcome["error"], source)
            self.stderr.write(f"pull_model: FAILED: {error}")
            sys.exit(1)
        manifest = outcome["manifest"]
        self.stdout.write(
            f"{source.model_id}@{manifest.commit[:12]}: {len(manifest.files)} files, "
            f"{manifest.total_bytes} bytes in {source.path}{with_extras(manifest)}"
        )

    def follow(self, worker: threading.Thread, progress: hub.DownloadProgress) -> None:
        """A progress bar on a terminal; a plain line every LOG_EVERY seconds otherwise."""
        if self.stdout.isatty():
            with tqdm(unit="B", unit_scale=True, unit_divisor=1024, desc="download") as bar:
                while worker.is_alive():
                    worker.join(0.5)
                    bar.total = progress.bytes_total or None
                    bar.update(progress.bytes_done - bar.n)
            return
        started = time.monotonic()
        while worker.is_alive():
            worker.join(LOG_EVERY)
            if worker.is_alive():
                rate = progress.bytes_done / max(time.monotonic() - started, 1e-6)
                self.stdout.write(
                    f"download: {progress.bytes_done}/{progress.bytes_total} bytes, "
                    f"{rate / 1e6:.1f} MB/s"
                )

    def verify(self, source: hub.ModelSource) -> None:
        manifest = share.read_manifest(source.path)
        if manifest is None:
            self.stderr.write(f"check: no complete download in {source.path} (no manifest)")
            sys.exit(1)
        broken = share.broken_files(source.path, manifest)
        if broken:
            for line in broken:
                self.stderr.write(f"check: broken: {line}")
            sys.exit(1)
        self.stdout.write(
            f"check: {len(manifest.files)} files of {source.model_id}@{manifest.commit[:12]}"
            f"{with_extras(manifest)} match the hub's sizes and hashes"
        )
