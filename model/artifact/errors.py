"""The error every refusal of a model directory raises."""

from __future__ import annotations


class ArtifactError(ValueError):
    """A model directory that is missing, corrupted, incomplete or incompatible with this code."""
