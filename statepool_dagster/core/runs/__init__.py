"""Run folders: find, fingerprint and read their files, bad ones set aside."""
