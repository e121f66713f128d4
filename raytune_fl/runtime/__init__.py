"""Where a command's work lives: the Ray cluster it starts or joins (cluster.py), the Tune results' storage
(storage.py) and the Optuna database (optuna_storage.py)."""
