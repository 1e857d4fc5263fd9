"""Reading /metrics as Prometheus would: the client library's own parser, never a regular
expression of ours, so that a test passes only on text a real scraper reads.

    before = scrape(get("/metrics"))
    ...
    assert value(scrape(...), "autograd_lab_runs_total", lane="upload", outcome="done") == \
        value(before, ...) + 1
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["scrape", "value"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(text: str) -> Samples:
    """Every sample of the exposition, by (sample name, its labels sorted)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 for one not there yet (a labelled counter appears at its first
    increment)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
