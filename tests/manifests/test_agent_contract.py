"""What the HyperPod elastic agent (`hyperpodrun`, the image's pinned hyperpod-elastic-agent)
needs at run time, read from its own source. It cannot be imported here (it pins
torch<2.12 and imports torch), so the sdist `make install` downloads is parsed with ast."""

from __future__ import annotations

import ast
import os
import re
import tarfile

import pytest

from infra import validation
from manifests import job as job_manifest
from tests.conftest import CONTEXT, ROOT

PIN = re.search(r"^hyperpod-elastic-agent==([0-9.]+)", (ROOT / "training" / "requirements.txt").read_text(), re.M).group(1)
SDIST = ROOT / ".venv" / "sdist" / f"hyperpod_elastic_agent-{PIN}.tar.gz"


@pytest.fixture(scope="module")
def agent_sources() -> dict[str, ast.Module]:
    assert SDIST.exists(), f"{SDIST} is missing: make install downloads it"
    with tarfile.open(SDIST) as tar:
        return {
            m.name.split("/src/", 1)[1]: ast.parse(tar.extractfile(m).read())
            for m in tar.getmembers()
            if "/src/hyperpod_elastic_agent/" in m.name and m.name.endswith(".py")
        }


@pytest.fixture(scope="module")
def pod():
    settings, _ = validation.load_settings(CONTEXT, "prod")
    return job_manifest.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"]["spec"]


def _is_environ(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", None) == "os"


def test_every_variable_the_agent_requires_is_set(agent_sources, pod):
    # os.environ["X"] raises KeyError when X is unset, unless the code first asks `"X" in os.environ`.
    required = set()
    for tree in agent_sources.values():
        guarded = {
            node.left.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and any(_is_environ(c) for c in node.comparators)
        }
        required |= {
            node.slice.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.slice, ast.Constant)
            and isinstance(node.ctx, ast.Load) and node.slice.value not in guarded
        }
    assert "NNODES" in required  # what FACTS found; the test would notice it going
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert required <= env, required - env


def _joined_paths(tree) -> set[str]:
    """Constant paths built with os.path.join(os.sep, "a", "b", ...)."""
    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
                and node.args and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "sep"
                and all(isinstance(a, ast.Constant) for a in node.args[1:])):
            found.add(os.path.join(os.sep, *(a.value for a in node.args[1:])))
    return found


def test_the_directory_the_agent_writes_first_is_a_writable_volume(agent_sources, pod):
    (rendezvous,) = [t for name, t in agent_sources.items() if name.endswith("hyperpod_rendezvous_backend.py")]
    written = _joined_paths(rendezvous)
    assert written, "the rendezvous backend no longer builds its config dir with os.path.join(os.sep, ...)"
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True  # so each must be a volume
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path in written:
        mounts = [m for m in container["volumeMounts"] if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
        assert mounts, f"{path} is on the read-only root filesystem"
        assert "emptyDir" in volumes[mounts[0]["name"]] and not mounts[0].get("readOnly")


def _agent_options(agent_sources) -> dict[str, dict]:
    """--option -> its add_argument keywords (constants only), from the agent's run.py."""
    options = {}
    for node in ast.walk(agent_sources["hyperpod_elastic_agent/run.py"]):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                options[first.value] = {k.arg: ast.literal_eval(k.value) for k in node.keywords
                                        if k.arg in ("choices", "default") and isinstance(k.value, (ast.Constant, ast.List))}
    return options


def test_every_hyperpodrun_option_we_pass_is_one_it_or_torchrun_defines(agent_sources, pod):
    from torch.distributed.run import get_args_parser

    known = set(_agent_options(agent_sources))
    for action in get_args_parser()._actions:
        known |= {o for o in action.option_strings if o.startswith("--")}
    command = pod["containers"][0]["command"]
    script = command.index("/workspace/train.py")
    ours = {a.split("=", 1)[0] for a in command[1:script]}
    assert ours <= known, ours - known


def test_workers_are_stopped_with_sigterm_which_the_agent_offers(agent_sources, pod):
    option = _agent_options(agent_sources)["--shutdown-signal"]
    assert option["default"] == "SIGKILL" and "SIGTERM" in option["choices"]
    command = pod["containers"][0]["command"]
    assert "--shutdown-signal=SIGTERM" in command
    timeout = int(next(a for a in command if a.startswith("--shutdown-timeout=")).split("=")[1])
    assert pod["terminationGracePeriodSeconds"] > timeout  # the kubelet waits longer than the agent
