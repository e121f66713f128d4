"""The benchmark workload's fixed partition (docs/explanation/workload.md#partition): the client sizes of its
Dirichlet(0.1) split of mnist5k."""

from __future__ import annotations

WORKLOAD_SIZES = [262, 356, 1094, 72, 427, 261, 851, 70, 536, 71]  # the workload's Dirichlet(0.1) clients
