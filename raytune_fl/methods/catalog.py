"""Every method's spec, by name: its hyperparameters (type, default, bounds, one-line meaning) and where its code is.

Torch-free on purpose: a search space's names, fixed values and ranges are checked against these specs before Ray
starts, and the driver that checks them never trains, so it never imports torch. Each spec's `Builder` names
the module with the method's code (`raytune_fl/methods/<name>.py`: its terms, hooks and `build`), imported
when the method is first built. The modules' docstrings explain the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytune_fl.aggregators.fedopt import BIAS_CORRECTIONS, WEIGHTINGS
from raytune_fl.aggregators.principal import FIDELITIES as PRINCIPAL_FIDELITIES
from raytune_fl.methods.base import Builder, Method, MethodContext, MethodSpec, Param
from raytune_fl.registry import Registry

METHODS: Registry[MethodSpec] = Registry("method")


def register(spec: MethodSpec) -> MethodSpec:
    """Register a method under its own name."""
    return METHODS.register(spec.name)(spec)


def build_method(name: str, params: Mapping[str, Any], context: MethodContext | int) -> Method:
    """Build a method from hyperparameters resolved by its spec (defaults filled, names, types and bounds checked).

    `context` may be just the number of classes where nothing else matters (tests, validation).
    """
    spec = METHODS.get(name)
    if isinstance(context, int):
        context = MethodContext(num_classes=context)
    return spec.build(spec.resolve(params), context)


def code(name: str, *args: Any, function: str = "build") -> Builder:
    """The builder in raytune_fl/methods/<name>.py."""
    return Builder(f"raytune_fl.methods.{name}", function, args)


PAPER_OR_OFFICIAL = ("paper", "official")  # `fidelity`: follow the paper or the official code where they differ
OFFICIAL_OR_PAPER = ("official", "paper")  # `form`: the official code's scale first (the default)

# ---- FedAvg and plain server-side variants ----------------------------------------------------------------------

register(MethodSpec("fedavg", {}, code("fedavg"), "cross-entropy only"))
register(
    MethodSpec(
        "fedavgm",
        {
            "server_momentum": Param(float, 0.9, "beta: the server velocity's decay (0: FedAvg)", ge=0, lt=1),
            "server_lr": Param(float, 1.0, "server step size on the velocity", gt=0),
        },
        code("fedavgm"),
        summary="server momentum on FedAvg's mean delta: v <- beta v + delta, w <- w + server_lr v",
        as_fedavg={"server_momentum": 0.0},
    )
)
register(
    MethodSpec(
        "fedbuff",
        {
            "buffer_size": Param(int, 3, "K: arrivals aggregated per server step", ge=1),
            "server_lr": Param(float, 1.0, "server step size on the buffer's weighted mean delta", gt=0),
            "staleness_exponent": Param(float, 0.5, "a: a delta tau versions stale is weighted (1 + tau)^-a", ge=0),
        },
        code("fedbuff"),
        summary="asynchronous: apply every K arrivals, w <- w + server_lr * mean_i (1 + tau_i)^-a delta_i",
        as_fedavg=None,  # unweighted mean of a buffer of stale updates: no setting is FedAvg's round
        sequential="asynchronous: clients are dispatched and aggregated one arrival at a time",
    )
)
register(
    MethodSpec(
        "fednova",
        {},
        code("fednova"),
        summary="deltas normalised by effective local steps (momentum-corrected), rescaled by their mean",
        as_fedavg=None,  # equals FedAvg only when every client takes the same number of steps (tested apart)
    )
)
register(
    MethodSpec(
        "qffl",
        {"q": Param(float, 1.0, "fairness exponent on the global-model loss F_k^q (0: FedAvg)", ge=0)},
        code("qffl"),
        summary="q-FedAvg: client deltas re-weighted by F_k^q (global-model loss), Lipschitz step L = 1/lr",
        as_fedavg={"q": 0.0},
    )
)
register(
    MethodSpec(
        "fedgh",
        {"fidelity": Param(str, "paper", "follow the paper or FedLD's code", choices=PAPER_OR_OFFICIAL)},
        code("fedgh"),
        summary="pairwise projection of conflicting client deltas, then the weighted mean",
        as_fedavg=None,
    )
)

# ---- FedAdagrad, FedAdam, FedYogi: an adaptive optimiser on the server ------------------------------------------

# FedAvg's limit: no momentum, tau far above |Delta|, server_lr = tau (server step 1), sample-weighted mean
FEDAVG_LIMIT = {"beta1": 0.0, "server_lr": 1e6, "tau": 1e6, "weighting": "samples"}


def _server_optimiser(server_lr: float, tau: float, beta1: float, beta2: bool, corrections: tuple[str, ...]) -> dict:
    params = {
        "server_lr": Param(float, server_lr, "eta: the server step size", gt=0),
        "beta1": Param(float, beta1, "decay of the first moment m (0: no server momentum)", ge=0, lt=1),
    }
    if beta2:
        params["beta2"] = Param(float, 0.99, "decay of the second moment v", ge=0, lt=1)
    params["tau"] = Param(float, tau, "adaptivity: added to sqrt(v) in the step's denominator", gt=0)
    params["weighting"] = Param(
        str, "uniform", "clients' deltas averaged unweighted (paper) or by sample count", choices=WEIGHTINGS
    )
    if len(corrections) > 1:
        params["bias_correction"] = Param(
            str, "none", "none (paper), keras (official runs), flower (Flower's FedAdam)", choices=corrections
        )
    return params


register(
    MethodSpec(
        "fedadagrad",
        _server_optimiser(0.1, 0.01, 0.0, beta2=False, corrections=BIAS_CORRECTIONS["adagrad"]),
        code("fedopt", "adagrad"),
        summary="Adagrad on the server: v <- v + Delta^2, w <- w + eta m / (sqrt(v) + tau)",
        as_fedavg=dict(FEDAVG_LIMIT),
    )
)
register(
    MethodSpec(
        "fedadam",
        _server_optimiser(0.01, 0.001, 0.9, beta2=True, corrections=BIAS_CORRECTIONS["adam"]),
        code("fedopt", "adam"),
        summary="Adam on the server: v <- b2 v + (1 - b2) Delta^2, w <- w + eta m / (sqrt(v) + tau)",
        as_fedavg=dict(FEDAVG_LIMIT),
    )
)
register(
    MethodSpec(
        "fedyogi",
        _server_optimiser(0.01, 0.001, 0.9, beta2=True, corrections=BIAS_CORRECTIONS["yogi"]),
        code("fedopt", "yogi"),
        summary="Yogi on the server: v <- v - (1 - b2) Delta^2 sign(v - Delta^2), w <- w + eta m / (sqrt(v) + tau)",
        as_fedavg=dict(FEDAVG_LIMIT),
    )
)

# ---- local terms and client hooks -------------------------------------------------------------------------------

register(
    MethodSpec(
        "fedprox",
        {"mu": Param(float, 0.01, "weight of the proximal term (0: FedAvg)", ge=0)},
        code("fedprox"),
        "proximal term (mu/2)||w - w_t||^2",
        as_fedavg={"mu": 0.0},
    )
)
register(
    MethodSpec(
        "moon",
        {
            "mu": Param(float, 1.0, "weight of the model-contrastive term (0: FedAvg)", ge=0),
            "tau": Param(float, 0.5, "temperature of the contrastive softmax", gt=0),
        },
        code("moon"),
        summary="model-contrastive term: z near the global model's, away from the client's previous",
        as_fedavg={"mu": 0.0},
        sequential="each step also runs the global and the client's previous model (whole modules)",
    )
)
register(
    MethodSpec(
        "scaffold",
        {},
        code("scaffold"),
        summary="control variates c, c_i correct each local gradient by c - c_i (option II)",
        as_fedavg={},  # fresh state: c = c_i = 0, so no correction and FedAvg's aggregation
    )
)
register(
    MethodSpec(
        "fedbn",
        {},
        code("fedbn"),
        summary="BatchNorm weights and statistics stay per client; the rest is FedAvg",
        as_fedavg={},  # a client's first round trains from the global BN entries: exactly FedAvg
    )
)
register(
    MethodSpec(
        "freeze",
        {},
        code("freeze"),
        summary="random classifier, never trained nor aggregated (FedBABU-like)",
        as_fedavg=None,  # the classifier never moves, so no setting reproduces FedAvg
    )
)
register(
    MethodSpec(
        "feddyn",
        {
            "alpha": Param(float, 0.01, "weight of the local term, gradient alpha (w - w_t + lambda_k)", ge=0),
            "alpha_adaptive": Param(bool, False, "client k's alpha is alpha * mean_n / n_k (the official code's)"),
            "clip_grad_norm": Param(float, 0.0, "clip the gradients' 2-norm at this (0: off; official: 10)", ge=0),
            "avg_model": Param(bool, False, "also score the mean of every client's latest model (official 'avg')"),
            "server_correction": Param(
                bool, True, "add D/M to the mean delta (false: a test switch that leaves FedDyn's server step out)"
            ),
        },
        code("feddyn"),
        summary="local alpha (<w, lambda_k> + ||w - w_t||^2 / 2), lambda_k += Delta_k; server w + mean Delta + D/M",
        as_fedavg=None,  # D/M is an undamped extra step: no alpha gives FedAvg's round (limit tested by hand)
    )
)
register(
    MethodSpec(
        "fedalign",
        {
            "mu": Param(float, 0.45, "weight of the final block's Lipschitz alignment (official scale: mu * CE)", ge=0),
            "width": Param(float, 0.25, "channel fraction of the reduced final block", gt=0, le=1),
            "scale": Param(
                str,
                "official",
                "official: gradient scaled by CE / L_lip; none: mu * L_lip",
                choices=("official", "none"),
            ),
            "clip_grad_norm": Param(float, 0.0, "clip the gradients' 2-norm at this (0: off; official: 10)", ge=0),
        },
        code("fedalign"),
        summary="FedAvg + alignment of a width-reduced final block's Lipschitz estimate to the full block's",
        as_fedavg={"mu": 0.0},
        sequential="each step also runs a width-reduced copy of the final block",
    )
)
register(
    MethodSpec(
        "fedpac",
        {
            "lambda": Param(float, 1.0, "weight of the alignment of z to the global class centroids", ge=0),
            "form": Param(
                str, "official", "the code's mean over features or the paper's sum over them", choices=OFFICIAL_OR_PAPER
            ),
            "classifier_epochs": Param(int, 1, "epochs of the classifier phase before the body's (0: one phase)", ge=0),
            "classifier_lr": Param(float, 0.1, "learning rate of the classifier phase (official: 0.1)", gt=0),
            "mix": Param(bool, True, "each participant's classifier becomes the QP mix (false: the global mean)"),
        },
        code("fedpac"),
        summary="classifier phase, then body aligned to global class centroids; classifiers mixed by a QP",
        as_fedavg={"lambda": 0.0, "classifier_epochs": 0, "mix": False},
    )
)

# ---- the representation methods this platform ablates: FedUV, UniVarFL, FedLD -----------------------------------

register(
    MethodSpec(
        "feduv",
        {
            "mu": Param(float, 0.5, "weight of the RBF uniformity term", ge=0),
            "lambda": Param(float, None, "weight of the classifier std hinge (None: derived)", ge=0),
            "sigma": Param(float, "median", "RBF width ('median': the batch's median)", gt=0, special=("median",)),
            "fidelity": Param(str, "paper", "follow the paper or the official code", choices=PAPER_OR_OFFICIAL),
        },
        code("feduv"),
        summary="classifier std hinge + RBF uniformity",
        derived={"lambda": "D/4 (paper) or 2.5 (official)"},
        as_fedavg={"mu": 0.0, "lambda": 0.0},
    )
)
register(
    MethodSpec(
        "univarfl",
        {
            "mu": Param(float, 0.5, "weight of the hyperspherical energy term", ge=0),
            "lambda": Param(float, None, "weight of the classifier variance hinge (None: D/4)", ge=0),
            "eps": Param(float, 1e-2, "added to distances in the energy, against division by zero", gt=0),
            "include_diagonal": Param(bool, False, "count each point's self-distance in the energy"),
        },
        code("univarfl"),
        derived={"lambda": "D/4"},
        summary="classifier variance hinge + hyperspherical energy",
        as_fedavg={"mu": 0.0, "lambda": 0.0},
    )
)
register(
    MethodSpec(
        "fedld",
        {
            "lambda": Param(float, 0.03, "weight of the logit margin-control term", ge=0),
            "principal": Param(bool, True, "principal-gradient aggregation (false: FedAvg's mean)"),
            "fraction": Param(float, 0.8, "share of the gradient spectrum the principal directions keep", gt=0, le=1),
            "fidelity": Param(
                str, "paper", "follow the paper or the official code", choices=tuple(PRINCIPAL_FIDELITIES)
            ),
        },
        code("fedld"),
        summary="logit margin control + principal-gradient aggregation",
        as_fedavg={"lambda": 0.0, "principal": False},
    )
)

# ---- FedDecorr, alone and stacked on FedProx, FedAvgM and MOON as the paper runs it -----------------------------

DECORRELATION = {
    "beta": Param(float, 0.1, "weight of the decorrelation term on z", ge=0),
    "form": Param(str, "official", "official code's scale or the paper's normalisation", choices=OFFICIAL_OR_PAPER),
    "eps": Param(float, 1e-8, "added to each column's variance before the square root", gt=0),
}
register(
    MethodSpec(
        "feddecorr",
        DECORRELATION,
        code("feddecorr"),
        summary="FedAvg + decorrelation of the representation's columns",
        as_fedavg={"beta": 0.0},
    )
)


def stacked(base_name: str) -> MethodSpec:
    """`<base>_decorr`: the base method with the decorrelation term added to its own terms."""
    base = METHODS.get(base_name)
    name = f"{base_name}_decorr"
    clash = sorted(set(base.params) & set(DECORRELATION))
    if clash:
        raise ValueError(f"{name}: {base_name} already has hyperparameters named {', '.join(clash)}")
    return MethodSpec(
        name,
        {**base.params, **DECORRELATION},
        code("feddecorr", base_name, function="build_stacked"),
        summary=f"{base_name} + decorrelation of the representation's columns (FedDecorr stacked)",
        derived=base.derived,
        as_fedavg=None if base.as_fedavg is None else {**base.as_fedavg, "beta": 0.0},
        sequential=base.sequential,
    )


for _base in ("fedprox", "fedavgm", "moon"):
    register(stacked(_base))
