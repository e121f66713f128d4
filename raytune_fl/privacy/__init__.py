"""Differential privacy's maths: the accountant (accountant.py), client-level DP-FedAvg's clip, noise and
fixed-denominator mean (central.py), and local DP-SGD's sampling plan (local.py). Numpy and scipy; no torch."""
