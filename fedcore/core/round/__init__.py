"""The round driver: the simulation, its phases, its state, checkpoints and probes."""
