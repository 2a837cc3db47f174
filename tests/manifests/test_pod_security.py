"""The sample job against the Pod Security Standards as the Kubernetes documentation states
them (tests/manifests/pod_security_standards.py, each control from the page's tables), as
`render-job` prints it; the sample-job stack's is held to the same in tests/test_tenancy.py.
Each control is shown to fail a pod that breaks it, so a pass means something."""

from __future__ import annotations

import copy

import pytest
import yaml

from cli import main as cli
from tests.conftest import CAPABILITIES
from tests.manifests import pod_security_standards as pss


def _rendered_pod(capsys, *args) -> dict:
    assert cli.main(["render-job", *args, "--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1"]) == 0
    job = list(yaml.safe_load_all(capsys.readouterr().out))[-1]
    return pss.pod_of(job["spec"]["replicaSpecs"][0]["template"])


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_rendered_job_passes_restricted(capsys, env):
    pod = _rendered_pod(capsys, "-c", f"env={env}")
    assert pss.violations(pod, "restricted") == []
    # What the elastic agent needs (its source, .venv/sdist hyperpod-elastic-agent 1.1.3: its
    # rendezvous writes /opt/ml/input/config first) holds under a read-only root filesystem.
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    agent = next(m for m in container["volumeMounts"] if m["mountPath"] == "/opt/ml")
    assert "emptyDir" in next(v for v in pod["spec"]["volumes"] if v["name"] == agent["name"])


def _job_pod():
    from infra import validation
    from manifests import job
    from tests.conftest import patched_context

    settings = validation.load_settings(patched_context("dev", CAPABILITIES["fsx"]), "dev")[0]
    return pss.pod_of(job.build(settings, image="x")["spec"]["replicaSpecs"][0]["template"])


def test_with_fsx_the_job_mounts_its_claim_and_still_passes_restricted():
    pod = _job_pod()
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx"}} in pod["spec"]["volumes"]
    assert pss.violations(pod, "restricted") == []


def _broken(change) -> dict:
    pod = copy.deepcopy(_job_pod())
    change(pod["spec"], pod["spec"]["containers"][0])
    return pod


BREAKS = [
    ("baseline Privileged Containers", lambda s, c: c["securityContext"].update(privileged=True)),
    ("baseline Host Namespaces", lambda s, c: s.update(hostNetwork=True)),
    ("baseline Host Namespaces", lambda s, c: s.update(hostPID=True)),
    ("baseline HostPath Volumes", lambda s, c: s["volumes"].append({"name": "jobs", "hostPath": {"path": "/opt/sagemaker/jobs"}})),
    ("baseline Host Ports", lambda s, c: c["ports"][0].update(hostPort=8080)),
    ("baseline Capabilities", lambda s, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])),
    ("baseline Seccomp", lambda s, c: s["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ("baseline Sysctls", lambda s, c: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
    ("baseline /proc Mount Type", lambda s, c: c["securityContext"].update(procMount="Unmasked")),
    ("restricted Capabilities (add)", lambda s, c: c["securityContext"]["capabilities"].update(add=["CHOWN"])),
    ("restricted Capabilities (drop ALL)", lambda s, c: c["securityContext"]["capabilities"].update(drop=["NET_RAW"])),
    ("restricted Privilege Escalation", lambda s, c: c["securityContext"].pop("allowPrivilegeEscalation")),
    ("restricted Running as Non-root:", lambda s, c: s["securityContext"].pop("runAsNonRoot")),
    ("restricted Running as Non-root user", lambda s, c: c["securityContext"].update(runAsUser=0)),
    ("restricted Seccomp:", lambda s, c: s["securityContext"].pop("seccompProfile")),
    ("restricted Volume Types", lambda s, c: s["volumes"].append({"name": "nfs", "nfs": {"server": "x", "path": "/"}})),
]


@pytest.mark.parametrize("control, change", BREAKS, ids=[f"{i}-{c}" for i, (c, _) in enumerate(BREAKS)])
def test_each_control_fails_a_pod_that_breaks_it(control, change):
    pod = _broken(change)
    found = pss.violations(pod, "restricted")
    assert any(v.startswith(control) for v in found), found
    # baseline holds a pod to its own rows only.
    assert bool(pss.violations(pod, "baseline")) == control.startswith("baseline")
