"""Exports: ``training_dataset`` for the trainers, rebuilt by its automation sensor."""
