"""Models by name. Every model's forward returns (logits, z): z is the representation the classifier reads."""

from raytune_fl.models import resnet  # noqa: F401  (registration)
from raytune_fl.models.registry import MODELS, build_model
from raytune_fl.models.simple_cnn import SimpleCNN

__all__ = ["MODELS", "SimpleCNN", "build_model"]
