"""The charm's steps: each one decides, through the adapters, what one
handler does, and returns what it did (steps/outcome.py) for the handler to
apply. The per-hook context (steps/context.py) is their only input."""
