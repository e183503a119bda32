"""Figures drawn with matplotlib from plain data, without a store: a run's curves, a report's
comparison panels and forest plot, the across-settings profiles and rank diagram, accuracy
against epsilon and against simulated time."""
