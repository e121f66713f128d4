"""The methods' code: local terms, client hooks and server aggregators, imported by a method's `build` when it is
first built (raytune_fl.methods states the layout). `impl/<name>.py` belongs to `raytune_fl/methods/<name>.py`."""
