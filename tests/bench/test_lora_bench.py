"""bench/lora_bench.py, so it cannot rot: its run on the tests' tiny SDXL UNet with a tiny
UNet LoRA (64x64, one call a variant) prints the harness's header, the service's unfused path
beside fused and none with their on/off times, unfuse's distance from the model file, and
the summary; it measures nothing."""

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from bench.lora_bench import main
from tests.bench.harness import check_run
from tests.support.model_service import SD_REPO, SDXL_REPO
from tests.support.tiny_adapters import LORA_REPO, SDXL_FILE, build_tiny_loras


def test_a_run_puts_the_lora_on_both_ways_and_takes_it_off_exactly(
    tmp_path: Path, capsys, hub_root: Path
):
    loras = build_tiny_loras(hub_root, sd_repo=SD_REPO, sdxl_repo=SDXL_REPO)
    assert loras == hub_root / LORA_REPO
    unet_only = tmp_path / "unet_lora.safetensors"  # the bench loads the UNet alone
    state = load_file(loras / SDXL_FILE)
    save_file({k: v for k, v in state.items() if k.startswith("lora_unet_")}, unet_only)
    out = tmp_path / "lora.json"
    argv = ["--model", str(hub_root / SDXL_REPO), "--lora", str(unet_only), "--side", "64"]
    assert main([*argv, "--calls", "1", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    printed = capsys.readouterr().out
    check_run(document, printed, "lora")
    figures = document["figures"]
    for name in ("none", "unfused", "fused", "after_remove", "after_restore"):
        assert len(document["steps"][name]) == 1
        assert figures[f"{name}_step_s"] > 0
    assert document["config"]["lora_rank"] == 4 and figures["touched_layers"] > 0
    # The service's path leaves the UNet as it was; so does the pristine copy; unfuse does not.
    assert figures["after_remove_vs_none_max_abs"] == 0
    assert figures["after_restore_vs_none_max_abs"] == 0
    assert figures["unfused_weights_vs_file_max_abs"] > 0
    assert figures["fused_vs_unfused_max_abs"] < 1e-4
    assert document["ratios"]["unfused_over_none"] > 0
    assert "the service: applied()" in printed
