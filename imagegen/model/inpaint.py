"""INPAINT_MODEL_ID: a dedicated inpainting checkpoint, whose UNet runs every edit with a mask.

Such a checkpoint is its base model with a UNet retrained for 9 input channels. Everything
else is the base's. So only its `unet` folder is pulled, like an adapter, into the base's
directory. The manifest lists it; changing INPAINT_MODEL_ID makes the copy incomplete. The
load fails the pull, naming INPAINT_MODEL_ID, when it does not fit the base.

Which UNet is in memory when is imagegen.model.unets' business."""

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from imagegen.model.adapters import REPO_RULE, is_repo_id, share_folder_name
from imagegen.model.share import InpaintRecord

INPAINT_FOLDER = "inpaint"
UNET = "unet"
INPAINT_CHANNELS = 9  # latents (4), mask (1), masked image's latents (4)


@dataclass(frozen=True)
class InpaintChoice:
    """INPAINT_MODEL_ID and INPAINT_MODEL_REVISION."""

    repo: str
    revision: str = "main"

    @property
    def folder(self) -> str:
        """Where its `unet` folder lies on the share, relative to the model's directory."""
        return f"{INPAINT_FOLDER}/{share_folder_name(self.repo)}"


def parse_inpaint(repo: str, revision: str) -> InpaintChoice | None:
    """The settings' choice; None when INPAINT_MODEL_ID is empty (the base UNet inpaints)."""
    repo = repo.strip()
    if not repo:
        return None
    if not is_repo_id(repo):
        raise ImproperlyConfigured(f"INPAINT_MODEL_ID: {repo!r} is not a hub repo id ({REPO_RULE})")
    return InpaintChoice(repo=repo, revision=revision.strip() or "main")


def matches(record: InpaintRecord | None, choice: InpaintChoice | None) -> bool:
    """Whether the manifest's checkpoint is the configured one, by revision asked or commit."""
    if choice is None or record is None:
        return choice is None and record is None
    return record.repo == choice.repo and choice.revision in (
        record.requested_revision,
        record.commit,
    )


def check_fits(inpaint: Any, base: Any) -> None:
    """Refuses an inpainting UNet (`inpaint`) that cannot run beside the `base` UNet.

    It needs 9 input channels and the base's cross-attention width, i.e. its text encoders."""
    channels = inpaint.get("in_channels")
    if channels != INPAINT_CHANNELS:
        raise ValueError(
            f"INPAINT_MODEL_ID: its UNet takes {channels} input channels; an inpainting "
            f"UNet takes {INPAINT_CHANNELS} (latents, mask, masked image)"
        )
    width, wanted = inpaint.get("cross_attention_dim"), base.get("cross_attention_dim")
    if width != wanted:
        raise ValueError(
            f"INPAINT_MODEL_ID: its UNet's cross-attention width is {width}, the base "
            f"model's {wanted}: it is made for another base model (MODEL_ID)"
        )
