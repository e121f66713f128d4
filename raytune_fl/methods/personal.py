"""The personal-head family (FedPer, FedRep): the head, `model.classifier`, stays on each client; the body is FedAvg.

What FedPer (fedper.py) and FedRep (fedrep.py) share is built here: the hook that keeps each client's head
(impl/personal.py's `LocalHead`: a returning client loads its own head at round start and stores it again at round
end), the model a client uses (`personalise`: the global body with its own head, which the `personal_*` metrics
score), and the server: plain FedAvg over every entry. The global model's head is thus the sample-weighted mean of
the participants' heads: it is used only to score the global model, and by a client in its first round (after
that a client always trains from its own head). FedBN keeps its BatchNorm entries by the same hook
(impl/fedbn.py's `LocalBatchNorm`).
"""

from __future__ import annotations

from raytune_fl.methods.base import Method, Phase, Stateless


def personal_head_method(name: str, phases: tuple[Phase, ...] = (Phase(),), per_sample: bool = True) -> Method:
    """A method of the family: each client's own head, FedAvg over every entry, the local round's `phases`.
    `per_sample`: False where the phases take DP-SGD steps the local privacy accountant does not count."""
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.personal import LocalHead, with_own_head

    hook = LocalHead(name, per_sample)
    return Method(name, (), Stateless(fedavg), hooks=(hook,), personalise=with_own_head, phases=phases)
