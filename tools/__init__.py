"""Scripts that remake what the repository ships or check it, run from its root as modules
(``python -m tools.import_graph``)."""
