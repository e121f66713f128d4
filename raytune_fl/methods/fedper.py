"""FedPer (Arivazhagan, Aggarwal, Singh & Choudhary, 2019, arXiv:1912.00818): base layers federated, personalisation
layers kept on each client.

The paper's algorithm (its Algorithm 1, client and server parts), as the code runs it:
- the model is split into base layers, shared, and personalisation layers, each client's own. Here the
  personalisation layers are the head, `model.classifier` (the paper's experiments keep the last one or two
  fully connected layers; every registered model's head is one linear layer);
- the server sends the base layers; a client puts them under its own personalisation layers and trains the whole
  model (both parts, one phase, the run's epochs, learning rate and optimiser) on its own data by SGD; it sends the
  base layers back and keeps its personalisation layers (impl/personal.py's `LocalHead`: per-client state);
- the server averages the base layers, weighted by the clients' sample counts (FedAvg);
- each client is evaluated with the global base layers and its own personalisation layers (`personalise`, the
  `personal_*` metrics; a client never sampled has none and is scored with the global head).

Deviations, labelled:
- deviation: the server averages every entry, the head too (as FedBN's server does with BatchNorm), so that the
  global model has a head to be scored with. A client trains from that mean head only in its first round: after
  that always from its own. In the paper every client's personalisation layers start from the common random
  initialisation; here a client first sampled in a later round starts from the mean of the heads trained so far.
- deviation: BatchNorm entries in the body (simple_cnn's) are averaged with the body, as FedAvg does.

One round from a fresh state is FedAvg's exactly (`as_fedavg = {}`): every client starts from the global head.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.personal import personal_head_method

    return personal_head_method(SPEC.name)


SPEC = register(
    MethodSpec(
        "fedper",
        {},
        build,
        summary="the head (classifier) stays on each client; the body is FedAvg",
        as_fedavg={},  # a client's first round trains from the global head: exactly FedAvg
        personalises=True,
    )
)
