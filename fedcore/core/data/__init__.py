"""Datasets, partitioners and per-client splits."""
