"""fedcore: federated learning under non-IID data, one reproducible pipeline."""

__version__ = "0.1.0"
