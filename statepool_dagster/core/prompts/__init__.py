"""The curator prompt: its inference-side inputs, rendered as inference does."""
