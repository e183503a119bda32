"""The files a user writes, read and checked before anything runs: sweeps, studies, claims,
protocols, comparison families and seed plans, report rows, a run's regime, the methods' papers."""
