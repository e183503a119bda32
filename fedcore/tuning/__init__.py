"""Optuna studies over any config key (an edge: the core never imports this package).

``fedcore.specs.study`` reads and validates study YAMLs without importing Optuna;
``fedcore.tuning.study`` runs trials and ``fedcore.tuning.results`` reports them.
"""

from fedcore.specs.study import StudySpec, load_study

__all__ = ["StudySpec", "load_study"]
