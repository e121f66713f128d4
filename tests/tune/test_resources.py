"""What a trial reserves, and the fail-fast check before anything would pend forever."""

from __future__ import annotations

import pytest

from raytune_fl.config import ResourcesConfig
from raytune_fl.methods import METHODS
from raytune_fl.tune.resources import check_fits, trial_bundles


def test_a_driver_bundle_then_one_bundle_per_actor():
    bundles = trial_bundles(ResourcesConfig(actors=3, cpus_per_actor=0.5, gpus_per_actor=0.25, driver_cpus=1))
    quarter = {"CPU": 0.5, "GPU": 0.25}
    assert bundles == [{"CPU": 1, "GPU": 0.25}, quarter, quarter, quarter]  # the driver evaluates on a GPU share
    assert trial_bundles(ResourcesConfig(actors=2)) == [{"CPU": 0}, {"CPU": 1}, {"CPU": 1}]  # no GPU key on CPU
    assert trial_bundles(ResourcesConfig(actors=0, cpus_per_actor=2)) == [{"CPU": 2}]  # clients in the trial process


def test_a_trial_that_cannot_fit_fails_fast_with_the_fields_to_change():
    check_fits(ResourcesConfig(actors=2), {"CPU": 2.0})
    with pytest.raises(ValueError, match=r"needs 0.75 GPU .* the Ray cluster has 0; .*resources.gpus_per_actor"):
        check_fits(ResourcesConfig(actors=2, gpus_per_actor=0.25), {"CPU": 2.0})  # 2 actors + the driver's share
    with pytest.raises(ValueError, match=r"needs 4 CPU .* has 2; lower resources.actors"):
        check_fits(ResourcesConfig(actors=4), {"CPU": 2.0})


def test_derived_defaults_are_described_not_none():
    assert METHODS.get("feduv").describe({"mu": 0.1}) == {
        "mu": 0.1,
        "lambda": "D/4 (paper) or 2.5 (official)",
        "sigma": "median",
        "fidelity": "paper",
    }
    assert METHODS.get("univarfl").describe({"lambda": 1.0})["lambda"] == 1.0


def test_cuda_on_a_cluster_without_gpus_fails_fast_naming_the_field():
    check_fits(ResourcesConfig(actors=1, device="cuda", gpus_per_actor=0.5), {"CPU": 2.0, "GPU": 1.0})
    with pytest.raises(ValueError, match=r"base.resources.device: 'cuda' but the Ray cluster has 0 GPU"):
        check_fits(ResourcesConfig(actors=2, device="cuda", gpus_per_actor=0.5), {"CPU": 2.0})


def test_a_device_that_is_not_auto_cpu_or_cuda_is_refused_by_name():
    from raytune_fl.config import ConfigError, ExperimentConfig, SearchSpace, override

    space = SearchSpace.model_validate({"name": "x", "base": {}, "variants": {"a": {"method": "fedavg"}}})
    with pytest.raises(ConfigError, match=r"base.resources.device"):
        override(space, {"base.resources.device": "gpu"}, source="test")
    assert ExperimentConfig().resources.device == "auto"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the machines without CUDA")
def test_device_choice_without_cuda():
    from raytune_fl.devices import DeviceError, choose_device

    assert choose_device("auto", has_gpu=True) == "cpu"  # a declared GPU torch cannot use: CPU, not a crash
    assert choose_device("auto", has_gpu=False) == "cpu"
    assert choose_device("cpu", has_gpu=True) == "cpu"
    with pytest.raises(DeviceError, match=r"resources.device: 'cuda' but torch sees no CUDA device on node n1"):
        choose_device("cuda", has_gpu=True, where=" on node n1")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_device_choice_with_cuda():
    from raytune_fl.devices import choose_device

    assert choose_device("auto", has_gpu=True) == "cuda"
    assert choose_device("auto", has_gpu=False) == "cpu"  # an actor without a Ray GPU does not share one unreserved
    assert choose_device("cpu", has_gpu=True) == "cpu"
    assert choose_device("cuda", has_gpu=False) == "cpu"  # no GPU share (driver_gpus: 0): never an unreserved GPU


def test_a_trial_that_fits_the_totals_but_no_node_arrangement_fails_fast():
    from raytune_fl.tune.resources import check_nodes_fit

    quarters = ResourcesConfig(actors=4, cpus_per_actor=1, gpus_per_actor=0.25, driver_gpus=0)  # evaluates on CPU
    # the only GPU node has 2 CPUs: 2 of the 4 GPU actors fit there, none on the CPU-only node
    with pytest.raises(ValueError, match=r"fit the cluster's totals but not its nodes .* at most 2 actors fit"):
        check_nodes_fit(quarters, [{"CPU": 2.0, "GPU": 1.0}, {"CPU": 2.0}])
    check_nodes_fit(quarters, [{"CPU": 2.0}, {"CPU": 4.0, "GPU": 1.0}])  # the GPU node takes all four
    # bundles of one trial may spread over nodes: 2 + 2 actors, the driver's CPU beside either pair
    halves = ResourcesConfig(actors=4, cpus_per_actor=1, gpus_per_actor=0.5, driver_cpus=1, driver_gpus=0)
    check_nodes_fit(halves, [{"CPU": 3.0, "GPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}])
    with pytest.raises(ValueError, match=r"at most 3 actors fit beside the driver"):
        check_nodes_fit(halves, [{"CPU": 2.0, "GPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}])
    check_nodes_fit(ResourcesConfig(actors=0, cpus_per_actor=2), [{"CPU": 2.0}])  # in-process trials
    # the driver's GPU share counts: 4 actors + the driver at 0.2 each on one GPU; at 0.25 each they need a second
    check_nodes_fit(ResourcesConfig(actors=4, gpus_per_actor=0.2), [{"CPU": 4.0, "GPU": 1.0}])
    with pytest.raises(ValueError, match=r"at most 3 actors fit beside the driver"):
        check_nodes_fit(ResourcesConfig(actors=4, gpus_per_actor=0.25), [{"CPU": 4.0, "GPU": 1.0}, {"CPU": 4.0}])
