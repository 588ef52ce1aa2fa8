"""manage.py generate: one image from the command line, to check a host end to end; with
--image (and --mask), an edit of that file by the same rules as POST /generate's form."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import ValidationError

from core.errors import ServiceError
from imagegen import selectors, services
from imagegen.api.schemas import GenerateForm
from imagegen.backend import current_backend
from imagegen.generation.parameters import steps_running
from imagegen.generation.requests import MASK_BLUR_DEFAULT, STRENGTH_DEFAULT, GenerationRequest


class Command(BaseCommand):
    help = (
        "Generate one PNG in this process with the model on the share (the same bounds and "
        "defaults as POST /generate; the image is also stored in OUTPUT_DIR). Loads the model "
        "first: about 48 s for SDXL on the reference host."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prompt")
        parser.add_argument("--out", type=Path, default=Path("generated.png"))
        parser.add_argument("--negative-prompt")
        parser.add_argument("--steps")
        parser.add_argument("--guidance")
        parser.add_argument("--size", help="WIDTHxHEIGHT, multiples of 8")
        parser.add_argument("--seed")
        parser.add_argument("--image", type=Path, help="start from this image (img2img)")
        parser.add_argument("--mask", type=Path, help="white repaints, black keeps (inpainting)")
        parser.add_argument(
            "--strength", type=float, help=f"0 < s <= 1; default {STRENGTH_DEFAULT}"
        )
        parser.add_argument("--mask-blur", type=int, help=f"pixels; default {MASK_BLUR_DEFAULT}")

    def handle(self, *args, **options) -> None:
        fields = {
            key: options[key]
            for key in ("prompt", "negative_prompt", "steps", "guidance", "size", "seed")
            if options[key] is not None
        }
        try:
            request = GenerateForm.model_validate(fields).to_request()
        except ValidationError as error:
            raise CommandError(str(error)) from None
        try:
            request = self._edit(request, options)
            _job, record = services.generation_run(current_backend(), request=request, timeout=None)
        except ServiceError as error:
            raise CommandError(error.message) from None
        options["out"].write_bytes(
            selectors.image_png(current_backend(), image_id=record.id).read_bytes()
        )
        p = record.parameters
        ran = (
            f"{p.steps} steps"
            if p.edit is None
            else (f"{steps_running(p)} of {p.steps} steps (strength {p.edit.strength:g})")
        )
        self.stdout.write(
            f"{options['out']}: {p.width}x{p.height}, seed {p.seed}, {ran}, "
            f"guidance {p.guidance:g}, {record.device}, "
            f"{record.timings['generation_seconds']:.1f}s (image {record.id})"
        )

    def _edit(self, request: GenerationRequest, options: dict[str, Any]) -> GenerationRequest:
        """The request made an edit of --image (and --mask), or as it was without one."""
        edit_only = [f"--{n.replace('_', '-')}" for n in ("mask", "strength", "mask_blur")
                     if options[n] is not None]  # fmt: skip
        if options["image"] is None:
            if edit_only:
                raise CommandError(f"{', '.join(edit_only)}: applies to an edit only: --image")
            return request
        try:
            image = options["image"].read_bytes()
            mask = None if options["mask"] is None else options["mask"].read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {error.filename}: {error.strerror}") from None
        return services.edit_request(
            current_backend(), request=request, image=image, mask=mask,
            strength=options["strength"], mask_blur=options["mask_blur"],
        )  # fmt: skip
