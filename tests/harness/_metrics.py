"""Reading Prometheus text (engines' and the gateway's ``/metrics``) in tests."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def scrape(base_url: str, name: str, timeout: float = 15.0, **labels: str) -> float:
    """``metric_value`` of ``base_url + "/metrics"``, fetched now."""
    text = httpx.get(base_url + "/metrics", timeout=timeout).raise_for_status().text
    return metric_value(text, name, **labels)
