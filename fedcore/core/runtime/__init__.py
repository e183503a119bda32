"""The process and the machine: stop signals, a full disk, the device a config names."""
