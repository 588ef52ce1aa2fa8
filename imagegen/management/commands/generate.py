"""manage.py generate: one image from the command line, to check a host end to end."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from pydantic import ValidationError

from config.errors import ServiceError
from imagegen.generation import get_generator
from imagegen.schemas import GenerateForm


class Command(BaseCommand):
    help = (
        "Generate one PNG in this process with the model on the share (the same bounds and "
        "defaults as POST /generate). Loads the model first: about 48 s for SDXL on the "
        "reference host."
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
            result = get_generator().generate(request)
        except ServiceError as error:
            raise CommandError(error.message) from None
        options["out"].write_bytes(result.png)
        self.stdout.write(
            f"{options['out']}: {result.width}x{result.height}, seed {result.seed}, "
            f"{result.steps} steps, guidance {result.guidance:g}, {result.device}, "
            f"{result.seconds:.1f}s"
        )
