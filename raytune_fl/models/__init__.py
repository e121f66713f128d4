"""Models by name. Every model's forward returns (logits, z): z is the representation the classifier reads.

Light to import: `MODELS` knows every name without torch; a model's module is imported when it is first built.
"""

from raytune_fl.models.registry import MODELS, build_model

__all__ = ["MODELS", "build_model"]
