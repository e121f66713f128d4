"""Plugins (raytune_fl/plugins.py): named in the YAML or by --plugin, imported before the space is checked, refused
with the field named when they cannot be used; what the Ray job's runtime_env ships; entry points of installed
packages. That the workers of a real cluster import them: tests/system/test_examples.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import yaml

import raytune_fl.plugins as plugins
from raytune_fl.config import ConfigError, load_space, parse_space
from raytune_fl.models import MODELS
from raytune_fl.plugins import PluginError, code_to_ship, import_plugin, load_installed, runtime_env, setup_worker
from raytune_fl.tracking.records import trial_params
from tests.support import REPO, tiny_space
from tests.support.plugin_sources import momentum_plugin

MODEL_PLUGIN = """
    from torch import nn
    from raytune_fl import register_model

    class Net(nn.Module):
        def __init__(self, in_channels, num_classes, image_size):
            super().__init__()
            self.body = nn.Flatten()
            self.classifier = nn.Linear(in_channels * image_size[0] * image_size[1], num_classes)

        def forward(self, x):
            z = self.body(x)
            return self.classifier(z), z

    register_model({name!r}, lambda in_channels, num_classes, image_size: Net(in_channels, num_classes, image_size))
"""


def write(folder, module: str, code: str) -> None:
    (folder / f"{module}.py").write_text(textwrap.dedent(code))


def space_with(plugins_listed, **base) -> dict:
    data = tiny_space("plugged", **base)
    data["plugins"] = plugins_listed
    return data


def test_a_plugin_named_in_the_yaml_is_imported_before_its_names_are_checked(plugin_dir):
    write(plugin_dir, "plug_model", MODEL_PLUGIN.format(name="plug_net"))
    assert "plug_net" not in MODELS
    space = parse_space(space_with(["plug_model"], model="plug_net"))
    assert space.plugins == ["plug_model"] and space.base.model == "plug_net"
    assert MODELS.user_names() == ["plug_net"]
    # the name is logged like a built-in one
    from raytune_fl.config import TrialSpec

    assert trial_params(TrialSpec.resolve(space.base, "fedavg", {}))["model"] == "plug_net"


def test_without_the_plugin_the_name_is_unknown(plugin_dir):
    with pytest.raises(ConfigError) as error:
        parse_space(space_with([], model="plug_net"))
    assert "base.model: unknown model 'plug_net'" in str(error.value)


def test_a_plugin_beside_the_space_file_needs_no_pythonpath(plugin_dir, tmp_path):
    elsewhere = tmp_path / "study"
    elsewhere.mkdir()
    write(elsewhere, "plug_beside", MODEL_PLUGIN.format(name="plug_beside_net"))
    (elsewhere / "space.yaml").write_text(yaml.safe_dump(space_with(["plug_beside"], model="plug_beside_net")))
    assert load_space(elsewhere / "space.yaml").base.model == "plug_beside_net"
    assert sys.path[-1] == str(elsewhere)  # searched last: it never shadows an installed module


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (None, "plugins: no module named 'plug_missing' (it must be importable"),
        ("import plug_not_installed_dependency\n", "ModuleNotFoundError: No module named 'plug_not_installed_dep"),
        ("raise RuntimeError('no GPU driver')\n", "importing 'plug_missing' failed: RuntimeError: no GPU driver"),
        (
            "from raytune_fl import register_model\nregister_model('simple_cnn', lambda in_channels, num_classes, "
            "image_size: None)\n",
            "model 'simple_cnn' is built in; register yours under another name",
        ),
        (
            "from raytune_fl import register_model\nregister_model('plug_x', lambda channels, classes: None)\n",
            "factory(in_channels, num_classes, image_size)",
        ),
    ],
    ids=["missing", "its-dependency-missing", "raises", "clash", "factory-signature"],
)
def test_a_plugin_that_cannot_be_used_is_refused_naming_the_field(plugin_dir, code, expected):
    if code is not None:
        write(plugin_dir, "plug_missing", code)
    with pytest.raises(ConfigError) as error:
        parse_space(space_with(["plug_missing"]))
    message = str(error.value)
    assert message.startswith("plugins: ") and expected in message.splitlines()[0], message  # the field first
    if code is not None and "raise" in code:
        assert "plug_missing.py:1" in message  # where in the plugin it failed


def test_plugins_must_be_a_list_of_module_names(plugin_dir):
    with pytest.raises(ConfigError, match=r"plugins: a list of module names"):
        parse_space(space_with("plug_model"))
    with pytest.raises(ConfigError, match=r"plugins: '\.\./x' is not a module name"):
        parse_space(space_with(["../x"]))


def test_the_plugin_option_adds_to_the_files_plugins(plugin_dir, tmp_path):
    write(plugin_dir, "plug_cli", MODEL_PLUGIN.format(name="plug_cli_net"))
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space_with([], model="plug_cli_net")))
    assert load_space(path, plugins=["plug_cli"]).plugins == ["plug_cli"]


def test_a_bad_plugin_on_the_command_line_exits_2_before_ray(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(tiny_space("cli")))
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tune.py"), "--space", str(path), "--plugin", "plug_nowhere"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "plugins: no module named 'plug_nowhere'" in run.stderr
    assert "Ray" not in run.stdout and not (tmp_path / "mlflow.db").exists()  # nothing started or written


@pytest.mark.parametrize(
    ("code", "where"),
    [
        ("import os\n\nHOME = os.environ['PLUG_NOT_SET_ANYWHERE']\n", "(plug_where.py:3)"),  # raised in <frozen os>
        ("import json\n\nCONFIG = json.loads('{not json')\n", "(plug_where.py:3)"),  # raised in json's decoder
        ("X = 1\ndef broken(:\n    pass\n", "(plug_where.py:2)"),  # no frame of the plugin's: the error's own line
    ],
    ids=["environ", "stdlib", "syntax"],
)
def test_an_import_error_points_at_the_plugins_own_line(plugin_dir, code, where):
    write(plugin_dir, "plug_where", code)
    with pytest.raises(ConfigError) as error:
        parse_space(space_with(["plug_where"]))
    first = str(error.value).splitlines()[0]
    assert first.startswith("plugins: importing 'plug_where' failed: ") and first.endswith(where), first
    assert "frozen" not in first and "os.py" not in first and "decoder.py" not in first


# ---- a plugin method tried before Ray starts (raytune_fl/testing/method_check.py) ---------------------------------

METHOD_BUILD_RAISES = """
    from raytune_fl import MethodSpec, register_method


    def build(params, context):
        raise RuntimeError("needs a projection head")


    register_method(MethodSpec("plug_boom", {}, build))
"""


def method_space(module: str, method: str) -> dict:
    data = space_with([module])
    data["variants"] = {"fedavg": {"method": "fedavg"}, "mine": {"method": method}}
    return data


def refused_by_tune(tmp_path, capsys, data: dict) -> list[str]:
    """tune.py's main on `data`: exit 2 with no traceback, no Ray started and nothing written; stderr's lines."""
    import ray

    from raytune_fl.cli import main

    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    ray_was_up = ray.is_initialized()  # True only where another test module started the session's cluster
    code = main(
        ["--space", str(path), "--storage", str(tmp_path / "ray"), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    )
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err and ray.is_initialized() is ray_was_up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plugins", "space.yaml"]  # no store, no --storage
    return err.splitlines()


def test_a_plugin_method_whose_build_raises_exits_2_naming_the_variant_and_the_line(plugin_dir, tmp_path, capsys):
    write(plugin_dir, "plug_boom_mod", METHOD_BUILD_RAISES)
    lines = refused_by_tune(tmp_path, capsys, method_space("plug_boom_mod", "plug_boom"))
    assert lines == [
        "error: variants.mine.method: method 'plug_boom': build() raised RuntimeError: needs a projection head "
        "(plug_boom_mod.py:6)"
    ]


def test_a_plugin_method_that_loses_its_state_on_a_resume_is_refused_before_ray(plugin_dir, tmp_path, capsys):
    write(plugin_dir, "plug_mom_mod", momentum_plugin("plug_mom", keeps_state=False))
    lines = refused_by_tune(tmp_path, capsys, method_space("plug_mom_mod", "plug_mom"))
    assert lines[0] == (
        "error: variants.mine.method: method 'plug_mom' (plug_mom_mod.py:16): its state does not survive a resume "
        "from a checkpoint"
    )
    said = "\n".join(lines)
    assert "Momentum.velocity changed by aggregation and not restored by load_state_dict()" in said
    assert "return it from the aggregator's state_dict() and set it in load_state_dict()" in said


def test_the_same_method_with_its_state_in_state_dict_passes_the_check(plugin_dir):
    from raytune_fl.testing.method_check import check_plugin_methods

    write(plugin_dir, "plug_mom_kept", momentum_plugin("plug_mom", keeps_state=True))
    space = parse_space(method_space("plug_mom_kept", "plug_mom"))
    check_plugin_methods(space, list(space.variants))  # no ConfigError: built and run two tiny rounds


def test_import_plugin_refuses_what_is_not_a_module_name():
    for bad in ("", "a b", "x/y", "1abc", 3):
        with pytest.raises(PluginError, match="not a module name"):
            import_plugin(bad)


# ---- what the Ray job's runtime_env ships -------------------------------------------------------------------


def test_no_plugin_no_runtime_env():
    assert runtime_env([]) is None  # workers start as Ray prestarts them


def test_a_plugin_not_installed_is_shipped_an_installed_one_is_not(plugin_dir):
    write(plugin_dir, "plug_file", "X = 1\n")
    package = plugin_dir / "plug_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "ext.py").write_text("Y = 2\n")
    import_plugin("plug_file"), import_plugin("plug_pkg.sub.ext")
    env = runtime_env(["plug_file", "plug_pkg.sub.ext", "numpy", "json", "raytune_fl.methods.fedavg"])
    # the single file, and the top-level package's folder (the import is plug_pkg.sub.ext); not numpy
    # (site-packages), json (the standard library) or this package
    assert env["py_modules"] == [str(plugin_dir / "plug_file.py"), str(package)]
    assert env["env_vars"] == {plugins.ENV_VAR: "plug_file,plug_pkg.sub.ext,numpy,json,raytune_fl.methods.fedavg"}
    assert env["worker_process_setup_hook"] == "raytune_fl.plugins.setup_worker"
    assert code_to_ship(["numpy"]) == []


def test_the_worker_hook_imports_the_listed_plugins(plugin_dir, monkeypatch):
    write(plugin_dir, "plug_hooked", MODEL_PLUGIN.format(name="plug_hooked_net"))
    monkeypatch.setenv(plugins.ENV_VAR, "plug_hooked")
    setup_worker()
    assert "plug_hooked_net" in MODELS.user_names()


# ---- entry points of installed packages ---------------------------------------------------------------------


def _install(site, package: str, value: str) -> None:
    """A distribution as pip leaves it: its .dist-info (METADATA, entry_points.txt) on a sys.path folder."""
    info = site / f"{package}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[raytune_fl.plugins]\next = {value}\n")


def test_an_installed_entry_point_registers_when_a_name_is_first_missed(plugin_dir):
    write(plugin_dir, "plug_installed", MODEL_PLUGIN.format(name="plug_installed_net"))
    _install(plugin_dir, "plug-dist", "plug_installed")
    plugins._installed = None  # this process has not looked for entry points yet
    assert "plug_installed_net" in MODELS  # a miss: the entry points are imported, then it is found
    assert load_installed() == ["plug_installed"]
    assert runtime_env([])["env_vars"] == {plugins.ENV_VAR: ""}  # workers import the installed ones too
    assert "py_modules" not in runtime_env([]) or runtime_env([])["py_modules"] == []


def test_a_broken_entry_point_names_its_package(plugin_dir):
    write(plugin_dir, "plug_broken", "raise ImportError('needs CUDA 13')\n")
    _install(plugin_dir, "plug-broken-dist", "plug_broken")
    plugins._installed = None
    with pytest.raises(ConfigError) as error:
        parse_space(tiny_space("x"))
    assert "plugins: entry point 'ext' (plug_broken) of installed package 'plug-broken-dist'" in str(error.value)
    assert "ImportError: needs CUDA 13" in str(error.value)


def test_importing_raytune_fl_loads_no_plugin_machinery():
    modules = ("raytune_fl.plugins", "raytune_fl.register")
    code = f"import sys, raytune_fl; print([m for m in {modules!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[]"
