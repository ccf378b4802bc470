"""Manual harnesses (``python -m tools.<name>``) and the docs site's MkDocs hooks."""
