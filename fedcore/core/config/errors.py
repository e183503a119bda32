"""The error of bad input (exit code 2), shared by the config, YAML and checkpoint readers."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration; the message is one line naming the key and the allowed values."""
