"""Every readiness gate's JSONPath, run by kubectl's own implementation: each
KubernetesObjectValue of prod's, the two-team `mig`, the `fsx` and the `karpenter` templates is
run as CDK's get handler runs it (`kubectl get -n NS TYPE NAME -o=jsonpath='{PATH}'`, passing on
any output: aws-cdk-lib aws-eks-v2/kubectl-handler/get) by Debian's kubectl against a local
server of objects in the shapes the API server writes them (tests/kubectl_engine.py): it must
print something for the object that is ready and nothing for each one that is not.

The shapes, each from the Kubernetes API reference's status fields: a Deployment's
`availableReplicas` (omitted at 0), a Pod's `containerStatuses[].ready`, a Job's `succeeded`
(omitted at 0), a Namespace's `phase`, a CustomResourceDefinition's conditions as the
apiextensions naming and establishing controllers write them (NamesAccepted, then Established
False "Installing"/"NotAccepted" before True "InitialNamesAccepted").
"""

from __future__ import annotations

import pytest

from tests.conftest import cdk_lib_source
from tests.kubectl_engine import ApiServer, debian_kubectl

GATE = "Custom::AWSCDK-EKS-KubernetesObjectValue"
SELECTOR = "--field-selector=spec.serviceAccountName="


def _meta(name: str, namespace: str | None) -> dict:
    return {"name": name, **({"namespace": namespace} if namespace else {}), "uid": f"uid-{name}", "resourceVersion": "1"}


def _pod(name: str, namespace: str, account: str, ready: bool) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(name, namespace),
            "spec": {"serviceAccountName": account, "containers": [{"name": "manager", "image": "x"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}],
                       "containerStatuses": [{"name": "manager", "ready": ready, "restartCount": 0, "image": "x", "imageID": "", "started": ready}]}}


def _crd(name: str, *conditions: tuple[str, str, str]) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": _meta(name, None),
            "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": r} for t, s, r in conditions],
                       "acceptedNames": {"kind": "X", "plural": name.split(".")[0]}, "storedVersions": ["v1"]}}


def shapes(kind: str, name: str, namespace: str) -> tuple[list[dict], list[tuple[str, list[dict]]]]:
    """(the objects of a ready state, [(what, the objects of a state not ready)]) for a gate."""
    if kind == "deployment":
        def deployment(status):
            return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, namespace), "spec": {"replicas": 1}, "status": status}]
        return (deployment({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
                            "conditions": [{"type": "Available", "status": "True"}]}),
                [("no replica available", deployment({"replicas": 1, "unavailableReplicas": 1,
                                                      "conditions": [{"type": "Available", "status": "False"}]})),
                 ("not there", [])])
    if kind == "pods" and name.startswith(SELECTOR):
        account = name.removeprefix(SELECTOR)
        other = _pod("someone-else", namespace, "default", True)
        return ([_pod("controller", namespace, account, True), other],
                [("its container not ready", [_pod("controller", namespace, account, False), other]),
                 ("only another account's pod", [other])])
    if kind == "customresourcedefinition":
        return ([_crd(name, ("NamesAccepted", "True", "NoConflicts"), ("Established", "True", "InitialNamesAccepted"))],
                [("installing", [_crd(name, ("NamesAccepted", "True", "NoConflicts"), ("Established", "False", "Installing"))]),
                 ("a naming conflict", [_crd(name, ("NamesAccepted", "False", "NamingConflict"), ("Established", "False", "NotAccepted"))]),
                 ("not there", [])])
    if kind == "namespace":
        return ([{"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, None), "status": {"phase": "Active"}}], [("not there", [])])
    if kind == "job":
        def job(status):
            return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name, namespace), "spec": {}, "status": status}]
        return job({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}), [("running", job({"active": 1})),
                                                                                               ("failed", job({"failed": 1}))]
    raise AssertionError(f"no object shape for a gate on {kind}: add one")


def _gates(s) -> list[dict]:
    return [r["Properties"] for suffix in s.templates for r in s.resources(suffix, GATE).values()]


@pytest.fixture(scope="module")
def gates(synth):
    out = {}
    for name in ("prod", "mig", "fsx", "karpenter"):
        for g in _gates(synth(name)):
            out[(g["ObjectType"], g["ObjectName"], g["ObjectNamespace"], g["JsonPath"])] = g
    return list(out.values())


def test_the_handler_runs_kubectl_get_with_the_path_in_braces_and_passes_on_any_output():
    handler = cdk_lib_source("aws-eks-v2/kubectl-handler/get/__init__.py")
    assert "['get', '-n', object_namespace, object_type, object_name, \"-o=jsonpath='{{{0}}}'\".format(json_path)]" in handler
    assert "output = kubectl(args).decode('utf-8')[1:-1]" in handler and "if output:\n        return output" in handler


def _printed(server: ApiServer, gate: dict) -> str:
    args = ["get", "-n", gate["ObjectNamespace"], gate["ObjectType"], gate["ObjectName"], "-o=jsonpath='{%s}'" % gate["JsonPath"]]
    result = server.kubectl(*args)
    if result.returncode != 0:  # the handler retries until its timeout: no value
        assert "NotFound" in result.stderr or "not found" in result.stderr, result.stderr
        return ""
    return result.stdout[1:-1]


def test_every_gate_passes_on_its_ready_object_and_on_no_other(gates, tmp_path):
    assert debian_kubectl(), "Debian's kubernetes-client kubectl is not installed (bash .ci/run installs it)"
    kinds = {g["ObjectType"] for g in gates}
    assert {"deployment", "pods", "customresourcedefinition", "namespace", "job"} <= kinds, kinds
    # One server whose objects change between calls: kubectl caches its discovery by server.
    with ApiServer([], tmp_path) as server:
        for gate in gates:
            ready, not_ready = shapes(gate["ObjectType"], gate["ObjectName"], gate["ObjectNamespace"])
            assert _printed(server.serve(ready), gate), gate
            for what, objects in not_ready:
                assert _printed(server.serve(objects), gate) == "", (what, gate)
