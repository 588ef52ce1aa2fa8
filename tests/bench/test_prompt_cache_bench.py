"""bench/prompt_cache_bench.py's smoke run on the tests' tiny SD: the same prompt with the cache
off and on, in one process, the images compared."""

import json
from pathlib import Path

from bench.prompt_cache_bench import main
from tests.bench.harness import check_run


def test_the_smoke_run_times_a_prompt_sent_again_with_and_without_the_cache(tmp_path: Path, capsys):
    out = tmp_path / "prompt_cache.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    check_run(document, capsys.readouterr().out, "prompt_cache_tiny")
    assert document["images_equal"] is True
    assert [len(document["results"][side]) for side in ("off", "on")] == [2, 2]
    assert document["cache_hits"] == 2  # each "on" image; the "off" ones encoded
    assert document["ratios"]["cache_on_vs_off"] > 0
