"""User-level differential privacy of a run: central DP-FedAvg on the server, the accounting of
the client-side ``clip_noise`` stage (local DP), and the accountant (Google's dp-accounting,
imported when a private run starts) (docs/methods/dp_fedavg.md, docs/how-to/privacy.md)."""
