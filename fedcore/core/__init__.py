"""The core: the round driver, its components, data, models and metrics. It imports
none of MLflow, Prefect, Optuna or Dask (docs/explanation/architecture.md)."""
