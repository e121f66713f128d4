"""raytune-fl: tune and ablate federated-learning methods on non-IID data with Ray Tune, Optuna and MLflow."""

__version__ = "0.1.0"
