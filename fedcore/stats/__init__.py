"""Statistics over seeds: intervals, paired tests and their power, families decided at their
looks, claims judged, comparison tables, estimates across settings and training state."""
