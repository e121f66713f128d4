"""FedAlign (Mendieta et al., CVPR 2022, "Local Learning Matters"): Lipschitz alignment of the final block.

Each local step runs the usual full-width forward (its cross-entropy is the only CE), keeping A, the input to
the model's final block, and B, its output (raytune_fl.models.final_block). The final block alone is then
run again at reduced width on the first k_in = round(width * C_in) channels of the detached A, every conv and
BatchNorm affine sliced to its first round(width * C) channels and BatchNorm on batch statistics, so the
model's running statistics never move; this gives B_s. Per sample the transmitting matrix G = X Y^T / HW (X the
block input pooled to the output's size, Y the output) has its largest singular value sigma estimated by 10 power
iterations (raytune_fl.methods.lipschitz), and

    L_lip = mean over the batch of (sigma(G_s) - sigma(G_full))^2,   G_full from the detached A and B: a target.

Gradients of L_lip reach only the sliced conv and BatchNorm-affine entries of the final block.

scale "official" (the default, mu = 0.45 is calibrated to it): the gradient is mu * (CE / L_lip) * grad L_lip,
CE and L_lip as values (the official code's two backward passes sum to this), so the regulariser weighs mu * CE
whatever the size of L_lip; an eps = 1e-8 guards L_lip = 0 (width 1.0). scale "none": mu * grad L_lip. Either
way `term_lipschitz` logs L_lip itself, and `loss` logs CE + mu * L_lip.

Channel counts are rounded plainly (at least 1), not with the official `make_divisible(., 8)`, which turns
width 0.25 of a 16-channel layer into 8 channels. Supported models: simple_cnn (final block = its last two
conv-BN-ReLU layers, 64 -> 64 channels) and the ResNets (layer4). clip_grad_norm: the official code clips at 10;
0 (the default, as every other method here) does not clip. mu = 0 is FedAvg exactly.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import (
    ClientHook,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    Stateless,
    active,
    hyperparameters,
)
from raytune_fl.methods.registry import register

MU = Param(float, 0.45, "weight of the final block's Lipschitz alignment (official scale: mu * CE)", name="mu", ge=0)
WIDTH = Param(float, 0.25, "channel fraction of the reduced final block", name="width", gt=0, le=1)
SCALE = Param(
    str,
    "official",
    "official: gradient scaled by CE / L_lip; none: mu * L_lip",
    name="scale",
    choices=("official", "none"),
)
CLIP_GRAD_NORM = Param(
    float, 0.0, "clip the gradients' 2-norm at this (0: off; official: 10)", name="clip_grad_norm", ge=0
)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.hooks import GradientClip
    from raytune_fl.methods.impl.fedalign import LipschitzAlignment

    hooks: tuple[ClientHook, ...] = ()
    if CLIP_GRAD_NORM.of(params) > 0:
        hooks = (GradientClip(CLIP_GRAD_NORM.of(params)),)
    terms = [LipschitzAlignment(MU.of(params), WIDTH.of(params), SCALE.of(params))]
    return Method(SPEC.name, active(terms), Stateless(fedavg), hooks=hooks)


SPEC = register(
    MethodSpec(
        "fedalign",
        hyperparameters(MU, WIDTH, SCALE, CLIP_GRAD_NORM),
        build,
        summary="FedAvg + alignment of a width-reduced final block's Lipschitz estimate to the full block's",
        as_fedavg={MU.name: 0.0},
        sequential="each step also runs a width-reduced copy of the final block",
        per_sample="its term re-runs the final block with BatchNorm on the batch's statistics, and its official "
        "scale is the batch's cross-entropy over the batch's Lipschitz gap",
        image_model="its term re-runs the final convolutional block (of simple_cnn or a ResNet) at reduced width",
    )
)
