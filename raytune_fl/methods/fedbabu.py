"""FedBABU (Oh, Kim & Yun, ICLR 2022): federated training of the body only, the head fine-tuned at evaluation.

The paper's Algorithm 1 (and the official code, github.com/jhoon-oh/FedBABU), as the code runs it:
- the head (`model.classifier`) keeps its random initialisation through the whole federated training: it is
  left out of every client's local optimiser (no step, momentum or weight decay touches it: the paper's head
  learning rate 0) and out of aggregation (the server copies the global head through unchanged), `freeze`'s
  parts (impl/freeze.py's `FreezeClassifier` and `fedavg_keep_classifier`);
- each sampled client trains the body from the global weights for the run's local epochs (SGD), and the server
  averages the bodies weighted by the clients' sample counts (FedAvg);
- evaluation (personalisation): each client fine-tunes the whole model, head and body, on its own training
  samples for `finetune_epochs` epochs (the paper's tau_f; 5, the official `--ft_ep`) at the run's learning rate,
  plain cross-entropy, and that model is scored on the client's held-out samples, then dropped
  (`Method.finetune`; the engine's evaluation runs it).

Deviations, labelled:
- deviation: the fine-tuning optimiser is the engine's (the run's learning rate, its momentum and weight decay), not
  the official script's own settings.
- deviation: BatchNorm entries in the body (simple_cnn's) are averaged with the body, as FedAvg does.

No setting is FedAvg (the head never moves): `as_fedavg` is None. Without the fine-tuning it is `freeze`.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Finetune, Method, MethodContext, MethodSpec, Param, Stateless, hyperparameters
from raytune_fl.methods.registry import register

FINETUNE_EPOCHS = Param(
    int,
    5,
    "epochs each client fine-tunes the whole model on its own samples before scoring",
    name="finetune_epochs",
    ge=1,
)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.impl.freeze import FreezeClassifier, fedavg_keep_classifier

    return Method(
        SPEC.name,
        (),
        Stateless(fedavg_keep_classifier),
        hooks=(FreezeClassifier(),),
        finetune=Finetune(epochs=FINETUNE_EPOCHS.of(params)),
    )


SPEC = register(
    MethodSpec(
        "fedbabu",
        hyperparameters(FINETUNE_EPOCHS),
        build,
        summary="head fixed at its random initialisation, body FedAvg; each client fine-tunes the whole model to be "
        "scored",
        as_fedavg=None,  # the head never moves, so no setting reproduces FedAvg
        personalises=True,
    )
)
