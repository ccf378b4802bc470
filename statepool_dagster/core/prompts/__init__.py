"""core/prompts."""
