"""The edges of the pipeline that are neither tracking nor tuning: sweeps, claims,
comparisons over seeds, device slots for parallel cells, the optional extra, the
environment defaults and how the process was invoked. The core never imports them."""
