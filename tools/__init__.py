"""Manual harnesses (``python -m tools.<name>``), ``make dev``'s ``dg dev`` wrapper
(``tools.dg_dev``) and the docs site's MkDocs hooks."""
