"""Pure tensor functions that a client and a server component, or the driver, share (so
that neither component package imports the other)."""
