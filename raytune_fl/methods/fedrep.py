"""FedRep (Collins, Hassani, Mokhtari & Shakkottai, ICML 2021): a shared representation (body), a local head.

The paper's Algorithm 1 (and the official code, `Update.py`), as the code runs it, per round and sampled client:
- the server sends the body; the client puts it under its own head (impl/personal.py's `LocalHead`: per-client
  state; none yet in its first round: the global head);
- head phase: `head_epochs` epochs (the paper's tau_h; 10, the official `local_ep - local_rep_ep` = 11 - 1) of
  SGD on the head alone, the body frozen;
- body phase: the run's local epochs (the paper's single representation epoch, at `local_epochs: 1`) of SGD on
  the body alone, the head frozen (fixed at what the head phase reached);
- the client sends the body back and keeps its head; the server averages the bodies weighted by the clients'
  sample counts (FedAvg);
- each client is evaluated with the global body and its own head (`personalise`, the `personal_*` metrics).

Deviations, labelled:
- deviation: the server averages every entry, the head too (as FedPer's here: raytune_fl.methods.personal), so
  that the global model has a head to be scored with; a client trains from that mean head only in its first
  round. In the paper every head starts from the common random initialisation; here a client first sampled in a
  later round starts from the mean of the heads trained so far.
- deviation: in the head phase the body's BatchNorm is in eval mode (uses, does not update, its running
  statistics), as FedPAC's classifier phase, so that the frozen body stays exactly as received; the official
  code's CNNs have no BatchNorm, so there it makes no difference.
- deviation: `head_lr` set explicitly is a constant rate (FedPAC's `classifier_lr` too): the run's learning-rate
  schedule applies to the body phase and, at the default (None: the run's rate, as the official code's one
  optimiser over both parts), to the head phase.
- not reproduced: the official code's last round, in which clients train only their heads, for every local epoch.

`head_epochs: 0` is one phase training head and body together: FedPer's round (and from a fresh state, FedAvg's:
`as_fedavg`).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Phase, hyperparameters
from raytune_fl.methods.registry import register

HEAD_EPOCHS = Param(
    int, 10, "epochs of the head phase, body frozen, before the body's (0: one phase, FedPer)", name="head_epochs", ge=0
)
HEAD_LR = Param(float, None, "learning rate of the head phase (null: the run's client rate)", name="head_lr", gt=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.personal import personal_head_method

    epochs = HEAD_EPOCHS.of(params)
    phases: tuple[Phase, ...] = (Phase(),)  # head_epochs 0: head and body together, FedPer's round
    if epochs > 0:
        phases = (Phase("classifier", epochs, HEAD_LR.of(params), terms=False, body_eval=True), Phase("body"))
    # per_sample: as the spec declares it, whatever head_epochs (a spec's declaration holds for all its settings)
    return personal_head_method(SPEC.name, phases, per_sample=False)


SPEC = register(
    MethodSpec(
        "fedrep",
        hyperparameters(HEAD_EPOCHS, HEAD_LR),
        build,
        summary="each client's head trained first (body frozen), then the shared body (head frozen); body FedAvg",
        derived={HEAD_LR.name: "the run's client learning rate (optimizer.lr, its schedule applied)"},
        as_fedavg={HEAD_EPOCHS.name: 0},
        per_sample="its head phase takes head_epochs more DP-SGD steps a round than the local privacy accountant "
        "counts (local_epochs); head_epochs: 0 is fedper, which runs",
        personalises=True,
    )
)
