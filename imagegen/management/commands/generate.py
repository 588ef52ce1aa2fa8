"""manage.py generate: one image from the command line, to check a host end to end."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import ValidationError

from config.errors import ServiceError
from imagegen import selectors, services
from imagegen.api.schemas import GenerateForm


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
            _job, record = services.generation_run(request=request, timeout=None)
        except ServiceError as error:
            raise CommandError(error.message) from None
        options["out"].write_bytes(selectors.image_png(image_id=record.id).read_bytes())
        p = record.parameters
        self.stdout.write(
            f"{options['out']}: {p.width}x{p.height}, seed {p.seed}, {p.steps} steps, "
            f"guidance {p.guidance:g}, {record.device}, "
            f"{record.timings['generation_seconds']:.1f}s (image {record.id})"
        )
