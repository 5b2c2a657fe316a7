"""The one exception the LLM micro coder raises: a refusal with a one-line reason."""

from __future__ import annotations


class CoderError(Exception):
    """The model's answer (or the model itself) cannot give a step; the message says why in one line."""
