"""bench/compile_bench.py: its arguments and the harness's header on a dry run. Its smoke run
is not run here: inductor compiling even the tests' tiny UNet takes about two minutes on the
development VM (128 s cold, 8 s with a warm cache), far past a few seconds."""

import json
from pathlib import Path

import pytest

from bench.compile_bench import DEFAULT_PARTS, PARTS, main, parse_args
from tests.bench.harness import check_run


def test_a_dry_run_prints_the_header_and_the_plan_and_measures_nothing(tmp_path: Path, capsys):
    out = tmp_path / "compile.json"
    assert main(["--dry-run", "--parts", "sd15-unet-512,taesdxl-512", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "compile")
    assert document["config"]["parts"] == ["sd15-unet-512", "taesdxl-512"]
    assert document["results"] == []


def test_the_default_parts_are_the_full_size_ones_cheapest_first_and_smoke_is_the_tiny_unet():
    assert DEFAULT_PARTS[0] == "sd15-unet-512" and "tiny-unet-64" not in DEFAULT_PARTS
    assert {PARTS[name].side for name in DEFAULT_PARTS} == {512, 1024}
    smoke = parse_args(["--smoke"])
    assert (smoke.parts, smoke.threads, smoke.reuse) == (["tiny-unet-64"], 1, True)


def test_an_unknown_part_is_refused_naming_the_option(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--parts", "sd15-unet-512,sd3-unet"])
    assert "--parts: unknown sd3-unet" in capsys.readouterr().err


def test_help_names_every_part(capsys):
    with pytest.raises(SystemExit) as raised:
        parse_args(["--help"])
    assert raised.value.code == 0
    unwrapped = "".join(capsys.readouterr().out.split())  # argparse wraps at hyphens too
    assert all(name in unwrapped for name in PARTS)


def test_the_second_process_variants_can_be_chosen_and_an_unknown_one_is_refused(capsys):
    assert parse_args([]).reuse_variants == ["warm-local", "copied", "artefacts"]
    assert parse_args(["--reuse-variants", "copied"]).reuse_variants == ["copied"]
    with pytest.raises(SystemExit):
        parse_args(["--reuse-variants", "copied,shared"])
    assert "--reuse-variants: unknown shared" in capsys.readouterr().err
