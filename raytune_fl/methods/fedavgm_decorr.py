"""FedAvgM with FedDecorr's decorrelation term, as the FedDecorr paper runs it (feddecorr.py explains the
stacking: fedavgm's hyperparameters and beta, form, eps; beta = 0 is FedAvgM exactly)."""

from __future__ import annotations

from raytune_fl.methods import fedavgm
from raytune_fl.methods.feddecorr import stacked
from raytune_fl.methods.registry import register

SPEC = register(stacked(fedavgm.SPEC))
