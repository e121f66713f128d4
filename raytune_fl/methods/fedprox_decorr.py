"""FedProx with FedDecorr's decorrelation term, as the FedDecorr paper runs it (feddecorr.py explains the
stacking: fedprox's hyperparameters and beta, form, eps; beta = 0 is FedProx exactly)."""

from __future__ import annotations

from raytune_fl.methods import fedprox
from raytune_fl.methods.feddecorr import stacked
from raytune_fl.methods.registry import register

SPEC = register(stacked(fedprox.SPEC))
