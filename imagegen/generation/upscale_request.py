"""What an upscale asks for and what its record says ran.

An upscale is a job like a generation (queue, progress, cancel, record), so it rides in a
GenerationRequest's `upscale` field rather than in a board of its own; its prompt fields stay
empty and the record keeps the source image's generation parameters where it has some. Like an
edit's, its input is stored under its sha256 before the job is queued, so the job stays small.
"""

from pydantic import BaseModel, ConfigDict, Field

from imagegen.generation.stored_ids import SHA256

# A network's work per input pixel when nothing better is known: ESRGAN x4's 23 RRDB blocks of
# 64 features, 2 FLOPs a multiply-add (about 18 million multiply-adds a pixel, counted from the
# network's shape in imagegen/model/upscalers/rrdbnet.py).
GUESS_NETWORK_FLOPS_PER_PIXEL = 36e6
# The pace an upscale is estimated at: the development VM's fp32 convolution pace (its
# `measure_throughput`, about 100 GFLOP/s on 2 vCPUs), a guess for any other machine.
GUESS_FLOPS_PER_SECOND = 1e11
# Pillow's filters: seconds per output megapixel (Lanczos on the development VM, rounded up).
FILTER_SECONDS_PER_MEGAPIXEL = 0.05
GUESSED_NETWORK_SCALE = 4  # the estimate's guess before the network's file is read
MAX_PASSES = 3  # as imagegen.model.upscalers.upscaler runs a network


class UpscaleRequest(BaseModel):
    """An upscale: its input by sha256 (in the image store), the upscaler and the result's size."""

    model_config = ConfigDict(frozen=True)

    source: str = Field(pattern=SHA256.pattern, description="sha256 of the input image")
    source_image: str | None = Field(
        default=None, description="the stored image it upscales, by id; null: an upload"
    )
    upscaler: str = Field(description="the upscaler's name, as /sdapi/v1/upscalers lists it")
    scale: float = Field(description="the result's side over the source's")
    width: int = Field(description="the result's width")
    height: int = Field(description="the result's height")
    source_width: int
    source_height: int
    # A second upscaler blended over the first's result (A1111's upscaler_2), at this weight.
    upscaler_2: str | None = None
    upscaler_2_visibility: float = 0.0
    # What the estimate counts: the network's passes' input pixels, 0 for a filter.
    network_pixels: int = 0

    def estimated_seconds(self) -> float:
        """The documented guess (GUESS_*): a network's counted work over a guessed pace, or a
        filter's seconds per megapixel."""
        if self.network_pixels:
            return self.network_pixels * GUESS_NETWORK_FLOPS_PER_PIXEL / GUESS_FLOPS_PER_SECOND
        return self.width * self.height / 1e6 * FILTER_SECONDS_PER_MEGAPIXEL


class UpscaleParameters(BaseModel):
    """What the record says of an upscale: what ran, on what."""

    model_config = ConfigDict(frozen=True)

    upscaler: str
    scale: float = Field(description="the result's side over the source's")
    upscaler_scale: int | None = Field(description="the network's own scale; null: a filter")
    source_sha256: str
    source_url: str = Field(description="the stored input")
    source_image: str | None = Field(description="the stored image it upscales; null: an upload")
    source_width: int
    source_height: int
    tiles: int = Field(description="network tiles that ran (all passes); 1 for a filter")
    upscaler_2: str | None = Field(
        default=None, description="a second upscaler blended over the first's result; null: none"
    )
    upscaler_2_visibility: float = Field(default=0.0, description="the second's weight, 0 to 1")


def upscale_inputs(upscale: UpscaleRequest | UpscaleParameters | None) -> set[str]:
    """The stored input an upscale's job or record names (none for a generation), so it
    lives as long as an edit's inputs do."""
    if upscale is None:
        return set()
    if isinstance(upscale, UpscaleRequest):
        return {upscale.source}
    return {upscale.source_sha256}


def network_pixels(source: tuple[int, int], scale: float) -> int:
    """The pixels a 4x network's passes take in to enlarge `source` by `scale` (the estimate's
    guess)."""
    pixels, total, reached = source[0] * source[1], 0, 1
    for _ in range(MAX_PASSES):
        total += pixels
        reached *= GUESSED_NETWORK_SCALE
        if reached >= scale:
            break
        pixels *= GUESSED_NETWORK_SCALE**2
    return total
