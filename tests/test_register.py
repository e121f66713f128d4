"""The public registration API (raytune_fl/register.py): names refused where they clash with a built-in, callables
whose signature the engine cannot call refused at registration, the model contract checked when a model is built,
and a registered method validated and searched like a built-in one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import raytune_fl
from raytune_fl import LocalTerm, Method, MethodSpec, Param, Stateless, fedavg, hyperparameters
from raytune_fl.cli.common import check_data
from raytune_fl.config import ConfigError, ExperimentConfig, parse_space
from raytune_fl.methods import METHODS, build_method
from raytune_fl.models import MODELS
from raytune_fl.models.registry import build_model, check_model
from tests.support import tiny_space


class Net(nn.Module):
    """A model that keeps the contract; the `broken` argument breaks one part of it."""

    def __init__(self, in_channels: int, num_classes: int, image_size, broken: str = "") -> None:
        super().__init__()
        width = 6
        self.body = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.Flatten())
        features = width * image_size[0] * image_size[1]
        self.broken = broken
        if broken != "no classifier":
            self.classifier = nn.Linear(features, num_classes + (broken == "classes"))

    def forward(self, x):
        z = self.body(x)
        if self.broken == "logits only":
            return self.classifier(z)
        if self.broken == "z not flat":
            return self.classifier(z), z.view(len(z), 6, -1)
        return self.classifier(z), z


def factory(in_channels, num_classes, image_size):
    return Net(in_channels, num_classes, image_size)


def test_the_public_api_is_importable_from_the_package():
    from raytune_fl import ArrayDataset, ClientUpdate, ServerAggregator, register_dataset, register_method  # noqa

    assert set(raytune_fl.__all__) == {"__version__", *raytune_fl._EXPORTS}
    assert {"register_model", "register_dataset", "register_method", "MethodSpec", "LocalTerm"} <= set(
        raytune_fl.__all__
    )
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        raytune_fl.nothing  # noqa: B018


def test_a_model_is_registered_once_per_definition(plugin_dir):
    raytune_fl.register_model("plug_reg_net", factory)
    raytune_fl.register_model("plug_reg_net", factory)  # the same plugin imported again (a notebook's reload)
    assert MODELS.get("plug_reg_net") is factory and "plug_reg_net" in MODELS.names()

    def another(in_channels, num_classes, image_size):
        return Net(in_channels, num_classes, image_size)

    with pytest.raises(ValueError, match=r"model 'plug_reg_net' is already registered by tests\.test_register"):
        raytune_fl.register_model("plug_reg_net", another)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: raytune_fl.register_model("resnet18", factory), "model 'resnet18' is built in"),
        (lambda: raytune_fl.register_model("my net", factory), "model name 'my net': use letters"),
        (lambda: raytune_fl.register_model("plug_a", lambda channels: None), "factory(in_channels, num_classes"),
        (lambda: raytune_fl.register_model("plug_b", "not callable"), "expected a callable"),
        (lambda: raytune_fl.register_dataset("digits", lambda root: None), "dataset 'digits' is built in"),
        (lambda: raytune_fl.register_dataset("plug_c", lambda: None), "loader(root)"),
        (lambda: raytune_fl.register_method({"name": "x"}), "takes a MethodSpec, not dict"),
        (
            lambda: raytune_fl.register_method(MethodSpec("fedavg", {}, lambda params, context: None)),
            "method 'fedavg' is built in",
        ),
        (
            lambda: raytune_fl.register_method(MethodSpec("plug_d", {}, lambda params: None)),
            "build(params, context)",
        ),
    ],
    ids=[
        "model-clash",
        "model-name",
        "model-signature",
        "model-not-callable",
        "dataset-clash",
        "dataset-signature",
        "method-not-spec",
        "method-clash",
        "method-build-signature",
    ],
)
def test_a_registration_the_engine_cannot_use_is_refused(plugin_dir, call, message):
    with pytest.raises((TypeError, ValueError)) as error:
        call()
    assert message in str(error.value)


# ---- the model contract ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ("no classifier", "needs `self.classifier`, the nn.Linear(D, num_classes)"),
        ("classes", "classifier has 4 outputs for 3 classes"),
        ("logits only", "forward must return (logits, z), two tensors; got Tensor"),
        ("z not flat", "z of shape (2, 6, 16), expected (batch, 96)"),
    ],
)
def test_a_model_that_breaks_the_contract_is_refused_naming_it(broken, message):
    with pytest.raises(ValueError) as error:
        check_model("plug_net", Net(1, 3, (4, 4), broken), 1, 3, (4, 4))
    assert str(error.value).startswith("model 'plug_net': ") and message in str(error.value)


def test_a_factory_that_returns_no_module_and_a_forward_that_fails_are_refused():
    with pytest.raises(ValueError, match="its factory returned a dict, not a torch.nn.Module"):
        check_model("plug_net", {}, 1, 3, (4, 4))
    with pytest.raises(ValueError, match=r"forward failed on a \(2, 3, 4, 4\) batch: RuntimeError"):
        check_model("plug_net", Net(1, 3, (4, 4)), 3, 3, (4, 4))  # 3 channels into a 1-channel convolution


def test_checking_a_model_changes_nothing_in_it_or_the_random_streams():
    torch.manual_seed(0)
    model = Net(1, 3, (4, 4)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.get_rng_state()
    check_model("plug_net", model, 1, 3, (4, 4))
    assert model.training and torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BatchNorm's statistics too


def test_a_registered_model_is_checked_when_built_and_before_ray(plugin_dir):
    raytune_fl.register_model("plug_bad", lambda in_channels, num_classes, image_size: Net(1, 10, (8, 8), "classes"))
    with pytest.raises(ValueError, match="model 'plug_bad': classifier has 11 outputs for 10 classes"):
        build_model("plug_bad", 1, 10, (8, 8))
    with pytest.raises(ConfigError, match="^base.model: model 'plug_bad': classifier has 11"):
        check_data(ExperimentConfig(dataset="digits", model="plug_bad"))
    raytune_fl.register_model("plug_good", factory)
    logits, z = build_model("plug_good", 1, 10, (8, 8))(torch.zeros(3, 1, 8, 8))
    assert logits.shape == (3, 10) and z.shape == (3, 6 * 64)


# ---- a registered method: validated, searched, built like a built-in one --------------------------------------

WEIGHT = Param(float, 0.1, "weight of the logit-norm term", name="weight", ge=0)


class LogitNorm(LocalTerm):
    name = "logit_norm"

    def loss(self, batch):
        return batch.logits.pow(2).mean()


def build(params, context):
    return Method("plug_logit", (LogitNorm(WEIGHT.of(params)),), Stateless(fedavg))


def test_a_registered_method_is_validated_and_built_like_a_built_in_one(plugin_dir):
    raytune_fl.register_method(MethodSpec("plug_logit", hyperparameters(WEIGHT), build, "logit norm"))
    data = tiny_space("plug")
    data["variants"] = {"mine": {"method": "plug_logit", "search": {"weight": {"loguniform": [0.01, 1.0]}}}}
    space = parse_space(data)
    assert space.variants["mine"].method == "plug_logit" and METHODS.user_names() == ["plug_logit"]
    method = build_method("plug_logit", {"weight": 0.5}, 10)
    assert [type(t).__name__ for t in method.terms] == ["LogitNorm"] and method.terms[0].weight == 0.5
    data["variants"]["mine"] = {"method": "plug_logit", "fixed": {"weight": -1.0}}
    with pytest.raises(ConfigError, match=r"variants\.mine\.fixed\.weight: must be a number >= 0"):
        parse_space(data)
    data["variants"]["mine"] = {"method": "plug_logit", "search": {"wieght": {"uniform": [0, 1]}}}
    with pytest.raises(ConfigError, match="has no hyperparameter wieght; its hyperparameters: weight"):
        parse_space(data)
