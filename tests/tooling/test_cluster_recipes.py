"""Issue 50: the cluster recipes (examples/kuberay/rayjob.yaml, examples/slurm/study.sbatch, the commands of
docs/how-to/jobs.md) checked against the code they drive, without a cluster: every `raytune-fl` command line parses
with that command's own argparse parser, every search-space file named exists in the repository, every `ray` and
`mlflow server` option exists in their command lines, the RayJob has the fields KubeRay requires and an entrypoint
that is one command (KubeRay 1.0-1.2 and 1.3+ submit the same job), every `mlflow server` admits the host its
clients use, the outputs go to the shared storage, and every environment variable set is one this package, MLflow
or Ray reads. Each check is also
run on a broken copy, which it must refuse. (A job really submitted: tests/system/test_ray_job.py.)"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import re
import shlex
import sys
import sysconfig
from collections.abc import Iterator
from functools import cache
from importlib.util import find_spec
from pathlib import Path

import pytest
import yaml

from raytune_fl.cli.console import COMMANDS
from raytune_fl.config import ConfigError, load_space, load_yaml, override
from tests.support import REPO

MANIFEST = REPO / "examples" / "kuberay" / "rayjob.yaml"
SBATCH = REPO / "examples" / "slurm" / "study.sbatch"
JOBS_PAGE = REPO / "docs" / "how-to" / "jobs.md"
SERVER_PAGES = [REPO / "docs" / "how-to" / page for page in ("cluster.md", "storage.md")]  # start `mlflow server`

OPERATORS = {"&&", "||", ";", "|", "&"}
SHELL_PUNCTUATION = "();<>|&"  # a word made only of these is an operator or a redirection
REQUOTED = '"\\$'  # subprocess.list2cmdline (ray job submit) and the head's shell would rewrite these
PROGRAMS = ("raytune-fl", "ray", "mlflow")
# options whose value is a file or folder a command writes: on a cluster, on storage every node shares
OUTPUTS = ("--storage", "--out", "--optuna-storage", "--backend-store-uri", "--artifacts-destination")

# KubeRay's RayJob spec (ray.io/v1, RayJobSpec's JSON fields): a misspelt field is silently dropped by the API
# server's pruning, so it is refused here
RAYJOB_SPEC_FIELDS = {
    "activeDeadlineSeconds", "backoffLimit", "rayClusterSpec", "submitterPodTemplate", "metadata", "clusterSelector",
    "submitterConfig", "managedBy", "deletionStrategy", "entrypoint", "runtimeEnvYAML", "jobId", "submissionMode",
    "entrypointResources", "entrypointNumCpus", "entrypointNumGpus", "ttlSecondsAfterFinished",
    "shutdownAfterJobFinishes", "suspend", "schedule",
}  # fmt: skip
WORKER_GROUP_REQUIRED = ("groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template")

# environment variable -> the files that read it (package, path in it): each is checked to name it, so an entry
# cannot claim a reader that does not exist
READERS: dict[str, list[tuple[str, str]]] = {
    "MLFLOW_TRACKING_URI": [("raytune_fl", "cli/common.py"), ("mlflow", "environment_variables.py")],
    "RAY_ADDRESS": [("raytune_fl", "runtime/cluster.py"), ("ray", "_private/ray_constants.py")],
    "RAY_AUTH_MODE": [("ray", "_private/authentication/authentication_token_setup.py")],
    "RAY_AUTH_TOKEN": [("ray", "_raylet.so")],  # read by Ray's core (C++), where every process authenticates
    "PYTHONUNBUFFERED": [("python", "")],  # read by the interpreter itself (its C start-up)
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": [("ray", "_private/ray_constants.py")],  # where a Ray has the drain
}


# ------------------------------------------------------------------------------------------------ the parsing


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell text, as argv lists: continuation lines joined, comments dropped, split at
    the operators (&&, ||, ;, |, &); the part of `$(...)` inside the substitution, redirections left out."""
    commands: list[list[str]] = []
    for line in text.replace("\\\n", " ").splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # not shell (a heredoc's text, a YAML line): nothing to run
            continue
        current: list[str] = []
        for token in tokens:
            token = token.rsplit("$(", 1)[-1]
            if token in OPERATORS:
                commands.append(current)
                current = []
            elif not re.fullmatch(r"\d*>.*|\)|.*\)", token):
                current.append(token)
        commands.append(current)
    return [command for command in commands if command]


def programs(commands: list[list[str]]) -> Iterator[list[str]]:
    """Each run of `raytune-fl`, `ray` or `mlflow` in `commands` (after `srun ...`, and the command after `ray job
    submit ... --`), from the program's name on."""
    for command in commands:
        at = next((i for i, token in enumerate(command) if token in PROGRAMS), None)
        if at is None:
            continue
        argv = command[at:]
        if argv[:3] == ["ray", "job", "submit"] and "--" in argv:
            split = argv.index("--")
            yield argv[:split]
            yield from programs([argv[split + 1 :]])
        else:
            yield argv


def bash_blocks(markdown: str) -> str:
    """The ```bash code blocks of a Markdown page, one text."""
    return "\n".join(re.findall(r"```bash\n(.*?)```", markdown, flags=re.S))


def shell_tokens(text: str) -> list[str]:
    """A shell line's words and operators (&&, ;, >, 2>&1's >&), quotes removed, as a POSIX shell splits them."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def submitted(entrypoint: str, kuberay: str) -> list[str]:
    """The words KubeRay's submitter passes to `ray job submit --`. Before 1.3 it splits the entrypoint as a shell
    would (Go's shlex) into the pod's argv; from 1.3 it pastes it raw into one `bash -c` line of its own, so the
    job's command ends at the first operator (ray-project/kuberay#3802, common/job.go's GetK8sJobCommand)."""
    if kuberay == "1.0-1.2":
        return shlex.split(entrypoint)
    line = (
        "if ray job status --address http://head:8265 id >/dev/null 2>&1 ; then ray job logs --address "
        f"http://head:8265 --follow id ; else ray job submit --address http://head:8265 --submission-id id -- "
        f"{entrypoint} ; fi"
    )
    words = shell_tokens(line)
    job = words[words.index("--") + 1 :]
    return job[: next(i for i, word in enumerate(job) if set(word) <= set(SHELL_PUNCTUATION))]


def entrypoint_problems(entrypoint: str) -> list[str]:
    """An entrypoint is one command: no bare shell operator or redirection (KubeRay 1.3+ would run what follows in
    the submitter pod), and a `bash -c` script free of what Ray's job command line quotes again."""
    bare = [word for word in shell_tokens(entrypoint) if set(word) <= set(SHELL_PUNCTUATION)]
    if bare:
        return [
            f"spec.entrypoint: bare shell operator {' '.join(dict.fromkeys(bare))} outside quotes: KubeRay 1.3+ "
            "ends the job's command there and runs the rest in its submitter pod; wrap the commands in bash -c '...'"
        ]
    argv = shlex.split(entrypoint)
    if argv[:2] == ["bash", "-c"] and set(argv[2]) & set(REQUOTED):
        return [f"spec.entrypoint: the bash -c script holds one of {REQUOTED} (Ray's job command line quotes it)"]
    return []


def entrypoint_commands(entrypoint: str) -> list[list[str]]:
    """The commands an entrypoint runs: a `bash -c` script's, else its own."""
    argv = shlex.split(entrypoint)
    return shell_commands(argv[2] if argv[:2] == ["bash", "-c"] and len(argv) == 3 else entrypoint)


def with_defaults(text: str) -> str:
    """A script as it runs with no setting given: `${NAME:-default}` as its default, `${NAME:+word}` as nothing
    (nested ones too), so the commands are checked with the values a user gets."""
    while True:
        changed = re.sub(r"\$\{\w+:\+[^{}]*\}", "", re.sub(r"\$\{\w+:-([^{}]*)\}", r"\1", text))
        if changed == text:
            return text
        text = changed


# ------------------------------------------------------------------------------------------------ the checks


def raytune_fl_problems(argv: list[str]) -> list[str]:
    """`raytune-fl COMMAND ...` parsed by that command's parser (values and types too), its --space a file here."""
    name = argv[1] if len(argv) > 1 else ""
    if name not in COMMANDS:
        return [f"{shlex.join(argv)}: no command {name!r} (known: {', '.join(COMMANDS)})"]
    parser = importlib.import_module(COMMANDS[name][0]).build_parser()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = parser.parse_args(argv[2:])
    except SystemExit:
        return [f"{shlex.join(argv)}: {said.getvalue().strip().splitlines()[-1]}"]
    space = getattr(args, "space", None)
    if not space or "$" in space:
        return []
    if not (REPO / space).is_file():
        return [f"{shlex.join(argv)}: --space {space} is no file of the repository"]
    try:  # the --set overrides name fields of that file, with values they allow
        changes = {key: load_yaml(value) for key, _, value in (item.partition("=") for item in args.set)}
        override(load_space(REPO / space), changes)
    except ConfigError as error:
        return [f"{shlex.join(argv)}: {str(error).splitlines()[0]}"]
    return []


@cache
def _click_command(program: str, words: tuple[str, ...]):
    """The click command of `ray ...` or `mlflow ...` named by `words` (subcommands), and how many words it took."""
    if program == "ray":
        from ray.scripts.scripts import cli
    else:
        from mlflow.cli import cli
    command, used = cli, 0
    while used < len(words) and hasattr(command, "commands") and words[used] in command.commands:
        command, used = command.commands[words[used]], used + 1
    return command, used


def click_problems(argv: list[str]) -> list[str]:
    """Every option of a `ray` or `mlflow` command line exists in its click command (the values are the shell's)."""
    command, used = _click_command(argv[0], tuple(t for t in argv[1:3] if not t.startswith("-")))
    if used == 0 or hasattr(command, "commands"):
        return [f"{shlex.join(argv)}: no such {argv[0]} command"]
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    options = [token.split("=", 1)[0] for token in argv[1 + used :] if token.startswith("-")]
    return [
        f"{shlex.join(argv)}: {argv[0]} {' '.join(argv[1 : 1 + used])} has no option {o}"
        for o in options
        if o not in known
    ]


def command_problems(commands: list[list[str]]) -> list[str]:
    problems = []
    for argv in programs(commands):
        problems += raytune_fl_problems(argv) if argv[0] == "raytune-fl" else click_problems(argv)
    return problems


def output_problems(commands: list[list[str]], shared: tuple[str, ...]) -> list[str]:
    """Each output option's path starts with one of `shared` (a folder every node mounts) or is a server's URL."""
    problems = []
    for argv in programs(commands):
        for option, value in zip(argv, argv[1:]):
            if option not in OUTPUTS:
                continue
            path = value.split(":///", 1)[1] if value.startswith("sqlite:///") else value
            if "://" not in path and not path.startswith(shared):
                problems.append(
                    f"{shlex.join(argv)}: {option} {value} is not on the shared storage ({', '.join(shared)})"
                )
    return problems


def allowed_hosts_problems(commands: list[list[str]]) -> list[str]:
    """Each `mlflow server` admits, in --allowed-hosts, the host:port it listens on: the address its clients use
    (MLflow 3.5+ answers 403 to a Host header it does not list; its default lists only localhost and private IPs)."""
    problems = []
    for argv in programs(commands):
        if argv[:2] != ["mlflow", "server"]:
            continue
        options = dict(zip(argv, argv[1:]))
        address = f"{options.get('--host', '127.0.0.1')}:{options.get('--port', '5000')}"
        if address not in options.get("--allowed-hosts", "").split(","):
            problems.append(f"{shlex.join(argv)}: --allowed-hosts does not list {address}, the address clients use")
    return problems


def rayjob_problems(manifest: dict) -> list[str]:
    """The fields KubeRay's RayJob (ray.io/v1) needs to create the cluster and submit the job."""
    problems = []
    if manifest.get("apiVersion") != "ray.io/v1" or manifest.get("kind") != "RayJob":
        problems.append(f"apiVersion/kind: {manifest.get('apiVersion')}/{manifest.get('kind')}, not ray.io/v1 RayJob")
    spec = manifest.get("spec") or {}
    problems += [f"spec.{key}: not a RayJob field" for key in sorted(set(spec) - RAYJOB_SPEC_FIELDS)]
    if not isinstance(spec.get("entrypoint"), str) or not spec.get("entrypoint"):
        problems.append("spec.entrypoint: missing")
    if not isinstance(spec.get("shutdownAfterJobFinishes"), bool):
        problems.append("spec.shutdownAfterJobFinishes: not a boolean")
    if "runtimeEnvYAML" in spec and not isinstance(yaml.safe_load(spec["runtimeEnvYAML"]), dict):
        problems.append("spec.runtimeEnvYAML: not a YAML mapping")
    cluster = spec.get("rayClusterSpec") or {}
    head = cluster.get("headGroupSpec") or {}
    if not isinstance(head.get("rayStartParams"), dict):
        problems.append("spec.rayClusterSpec.headGroupSpec.rayStartParams: missing")
    problems += pod_problems("spec.rayClusterSpec.headGroupSpec.template", head.get("template"))
    groups = cluster.get("workerGroupSpecs")
    if not isinstance(groups, list) or not groups:
        problems.append("spec.rayClusterSpec.workerGroupSpecs: missing")
    for i, group in enumerate(groups or []):
        where = f"spec.rayClusterSpec.workerGroupSpecs[{i}]"
        problems += [f"{where}.{key}: missing" for key in WORKER_GROUP_REQUIRED if key not in group]
        counts = [group.get(key) for key in ("minReplicas", "replicas", "maxReplicas")]
        if all(isinstance(n, int) for n in counts) and not counts[0] <= counts[1] <= counts[2]:
            problems.append(f"{where}: not minReplicas <= replicas <= maxReplicas ({counts})")
        problems += pod_problems(f"{where}.template", group.get("template"))
    return problems


def pod_problems(where: str, template: dict | None) -> list[str]:
    """A pod template: containers with a name and an image; every volume mount names one of the pod's volumes."""
    pod = (template or {}).get("spec") or {}
    containers = pod.get("containers") or []
    if not containers:
        return [f"{where}.spec.containers: missing"]
    volumes = {volume.get("name") for volume in pod.get("volumes") or []}
    problems = [
        f"{where}: a container without name or image" for c in containers if not (c.get("name") and c.get("image"))
    ]
    for container in containers:
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                problems.append(f"{where}: volumeMount {mount.get('name')!r} names no volume of the pod")
    return problems


def mount_paths(manifest: dict) -> tuple[str, ...]:
    """The paths mounted on the head and on every worker group: where shared outputs can go."""
    cluster = manifest["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    mounted = [
        {m["mountPath"] for c in t["spec"]["containers"] for m in c.get("volumeMounts") or []} for t in templates
    ]
    return tuple(sorted(set.intersection(*mounted)))


def manifest_env(manifest: dict) -> list[str]:
    """The environment variables the manifest sets: containers' `env` and the job's runtime_env `env_vars`."""
    cluster = manifest["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    names = [e["name"] for t in templates for c in t["spec"]["containers"] for e in c.get("env") or []]
    runtime_env = yaml.safe_load(manifest["spec"].get("runtimeEnvYAML") or "{}") or {}
    return names + list(runtime_env.get("env_vars") or {})


def exported(text: str) -> list[str]:
    """The variables a shell script exports (`export A=1 B`)."""
    return [t.split("=", 1)[0] for argv in shell_commands(text) if argv[0] == "export" for t in argv[1:]]


def env_problems(names: list[str]) -> list[str]:
    problems = []
    for name in names:
        readers = READERS.get(name)
        if readers is None:
            problems.append(f"{name}: set, but nothing here is known to read it (add its reader to READERS)")
        elif not any(_names(package, path, name) for package, path in readers):
            problems.append(f"{name}: none of {readers} reads it")
    return problems


def _names(package: str, path: str, name: str) -> bool:
    if package == "python":  # the interpreter: its executable, or the libpython it links
        binaries = [Path(sys.executable).resolve()]
        binaries += [Path(sysconfig.get_config_var("LIBDIR") or "/") / (sysconfig.get_config_var("LDLIBRARY") or "-")]
        return any(file.is_file() and name.encode() in file.read_bytes() for file in binaries)
    spec = find_spec(package)
    if spec is None or spec.origin is None:
        return False
    file = Path(spec.origin).parent / path
    return file.is_file() and re.search(rb"\b" + name.encode() + rb"\b", file.read_bytes()) is not None


# ------------------------------------------------------------------------------------------------ the recipes


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def test_the_rayjob_has_what_kuberay_requires(manifest):
    assert rayjob_problems(manifest) == []
    assert mount_paths(manifest) == ("/shared",)  # the storage every pod mounts
    assert yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])["working_dir"].endswith(".zip")


def test_the_rayjobs_entrypoint_runs_a_search_then_an_ablation_that_parse(manifest):
    entrypoint = manifest["spec"]["entrypoint"]
    commands = list(programs(entrypoint_commands(entrypoint)))
    assert [argv[:2] for argv in commands] == [["raytune-fl", "tune"], ["raytune-fl", "ablate"]]
    assert command_problems(entrypoint_commands(entrypoint)) == []
    shared = tuple(f"{path}/" for path in mount_paths(manifest))
    assert output_problems(entrypoint_commands(entrypoint), shared) == []


def test_the_rayjobs_entrypoint_is_one_command_every_kuberay_submits_whole(manifest):
    entrypoint = manifest["spec"]["entrypoint"]
    assert entrypoint_problems(entrypoint) == []
    job = submitted(entrypoint, "1.3+")
    assert job == submitted(entrypoint, "1.0-1.2") and job[:2] == ["bash", "-c"] and len(job) == 3
    assert "&& raytune-fl ablate" in job[2]  # the ablation runs in the job, on the cluster


@pytest.mark.parametrize(
    ("entrypoint", "bare"),
    [
        ("raytune-fl tune --space s.yaml && raytune-fl ablate --space s.yaml", "&&"),  # the manifest's old form
        ("raytune-fl tune --space s.yaml || true", "||"),
        ("raytune-fl tune --space s.yaml; raytune-fl ablate --space s.yaml", ";"),
        ("raytune-fl tune --space s.yaml | tee log", "|"),
        ("raytune-fl tune --space s.yaml > log 2>&1", "> >&"),
    ],
)
def test_an_entrypoint_with_a_bare_shell_operator_is_refused(entrypoint, bare):
    assert entrypoint_problems(entrypoint) == [
        f"spec.entrypoint: bare shell operator {bare} outside quotes: KubeRay 1.3+ ends the job's command there and "
        "runs the rest in its submitter pod; wrap the commands in bash -c '...'"
    ]
    assert submitted(entrypoint, "1.3+") == ["raytune-fl", "tune", "--space", "s.yaml"]  # what reaches the cluster
    quoted = f"bash -c {shlex.quote(entrypoint)}"
    assert entrypoint_problems(quoted) == [] and submitted(quoted, "1.3+") == submitted(quoted, "1.0-1.2")
    assert entrypoint_problems("bash -c 'raytune-fl tune --storage $HOME/r'") == [
        f"spec.entrypoint: the bash -c script holds one of {REQUOTED} (Ray's job command line quotes it)"
    ]


def test_the_slurm_script_starts_a_head_workers_and_a_server_then_runs_valid_commands():
    commands = shell_commands(with_defaults(SBATCH.read_text()))
    run = [argv[:3] for argv in programs(commands)]
    assert ["ray", "start", "--head"] in run and any(
        argv[:2] == ["ray", "start"] and argv[2].startswith("--address") for argv in run
    )
    assert ["ray", "status", "--address=$ip_head"] in run  # it waits for the workers
    assert ["mlflow", "server", "--host"] in run
    assert [argv[:2] for argv in run if argv[0] == "raytune-fl"] == [["raytune-fl", "tune"], ["raytune-fl", "ablate"]]
    assert all("--address" in argv for argv in programs(commands) if argv[0] == "raytune-fl")  # the head's
    assert command_problems(commands) == []
    assert output_problems(commands, ("$SHARED/",)) == []
    assert "trap cleanup EXIT" in SBATCH.read_text()


def test_every_mlflow_server_admits_the_address_its_clients_use():
    texts = [SBATCH.read_text(), *(bash_blocks(page.read_text()) for page in SERVER_PAGES)]
    servers = [argv for text in texts for argv in programs(shell_commands(text)) if argv[:2] == ["mlflow", "server"]]
    assert len(servers) == len(texts)  # one in each
    assert all(allowed_hosts_problems(shell_commands(text)) == [] for text in texts)
    assert MANIFEST.read_text().count("--allowed-hosts mlflow.mlflow.svc:5000") == 1  # the server it assumes
    broken = _broken(SBATCH.read_text(), '--allowed-hosts "$head_ip:$mlflow_port,$head_ip" ', "")
    assert allowed_hosts_problems(shell_commands(broken))[0].endswith(
        "--allowed-hosts does not list $head_ip:$mlflow_port, the address clients use"
    )


def test_with_defaults_reads_a_script_as_it_runs_unset():
    assert with_defaults('a ${A:-x} "${B:-${C:-y}}" ${D:+--resume} ${E:-}') == 'a x "y"  '
    assert with_defaults("${HOME} $X") == "${HOME} $X"  # no default: left as it is


SLURM_FIXES = {
    # the job's memory: --exclusive alone does not grant it where the cluster sets DefMemPerCPU
    "memory": "#SBATCH --mem=0\n",
    # the job log shows each line as it is printed
    "unbuffered": "export PYTHONUNBUFFERED=1\n",
    # the head's address: an IPv4 one, not loopback nor link-local (hostname --ip-address may give IPv6)
    "ipv4": "grep -E '^[0-9]+(\\.[0-9]+){3}$' | grep -vE '^(127|169\\.254)\\.'",
    # token authentication where the Ray installed has it (2.52 and later)
    "token": "[:2])) < (2, 52))'; then\n    export RAY_AUTH_MODE=token",
    # nodes that did not join: the job fails, naming them
    "missing nodes": "not joined: $(missing_nodes)",
    # MLflow 3.5+ answers 403 to a Host header it does not allow
    "allowed hosts": '--allowed-hosts "$head_ip:$mlflow_port,$head_ip"',
}


@pytest.mark.parametrize("fix", SLURM_FIXES)
def test_the_slurm_script_has_issue_59s_fixes(fix):
    text = SBATCH.read_text()
    assert SLURM_FIXES[fix] in text
    assert "ray symmetric-run" in text  # offered where the Ray version has it (a comment: one command per step)


def test_the_slurm_scripts_waits_are_bounded_and_fail_naming_what_is_missing():
    text = SBATCH.read_text()
    assert "sleep 10" not in text  # the head is waited for, not guessed
    waits = re.findall(r"for _ in \$\(seq (\d+)\)", text)
    assert waits and all(int(n) <= 150 for n in waits)  # every loop ends (5 minutes at most at 2 s)
    assert 'echo "error: the Ray head did not start on $head_node' in text
    assert text.count("exit 1") >= 3  # no IPv4 address, no head, a node missing


def test_the_jobs_page_commands_parse():
    commands = shell_commands(bash_blocks(JOBS_PAGE.read_text()))
    run = [argv[:3] for argv in programs(commands)]
    assert ["ray", "job", "submit"] in run and ["raytune-fl", "tune", "--space"] in run
    assert command_problems(commands) == []
    assert output_problems(commands, ("/shared/",)) == []  # absolute and shared, as a job needs


def test_the_recipes_set_only_variables_that_are_read(manifest):
    page = shell_commands(bash_blocks(JOBS_PAGE.read_text()))
    names = manifest_env(manifest) + exported(SBATCH.read_text())
    assert "MLFLOW_TRACKING_URI" in names and "RAY_AUTH_TOKEN" in names
    assert env_problems(names) == []
    # the env_vars of the page's --runtime-env-json
    jsons = [json.loads(argv[i + 1]) for argv in page for i, t in enumerate(argv) if t == "--runtime-env-json"]
    assert jsons and env_problems([name for j in jsons for name in j.get("env_vars", {})]) == []


# ------------------------------------------------------------------------------------------------ broken copies


def _broken(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old  # the mutation applies
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("--storage /shared", "--storge /shared", "unrecognized arguments: --storge"),
        ("--seeds 3", "--seeds three", "--seeds: a whole number of seeds or 'auto'"),
        ("search_spaces/univarfl.yaml", "search_spaces/univarfl2.yaml", "is no file of the repository"),
        ("raytune-fl ablate", "raytune-fl ablation", "no command 'ablation'"),
        ("resources.gpus_per_actor=0.2", "resources.gpu_per_actor=0.2", "base.resources.gpu_per_actor"),
    ],
)
def test_a_broken_entrypoint_is_refused(manifest, old, new, expected):
    problems = command_problems(entrypoint_commands(_broken(manifest["spec"]["entrypoint"], old, new)))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("--num-cpus=", "--num-cpu=", "ray start has no option --num-cpu"),
        ("--artifacts-destination", "--artifact-destination", "mlflow server has no option --artifact-destination"),
        ("ray status --address", "ray statuz --address", "no such ray command"),
        ('--out "$SHARED/reports"', "--out reports", "--out reports is not on the shared storage"),
        ("export RAY_AUTH_MODE=token", "export RAY_AUTH_MOD=token", "RAY_AUTH_MOD: set, but nothing"),
    ],
)
def test_a_broken_slurm_script_is_refused(old, new, expected):
    text = with_defaults(_broken(SBATCH.read_text(), old, new))
    commands = shell_commands(text)
    problems = command_problems(commands) + output_problems(commands, ("$SHARED/",)) + env_problems(exported(text))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("spec", "shutdownAfterJobFinish"), True, "spec.shutdownAfterJobFinish: not a RayJob field"),
        (("spec", "rayClusterSpec", "headGroupSpec", "rayStartParams"), None, "headGroupSpec.rayStartParams: missing"),
        (
            ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "groupName"),
            None,
            "workerGroupSpecs[0].groupName: missing",
        ),
        (
            ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "replicas"),
            9,
            "not minReplicas <= replicas <= maxReplicas",
        ),
        (("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "volumes"), None, "names no volume"),
        (("kind",), "RayCluster", "not ray.io/v1 RayJob"),
    ],
)
def test_a_broken_manifest_is_refused(path, value, expected):
    broken = yaml.safe_load(MANIFEST.read_text())
    *parents, leaf = path
    node = broken
    for key in parents:
        node = node[key]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    assert any(expected in problem for problem in rayjob_problems(broken)), rayjob_problems(broken)


def test_a_variable_no_reader_names_is_refused(monkeypatch):
    assert env_problems(["RAY_ADRESS"]) == [
        "RAY_ADRESS: set, but nothing here is known to read it (add its reader to READERS)"
    ]
    monkeypatch.setitem(READERS, "MLFLOW_TRACKING_URI", [("raytune_fl", "plugins.py"), ("mlflow", "version.py")])
    assert env_problems(["MLFLOW_TRACKING_URI"])[0].startswith("MLFLOW_TRACKING_URI: none of")
