"""Trained models to MLflow: a trial's global model rebuilt from its Tune checkpoint (trial_model.py), logged by a
helper process while the study's trials train (model_helper.py)."""
