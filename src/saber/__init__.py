"""SABER: SLA-aware admission control for self-hosted code models."""

__version__ = "0.1.0"
