"""The component model: the base every component kind subclasses (``base.Component``), the
registries and the hyper-parameter base (``registry``), what a component requires of the rest
of the config (``requirements``), loading a component by entry point or import path
(``loading``), one registry entry's spec validated (``spec``) and the seeds derived from the
experiment's (``seeding``). Beside the schema (``fedcore.core.config``), which it reads and
which imports none of it.
"""
