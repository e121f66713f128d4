"""FedPAC (Xu, Tong, Huang, ICLR 2023): feature alignment to global class centroids, and classifiers mixed by a QP.

A client's round (official `methods/fedpac.py` order):
1. round start: it loads its own classifier phi_i (none yet: the global one) over the global body, and on the
   received body (eval mode, no gradients, all its training samples) computes FedPAC's statistics of z:
   h_i (C x d), V_i and its class means (raytune_fl.aggregators.fedpac.client_statistics);
2. classifier phase: `classifier_epochs` epochs of cross-entropy at `classifier_lr`, body frozen and its BatchNorm
   in eval mode, so that the frozen body's running statistics stay (the official CNNs have no BatchNorm);
3. body phase: the run's epochs at the run's lr, classifier frozen, loss CE + lambda R, where R pulls each z to
   the global centroid c_y of its class (this client's own pre-training class mean where no participant held y
   last round; no term in round 1, before any centroid exists). form "official" (the default, lambda = 1 is
   calibrated to it): R = mean over batch and feature dims of (z - c_y)^2; "paper": the squared norm summed over
   features, mean over the batch (d times larger);
4. round end: class means and counts of z on the trained body go to the server with h_i and V_i.

The server (ServerAggregator below): the global weights are the sample-weighted mean of every entry (body and
classifier, BatchNorm statistics too), the global centroids the count-weighted class means, and each participant's
classifier becomes the QP mix sum_j a_ij phi_j of the participants' trained classifiers (mix_weights). That mix is
per-client state the server sets (`client_states`); clients that did not take part keep theirs. `personal_*`
metrics score each client's held-out samples with the global body and its own classifier, as FedPAC reports.

Limit: lambda = 0, classifier_epochs = 0 (the classifier trains with the body, in one phase) and mix = false is
FedAvg's round exactly. Options of the official code not reproduced: its fixed momentum 0.5 and weight decay 5e-4
(the run's optimiser settings apply to both phases), `agg_g = 0` (classifier never averaged).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import (
    OFFICIAL_OR_PAPER,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    Phase,
    active,
    hyperparameters,
)
from raytune_fl.methods.registry import register

LAMBDA = Param(float, 1.0, "weight of the alignment of z to the global class centroids", name="lambda", ge=0)
FORM = Param(
    str,
    "official",
    "the code's mean over features or the paper's sum over them",
    name="form",
    choices=OFFICIAL_OR_PAPER,
)
CLASSIFIER_EPOCHS = Param(
    int, 1, "epochs of the classifier phase before the body's (0: one phase)", name="classifier_epochs", ge=0
)
CLASSIFIER_LR = Param(float, 0.1, "learning rate of the classifier phase (official: 0.1)", name="classifier_lr", gt=0)
MIX = Param(bool, True, "each participant's classifier becomes the QP mix (false: the global mean)", name="mix")


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.impl.fedpac import (
        CentroidAlignment,
        ClassifierMixServer,
        PersonalClassifier,
        with_own_classifier,
    )

    hook = PersonalClassifier(context.num_classes)
    phases: tuple[Phase, ...] = (Phase(),)
    if CLASSIFIER_EPOCHS.of(params) > 0:
        classifier = Phase("classifier", CLASSIFIER_EPOCHS.of(params), CLASSIFIER_LR.of(params), False, True)
        phases = (classifier, Phase("body"))
    mix = MIX.of(params)
    return Method(
        SPEC.name,
        active([CentroidAlignment(LAMBDA.of(params), FORM.of(params), hook)]),
        ClassifierMixServer(mix),
        hooks=(hook,),
        personalise=with_own_classifier if mix else None,
        phases=phases,
    )


SPEC = register(
    MethodSpec(
        "fedpac",
        hyperparameters(LAMBDA, FORM, CLASSIFIER_EPOCHS, CLASSIFIER_LR, MIX),
        build,
        summary="classifier phase, then body aligned to global class centroids; classifiers mixed by a QP",
        as_fedavg={LAMBDA.name: 0.0, CLASSIFIER_EPOCHS.name: 0, MIX.name: False},
        central_privacy="its server reads each client's class statistics and mixes classifiers per client",
        per_sample="each client reports its class means and feature statistics, which no noise covers",
        personalises=MIX,  # its own mixed classifier; without the mix every client uses the global one
    )
)
