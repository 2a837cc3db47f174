"""The admission policies, run: every CEL expression of every ValidatingAdmissionPolicy the
addons stack applies (match conditions, validations, message expressions) is evaluated by a CEL
runtime (cel-python's `celpy`) against requests it must allow and refuse, each refusal one of the
ways around a team's quota that the tenancy reviews found.

How the API server runs a policy (Kubernetes, "Validating Admission Policy"; k8s.io/apiserver
`pkg/admission/plugin/policy/validating`): a request matches its resource rules and the binding's
namespace selector, then every match condition must be true, then each validation false is a
refusal with its message. `object` and `oldObject` are the objects as unstructured JSON, declared
dyn (k8s.io/apiserver `pkg/admission/plugin/cel/compile.go` createEnvForOpts), `namespaceObject`
the namespace, and `request` the AdmissionRequest, its `options` the operation's options
(DeleteOptions for a DELETE; BuildRequestType declares it dyn), so here each is the JSON of the
object, mapped to CEL values by `celpy.json_to_cel`.

The policies use no Kubernetes CEL library function (no regex, url, quantity or authorizer
extension), only CEL's standard macros and operators, which celpy implements; a test below holds
that, so a policy that took up an extension would fail here until that expression is tested
another way.
"""

from __future__ import annotations

import copy
import re

import celpy
import pytest

from infra import naming
from manifests import tenancy

# The CEL library functions Kubernetes adds (k8s.io/apiserver pkg/cel/library: lists, regex, urls,
# authz, quantity, ip/cidr, format, semver) and cel-go's string extensions, none of which celpy has.
KUBERNETES_EXTENSIONS = re.compile(
    r"\.(isSorted|sum|indexOf|lastIndexOf|find|findAll|url|getScheme|getHost|check|allowed|reason|quantity|isQuantity|"
    r"ip|cidr|isIP|isCIDR|format|semver|isSemver|lowerAscii|upperAscii|replace|split|join|trim|substring|charAt)\(|"
    r"\b(authorizer|params|variables)\b"
)
_PROGRAMS: dict[str, object] = {}


def _eval(expression: str, activation: dict):
    if expression not in _PROGRAMS:
        env = celpy.Environment()
        _PROGRAMS[expression] = env.program(env.compile(expression))
    result = _PROGRAMS[expression].evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    if isinstance(result, celpy.celtypes.BoolType):
        return bool(result)
    if isinstance(result, Exception):  # CEL's own evaluation errors come back as values
        raise AssertionError(f"{expression!r}: {result}")
    return str(result) if isinstance(result, celpy.celtypes.StringType) else result


TEAM, OTHER = "research", "inference"


def _policies(s) -> list[tuple[dict, dict]]:
    """(policy, binding) pairs as the addons stack applies them."""
    objects = s.manifests("addons")
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings) == set(tenancy.POLICIES)
    return [(policies[n], bindings[n]) for n in tenancy.POLICIES]


def _matches(policy: dict, binding: dict, request: dict) -> bool:
    res = request["resource"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    ruled = any(res["group"] in r["apiGroups"] and (r["apiVersions"] == ["*"] or res["version"] in r["apiVersions"])
                and res["resource"] in r["resources"] and request["operation"] in r["operations"] for r in rules)
    (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector["key"] == tenancy.NAMESPACE_NAME_LABEL and selector["operator"] == "In"
    return ruled and request["namespace"] in selector["values"]


def refusals(pairs, request: dict, obj: dict | None, old: dict | None) -> list[str]:
    """What the API server would answer: the messages of the failed validations of every
    policy the request meets (none: admitted)."""
    activation = {"request": request, "object": obj, "oldObject": old,
                  "namespaceObject": {"metadata": {"name": request["namespace"]}}}
    out = []
    for policy, binding in pairs:
        if not _matches(policy, binding, request):
            continue
        if not all(_eval(c["expression"], activation) for c in policy["spec"]["matchConditions"]):
            continue
        for v in policy["spec"]["validations"]:
            if not _eval(v["expression"], activation):
                out.append(_eval(v["messageExpression"], activation) if "messageExpression" in v else v["message"])
    return out


# ------------------------------------------------------------------ requests


def _request(operation: str, kind: tenancy.QueuedKind | tuple, *, team: str = TEAM, groups=None, options=None) -> dict:
    group, version, resource = kind[:3]
    names = naming.team_names(team)
    req = {
        "operation": operation,
        "resource": {"group": group, "version": "v1" if version == "*" else version, "resource": resource},
        "namespace": names.namespace,
        "name": "job",
        "userInfo": {"username": "alice", "groups": groups if groups is not None else [names.group, "system:authenticated"]},
    }
    if options is not None:
        req["options"] = options
    return req


def _job(kind: tenancy.QueuedKind, *, queue: str | None, annotations: dict | None = None) -> dict:
    labels = {} if queue is None else {tenancy.QUEUE_LABEL: queue}
    meta = {"name": "job", "namespace": naming.team_names(TEAM).namespace, "resourceVersion": "7", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": f"{kind.group}/v1", "kind": kind.resource, "metadata": meta, "spec": {"suspend": True}}


def _queue(team: str = TEAM) -> str:
    return naming.team_names(team).local_queue


def _workload() -> dict:
    """A Workload as Kueue writes it (kubernetes-sigs/kueue v0.19.2 apis/kueue/v1beta1
    workload_types.go: spec.podSets, queueName, priority, active; status.conditions)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "job-job-1a2b3", "namespace": naming.team_names(TEAM).namespace, "resourceVersion": "41", "generation": 1,
                     "labels": {"kueue.x-k8s.io/job-uid": "0f0e"}, "finalizers": ["kueue.x-k8s.io/resource-in-use"],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "0f0e", "controller": True}],
                     "managedFields": [{"manager": "kueue", "operation": "Update"}]},
        "spec": {"active": True, "queueName": _queue(), "priority": 100, "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                 "priorityClassName": "training-priority",
                 "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]},
    }


def _changed(obj: dict, path: str, value) -> dict:
    """A copy of `obj` with the dotted `path` set to `value`, as the API server hands the new
    object of an update to admission: resourceVersion as sent, generation and managedFields
    already moved on (the strategy and the field manager run first)."""
    new = copy.deepcopy(obj)
    node = new
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    new["metadata"]["generation"] = obj["metadata"].get("generation", 0) + 1
    new["metadata"]["managedFields"] = [{"manager": "kubectl-patch", "operation": "Update"}]
    return new


WORKLOADS = ("kueue.x-k8s.io", "v1beta1", "workloads")
BATCH, PYTORCH, HYPERPOD = tenancy.QUEUED_KINDS
KUBECTL_DELETE = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Background"}
CASCADE_ORPHAN = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Orphan"}

# (what, request, object, oldObject) a team member may do.
ALLOWED = [
    *[(f"create a {k.resource} in its queue", _request("CREATE", k), _job(k, queue=_queue()), None) for k in tenancy.QUEUED_KINDS],
    *[(f"annotate its own {k.resource}", _request("UPDATE", k), _job(k, queue=_queue(), annotations={"note": "x"}), _job(k, queue=_queue()))
      for k in tenancy.QUEUED_KINDS],
    *[(f"delete a {k.resource} as kubectl does", _request("DELETE", k, options=KUBECTL_DELETE), None, _job(k, queue=_queue()))
      for k in tenancy.QUEUED_KINDS],
    ("delete a Job in the foreground", _request("DELETE", BATCH, options={**KUBECTL_DELETE, "propagationPolicy": "Foreground"}), None,
     _job(BATCH, queue=_queue())),
    ("delete a Job with orphanDependents false", _request("DELETE", BATCH, options={"orphanDependents": False}), None, _job(BATCH, queue=_queue())),
    # A custom resource's default is to delete its dependents (the API server's generic store).
    ("delete a PyTorchJob naming no policy", _request("DELETE", PYTORCH, options={}), None, _job(PYTORCH, queue=_queue())),
    ("stop its Workload", _request("UPDATE", WORKLOADS), _changed(_workload(), "spec.active", False), _workload()),
    # Not a team's people: the controllers and the platform are not held (their groups are not a team's).
    ("the job controller creates an unlabelled Job", _request("CREATE", BATCH, groups=["system:serviceaccounts", "system:serviceaccounts:kube-system"]),
     _job(BATCH, queue=None), None),
    ("Kueue rewrites a Workload", _request("UPDATE", WORKLOADS, groups=["system:serviceaccounts:kueue-system"]),
     _changed(_workload(), "status.admission", {"clusterQueue": "x"}), _workload()),
    # Not a team namespace: the bindings select only the team namespaces.
    ("an operator orphans a Job elsewhere", {**_request("DELETE", BATCH, options=CASCADE_ORPHAN), "namespace": "kube-system"}, None,
     _job(BATCH, queue=None)),
]

# (finding, request, object, oldObject, words of the refusal) a team member may not do.
REFUSED = [
    *[(f"create a {k.resource} without the queue label", _request("CREATE", k), _job(k, queue=None), None, "is required")
      for k in tenancy.QUEUED_KINDS],
    ("create a Job in another team's queue", _request("CREATE", BATCH), _job(BATCH, queue=_queue(OTHER)), None,
     f"{_queue()} is required"),
    *[(f"take a {k.resource} out of its queue", _request("UPDATE", k), _job(k, queue=None), _job(k, queue=_queue()), "may not change")
      for k in tenancy.QUEUED_KINDS],
    # Issue 51, 3: an unlabelled Job someone else made runs outside every queue; changing it is not the team's.
    ("change an unlabelled Job someone else created", _request("UPDATE", BATCH), _job(BATCH, queue=None, annotations={"x": "y"}),
     _job(BATCH, queue=None), "only a job in your team's queue"),
    # Issue 51, 2: an orphaning delete frees the quota while the pods run.
    *[(f"delete a {k.resource} with --cascade=orphan", _request("DELETE", k, options=CASCADE_ORPHAN), None, _job(k, queue=_queue()),
       "Background or Foreground") for k in tenancy.QUEUED_KINDS],
    *[(f"delete a {k.resource} with orphanDependents", _request("DELETE", k, options={"orphanDependents": True}), None,
       _job(k, queue=_queue()), "Background or Foreground") for k in tenancy.QUEUED_KINDS],
    ("delete a batch/v1 Job naming no policy (its default orphans)", _request("DELETE", BATCH, options={}), None, _job(BATCH, queue=_queue()),
     "Background or Foreground"),
    # Issue 51, 3: the Workload allow-list, spec and metadata alike.
    ("move its Workload to another queue", _request("UPDATE", WORKLOADS), _changed(_workload(), "spec.queueName", _queue(OTHER)), _workload(),
     "only spec.active"),
    ("shrink its Workload's pod sets", _request("UPDATE", WORKLOADS), _changed(_workload(), "spec.podSets", []), _workload(), "only spec.active"),
    ("raise its Workload's priority", _request("UPDATE", WORKLOADS), _changed(_workload(), "spec.priority", 10**6), _workload(), "only spec.active"),
    ("set a spec field no list names", _request("UPDATE", WORKLOADS), _changed(_workload(), "spec.futureField", "x"), _workload(), "only spec.active"),
    ("annotate its Workload", _request("UPDATE", WORKLOADS), _changed(_workload(), "metadata.annotations", {"kueue.x-k8s.io/x": "y"}), _workload(),
     "annotations"),
    ("relabel its Workload", _request("UPDATE", WORKLOADS), _changed(_workload(), "metadata.labels", {}), _workload(), "annotations"),
    ("drop its Workload's owner", _request("UPDATE", WORKLOADS), _changed(_workload(), "metadata.ownerReferences", []), _workload(), "owner references"),
    ("drop its Workload's finalizers", _request("UPDATE", WORKLOADS), _changed(_workload(), "metadata.finalizers", []), _workload(), "finalizers"),
    ("admit its Workload itself", _request("UPDATE", WORKLOADS), _changed(_workload(), "status.admission", {"clusterQueue": "x"}), _workload(),
     "only spec.active"),
]


@pytest.fixture(scope="module")
def pairs(synth):
    return _policies(synth("mig"))


@pytest.mark.parametrize("what,request_,obj,old", ALLOWED, ids=[c[0] for c in ALLOWED])
def test_what_a_team_may_do_is_admitted(pairs, what, request_, obj, old):
    assert refusals(pairs, request_, obj, old) == []


@pytest.mark.parametrize("what,request_,obj,old,words", REFUSED, ids=[c[0] for c in REFUSED])
def test_each_way_around_the_quota_is_refused(pairs, what, request_, obj, old, words):
    answer = refusals(pairs, request_, obj, old)
    assert answer and any(words in m for m in answer), answer


def test_every_validation_is_what_refuses_some_case(pairs):
    """Take any one validation out of its policy, and some refused case is admitted: each is
    needed, so a refusal removed from a policy fails the suite."""
    for i, (policy, binding) in enumerate(pairs):
        for j in range(len(policy["spec"]["validations"])):
            weakened = copy.deepcopy(policy)
            del weakened["spec"]["validations"][j]
            trial = [*pairs[:i], (weakened, binding), *pairs[i + 1:]]
            admitted = [what for what, req, obj, old, _ in REFUSED if not refusals(trial, req, obj, old)]
            assert admitted, (policy["metadata"]["name"], policy["spec"]["validations"][j]["expression"][:80])


def test_the_policies_use_no_kubernetes_cel_extension(pairs):
    """Every expression is one celpy runs as the API server does: CEL's standard library only."""
    for policy, _ in pairs:
        expressions = [c["expression"] for c in policy["spec"]["matchConditions"]]
        expressions += [e for v in policy["spec"]["validations"] for e in (v["expression"], v.get("messageExpression")) if e]
        for e in expressions:
            assert not KUBERNETES_EXTENSIONS.search(e), e
