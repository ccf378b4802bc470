"""The Dagster face, one folder per domain: runs, sessions, feedback, exports; what they share.

Dagster's ``load_from_defs_folder`` (``definitions.py``) loads every module under this
folder: its assets, checks, jobs and sensors, or what its ``@definitions`` function returns.
"""
