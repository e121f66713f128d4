"""MOON with FedDecorr's decorrelation term, as the FedDecorr paper runs it (feddecorr.py explains the
stacking: moon's hyperparameters and beta, form, eps; beta = 0 is MOON exactly)."""

from __future__ import annotations

from raytune_fl.methods import moon
from raytune_fl.methods.feddecorr import stacked
from raytune_fl.methods.registry import register

SPEC = register(stacked(moon.SPEC))
