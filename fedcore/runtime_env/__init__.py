"""The process a command runs in: offline environment defaults, the optional extra, GPU slots for
parallel cells and how the process was started."""
