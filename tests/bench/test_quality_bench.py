"""bench/quality_bench.py's table, so its figures cannot rot: per quality the median of its
requests, its steps and its ratio to medium's. (Its smoke run, `--model tiny --size 64`,
starts an app under gunicorn and takes a minute on a busy machine: run by hand.)"""

import pytest

from bench.quality_bench import QUALITIES, parse_args, table


def sample(quality: str, seconds: float, steps: int) -> dict:
    return {"quality": quality, "seconds": seconds, "steps": steps, "preset": None,
            "denoise": seconds - 1, "decode": 0.5}  # fmt: skip


def test_the_table_takes_each_quality_s_median_and_its_ratio_to_medium():
    samples = [sample("low", s, 10) for s in (5.0, 9.0, 6.0)]
    samples += [sample("medium", s, 20) for s in (10.0, 12.0, 11.0)]
    samples += [sample("high", s, 30) for s in (16.5, 40.0, 15.0)]
    rows = table({"samples": samples})
    assert [row["quality"] for row in rows] == list(QUALITIES) == ["low", "medium", "high"]
    assert [(row["steps"], row["seconds"]) for row in rows] == [(10, 6.0), (20, 11.0), (30, 16.5)]
    assert [row["vs_medium"] for row in rows] == pytest.approx([6 / 11, 1.0, 1.5])


def test_the_defaults_are_sd15_at_512():
    args = parse_args([])
    assert (args.model, args.size, args.repeat, args.threads) == ("sd15", 512, 1, 2)
