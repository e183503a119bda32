"""From a config to checked components: the axes, their validation, plugins and the
composition root (``assembly``) that builds a run's objects."""
