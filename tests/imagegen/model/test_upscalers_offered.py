"""UPSCALERS: the upscaler files offered by name beside Lanczos and Nearest, how an entry is
written, what a malformed one does to the start, and their pull onto the share (manage.py
pull_model, run in this process as an operator's manage.py runs it)."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.errors import FieldError
from imagegen.model.upscalers.offered import (
    OfferedUpscalers,
    UpscalerEntry,
    UpscalerNotPulled,
    parse_upscalers,
)
from imagegen.model.upscalers.upscaler import LANCZOS, NEAREST
from tests.support.commands import run_command
from tests.support.local_hub import LocalHub
from tests.support.model_service import SD_REPO, model_service_env
from tests.support.tiny_upscaler import place_on_hub

ENTRIES = "testorg/tiny-esrgan:tiny-x4.pth, testorg/tiny-esrgan:tiny-x2.safetensors=Double"


def test_entries_are_repo_file_pairs_named_by_the_files_stem_unless_given():
    assert parse_upscalers(" org/one:x4.pth , Org/two:sub/RealESRGAN_x2.safetensors=Two,") == (
        UpscalerEntry("org/one", "x4.pth", "x4"),
        UpscalerEntry("Org/two", "sub/RealESRGAN_x2.safetensors", "Two"),
    )
    assert parse_upscalers("") == ()


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("org/one", "'org/one' is not repo:file"),
        ("not a repo:x.pth", "'not a repo' in 'not a repo:x.pth' is not a hub repo id"),
        ("org/one:x4.bin", "'org/one:x4.bin' must name a .safetensors or .pth file"),
        ("org/one:../x4.pth", "the file in 'org/one:../x4.pth' must be a path inside the repo"),
        ("org/one:x4.pth=", "'org/one:x4.pth=' has an empty name"),
        ("org/one:x4.pth,org/two:X4.pth", "the name 'X4' is offered twice"),
        ("org/one:a.pth=lanczos", "the name 'lanczos' is offered twice"),
    ],
)
def test_a_malformed_entry_stops_the_start_naming_it(value, named):
    """The app's start (manage.py check's, as a web process's) refuses it."""
    with pytest.raises(ImproperlyConfigured, match=f"^UPSCALERS: {named}"):
        run_command("check", env={"MODEL_ID": SD_REPO, "UPSCALERS": value})


def test_pull_model_fetches_each_upscaler_once_and_a_warm_pull_skips_them(
    hub_root, share, tmp_path
):
    place_on_hub(hub_root)
    with LocalHub(hub_root) as hub:
        env = {**model_service_env(hub.url, share, tmp_path), "UPSCALERS": ENTRIES}
        cold = run_command("pull_model", env=env)
        assert cold.returncode == 0, cold.stderr
        assert "upscaler tiny-x4 (testorg/tiny-esrgan:tiny-x4.pth): downloaded" in cold.stdout
        assert "upscaler Double (testorg/tiny-esrgan:tiny-x2.safetensors): downloaded" in (
            cold.stdout
        )
        folder = share / "upscalers" / "testorg--tiny-esrgan"
        for name in ("tiny-x4.pth", "tiny-x2.safetensors"):
            on_hub = hub_root / "testorg/tiny-esrgan" / name
            assert (folder / name).read_bytes() == on_hub.read_bytes()
            assert (folder / f".{name}.manifest.json").is_file()
        assert not list((tmp_path / "cache").rglob("tiny-x4.pth"))  # the local copy is gone

        hub.reset_log()
        warm = run_command("pull_model", env=env)
        assert warm.returncode == 0, warm.stderr
        assert "upscaler tiny-x4 (testorg/tiny-esrgan:tiny-x4.pth): on the share already" in (
            warm.stdout
        )
        assert not [path for path in hub.file_gets() if "esrgan" in path]

        # A file whose manifest is missing (a pull cut short) is fetched again.
        (folder / ".tiny-x4.pth.manifest.json").unlink()
        again = run_command("pull_model", env=env)
        assert "upscaler tiny-x4 (testorg/tiny-esrgan:tiny-x4.pth): downloaded" in again.stdout
        assert "upscaler Double (testorg/tiny-esrgan:tiny-x2.safetensors): on the share" in (
            again.stdout
        )


def test_a_request_finds_an_upscaler_by_name_in_any_case_once_its_file_is_on_the_share(
    hub_root, share, tmp_path
):
    place_on_hub(hub_root)
    with LocalHub(hub_root) as hub:
        offered = OfferedUpscalers(
            parse_upscalers(ENTRIES), model_dir=share, cache_dir=tmp_path / "cache",
            endpoint=hub.url,
        )  # fmt: skip
        assert offered.find("lanczos") is LANCZOS and offered.find("Nearest") is NEAREST
        with pytest.raises(UpscalerNotPulled, match="'Double' is not on the share yet"):
            offered.find("double")
        with pytest.raises(FieldError) as unknown:
            offered.find("4x-UltraSharp", field_name="hr_upscaler")
        assert unknown.value.field == "hr_upscaler"
        assert "'4x-UltraSharp' is not offered; offered: Lanczos, Nearest, tiny-x4, Double" in (
            unknown.value.rule
        )
        assert [e.name for e in offered.pull()] == ["tiny-x4", "Double"]
        assert offered.pull() == []  # a warm pull fetches nothing
        double = offered.find("DOUBLE")
        assert (double.name, double.scale) == ("Double", 2)
        assert offered.find("tiny-x4").scale == 4


def test_the_filter_names_listed_without_torch_are_the_filters_names():
    from imagegen.model.upscalers.offered import FILTER_NAMES
    from imagegen.model.upscalers.upscaler import LANCZOS, NEAREST

    assert (LANCZOS.name, NEAREST.name) == FILTER_NAMES
