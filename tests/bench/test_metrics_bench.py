"""bench/metrics_bench.py measures what docs/metrics.md says, briefly: jobs with and without a
scraper in one run, both figures and their ratio printed, and the scraper really scraping."""

import re

from bench import metrics_bench


def test_the_bench_prints_both_step_times_and_their_ratio(capsys):
    quick = ["--pairs", "1", "--steps", "20", "--interval", "0.05", "--no-json"]
    assert metrics_bench.main(quick) == 0
    out = capsys.readouterr().out
    scrapes = int(re.search(r"; (\d+) scrapes", out).group(1))
    assert scrapes >= 1
    none = float(re.search(r"step, no scrape: +median ([\d.]+) ms", out).group(1))
    scraped = float(re.search(r"step, scrape every 0.05 s: median ([\d.]+) ms", out).group(1))
    ratio = float(re.search(r"ratio \(scraped / none\): +([\d.]+)", out).group(1))
    assert none > 0 and scraped > 0 and abs(ratio - scraped / none) < 0.01
    assert float(re.search(r"one scrape at the client: +median ([\d.]+) ms", out).group(1)) > 0
