"""The review of changes that cannot be undone or that change how the cluster heals, on pairs of
assemblies synthesized in the test: the Kubernetes version up (one-way) and down (refused), node
recovery off and on, the network closed and opened, a team's guarantee left unbacked by another's
raise; and what a change of each instance-group property does to the running nodes, the time
charged for it, and no time for a refused update. Each asserts the exact callouts and the
cdk.json line of each SARIF result."""

from __future__ import annotations

import copy
import gzip
import json
import re

import botocore

from cli.review import cluster_wide, deploy_plan, replacement
from infra import cfn_schema, config, timing
from tests.cli.test_review_changes import GROUPS, GROWN
from tests.cli.test_review_update import _places, _review
from tests.conftest import CAPABILITIES

UPGRADED = {"eks": {"version": "1.35"}}
HP = "hyperpod-dev-hyperpod"


def _sagemaker_shapes() -> dict:
    path = f"{botocore.__path__[0]}/data/sagemaker/2017-07-24/service-2.json.gz"
    return json.loads(gzip.open(path).read())["shapes"]


def test_a_kubernetes_upgrade_is_one_way_and_says_what_it_leaves_behind(synth, tmp_path):
    # EKS user guide, "Update existing cluster to new Kubernetes version": "Once you upgrade a cluster, you can't
    # downgrade to a previous version". HyperPod's documented range ends at 1.34 (infra/versions.py, its sources).
    report = _review(synth, None, UPGRADED)
    assert report["changes"]["callouts"] == [
        "CONTROL PLANE UPGRADE: the EKS cluster `hyperpod-dev` in hyperpod-dev-cluster goes from Kubernetes 1.34 to 1.35, "
        "which cannot be undone (\"Once you upgrade a cluster, you can't downgrade to a previous version\": EKS user guide, "
        "Update existing cluster to new Kubernetes version (update-cluster.html)); 1.35 is outside the documented range of "
        "SageMaker HyperPod (EKS orchestrator) (1.28-1.34); the HyperPod nodes keep their AMI, and its kubelet, until "
        "`aws sagemaker update-cluster-software --cluster-name hyperpod-dev-hp` rolls each instance group onto the AMI release "
        "for the new version; `hyperpod-cdk upgrade-plan --to 1.35 -c env=dev` lists each step"
    ]
    assert report["pass"] and report["changes"]["deltas"]["lines"]["plan"] == ["Deploy: about 12 minutes for this update"]
    assert _places(report, UPGRADED, tmp_path) == {"CONTROL PLANE UPGRADE": '"version": "1.35"'}


def test_a_kubernetes_downgrade_is_refused_and_has_no_deploy_time(synth, tmp_path):
    report = _review(synth, UPGRADED, None)
    assert report["changes"]["callouts"] == [
        "REFUSED: the EKS cluster `hyperpod-dev` in hyperpod-dev-cluster would go from Kubernetes 1.35 down to 1.34: EKS cannot "
        "downgrade a cluster (\"Once you upgrade a cluster, you can't downgrade to a previous version\": EKS user guide, Update "
        "existing cluster to new Kubernetes version (update-cluster.html))"
    ]
    assert report["pass"] is False
    assert report["changes"]["update_plan"] == {"minutes": None, "waits": [], "critical_path": [], "refused": True}
    assert report["changes"]["deltas"]["lines"]["plan"] == [
        "Deploy: none: it is refused (REFUSED above), so nothing deploys and no node starts"]
    assert _places(report, {}, tmp_path) == {"REFUSED": '"version": "1.34"'}  # written in defaults, dev's own block has none


def test_the_add_on_pins_with_no_build_known_for_the_new_version_are_named():
    # infra/versions.py pins_off_version (EKS's version tables, Kubernetes' version-skew policy): kube-proxy is built per
    # minor version, CoreDNS v1.13.2-eksbuild.4 is listed for 1.33 to 1.35, cert-manager's pin is seen run on 1.33 and 1.34 only.
    pins = {"kube-proxy": "v1.34.6-eksbuild.2", "coredns": "v1.13.2-eksbuild.4", "cert-manager": "v1.18.2-eksbuild.2"}
    assert cluster_wide.pins_off(pins, "1.35") == [
        "cert-manager v1.18.2-eksbuild.2 (no build known offline for 1.35: preflight asks the account)",
        "kube-proxy v1.34.6-eksbuild.2 (not for 1.35; the build for 1.35: v1.35.3-eksbuild.2)",
    ]
    assert cluster_wide.pins_off(pins, "1.34") == []


RECOVERY_OFF = {"hyperpod": {"node_recovery": "None"}}


def test_node_recovery_turned_off_and_on_is_called_out(synth, tmp_path):
    # botocore's SageMaker model, CreateCluster's NodeRecovery: what None leaves to people.
    shapes = _sagemaker_shapes()
    doc = re.sub(r"<[^>]+>", "", shapes["CreateClusterRequest"]["members"]["NodeRecovery"]["documentation"])
    assert cluster_wide.NODE_RECOVERY_NONE in doc
    off = _review(synth, None, RECOVERY_OFF)
    assert off["changes"]["callouts"] == [
        f"NODE RECOVERY OFF: the HyperPod cluster in {HP} stops recovering faulty nodes (NodeRecovery Automatic -> None): a "
        "node that fails a health check is only labelled and stays as it is, and the jobs on it are not resumed on a "
        "replacement until someone reboots or replaces it by hand (SageMaker API, CreateCluster NodeRecovery: \"When set to "
        "None, cluster administrators will need to manually manage any faulty cluster instances\")"
    ]
    assert _places(off, RECOVERY_OFF, tmp_path / "off") == {"NODE RECOVERY OFF": '"node_recovery": "None"'}
    on = _review(synth, RECOVERY_OFF, None)
    assert on["changes"]["callouts"] == [
        f"NODE RECOVERY ON: the HyperPod cluster in {HP} recovers faulty nodes itself from now on (NodeRecovery None -> "
        "Automatic): HyperPod reboots or replaces a node that fails a health check, and the jobs on it restart on the replacement "
        "(SageMaker API, CreateCluster NodeRecovery)"
    ]


CLOSED = CAPABILITIES["closed-network"]
OPENED = config.deep_merge(copy.deepcopy(CLOSED), {"network": {"nat_gateways": 1}, "hyperpod": {"helm_chart": {"mirror_images": True}}})


def test_a_network_losing_or_gaining_its_way_to_the_internet_is_called_out(synth, tmp_path):
    closing = _review(synth, OPENED, CLOSED)
    assert closing["changes"]["callouts"] == [
        "INTERNET PATH LOST: the VPC loses its way to the internet (NAT gateways 1 -> 0, internet gateway removed): nodes and "
        "pods reach no public registry or endpoint from then on (an image not copied into ECR is never pulled, an AWS service "
        "without a VPC endpoint is unreachable); a job or add-on that pulls or calls out fails where it worked"
    ]
    assert _places(closing, CLOSED, tmp_path / "closed") == {"INTERNET PATH LOST": '"nat_gateways": 0'}
    assert closing["changes"]["deltas"]["lines"]["plan"] == ["Deploy: under a minute for this update"]
    opening = _review(synth, CLOSED, OPENED)
    assert opening["changes"]["callouts"] == [
        "INTERNET PATH GAINED: the VPC gains a way to the internet (NAT gateways 0 -> 1, internet gateway added): nodes and "
        "pods can reach any public address from then on (egress to 0.0.0.0/0 through NAT), which a closed network was chosen "
        "to prevent"
    ]
    assert _places(opening, OPENED, tmp_path / "opened") == {"INTERNET PATH GAINED": '"nat_gateways": 1'}


OVERSUBSCRIBED = copy.deepcopy(GROWN)
OVERSUBSCRIBED["governance"]["teams"][0]["quotas"][0]["accelerators"] = 3
OVERSUBSCRIBED["governance"]["allow_oversubscription"] = True


def test_a_raise_past_the_cluster_names_the_team_whose_guarantee_it_leaves_unbacked(synth, tmp_path):
    # Three A10G nodes: ml-research raised from 1 to 3 GPUs beside ml-ops's 1 is 4 of 3, which validate lets pass
    # only with allow_oversubscription (and warns of); ml-ops is the team that loses its backing.
    report = _review(synth, GROWN, OVERSUBSCRIBED)
    assert report["changes"]["callouts"] == [
        "TEAM QUOTA: team ml-research: guaranteed ml.g5.8xlarge: 1 GPU -> 3 GPUs",
        "GUARANTEE UNBACKED: team ml-ops's guarantee of 1 GPU of ml.g5.8xlarge is no longer backed by nodes: the teams' quotas "
        "add up to 4 GPUs, above the cluster's 3 GPUs (ml-research 3 GPUs, ml-ops 1 GPU; raised by ml-research), which "
        "governance.allow_oversubscription lets pass; while the others use their quota, a job within the guarantee is admitted "
        "and finds no node",
    ]
    assert any("quotas for ml.g5.8xlarge add up to 4 GPUs, above the cluster's 3 GPUs" in w for w in report["warnings"])
    places = _places(report, OVERSUBSCRIBED, tmp_path)
    assert places["GUARANTEE UNBACKED"] == '"quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 3}]'


LABELLED = {"hyperpod": {"instance_groups": GROUPS + [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1,
                                                       "labels": {"team": "a"}}]}}


def test_a_label_only_change_updates_the_nodes_in_place_and_charges_no_node_time(synth):
    report = _review(synth, None, LABELLED)
    assert report["changes"]["callouts"] == []
    assert report["changes"]["deltas"]["lines"]["cluster"] == ['Node labels of instance group gpu: team (unset) -> "a"']
    plan = report["changes"]["update_plan"]
    assert plan["waits"][0] == "group gpu: KubernetesConfig reconciled on the running nodes, no restart"
    assert plan["minutes"] < timing.node_minutes(accelerated=True, efa_interfaces=1, count=1, checks=[])


def test_what_each_instance_group_property_does_to_running_nodes_is_a_table_held_to_the_schema_and_the_api():
    from stacks import hyperpod

    schema = cfn_schema.resource("AWS::SageMaker::Cluster")
    group = schema["definitions"]["ClusterInstanceGroup"]["properties"]
    # Every property of the schema's instance group has its effect, and nothing else does.
    assert set(replacement.GROUP_PROPERTY_EFFECTS) == set(group)
    # CloudFormation replaces nothing for a group's change: the effects are HyperPod's.
    assert not [p for p in schema.get("createOnlyProperties", []) if p.startswith("/properties/InstanceGroups")]
    shapes = _sagemaker_shapes()
    spec = shapes["ClusterInstanceGroupSpecification"]["members"]
    assert "reconcile the actual state with the declared state" in spec["KubernetesConfig"]["documentation"]
    assert "created or updated" in spec["OnStartDeepHealthChecks"]["documentation"]
    assert "runs during cluster creation" in shapes["ClusterLifeCycleConfig"]["members"]["OnCreate"]["documentation"]
    assert "BatchReplaceClusterNodes" in json.loads(gzip.open(
        f"{botocore.__path__[0]}/data/sagemaker/2017-07-24/service-2.json.gz").read())["operations"]
    # The gates carry every property that reaches the nodes, so they wait for the group again after it.
    reaching = {k for k, (effect, _) in replacement.GROUP_PROPERTY_EFFECTS.items() if effect != replacement.NOTHING}
    assert reaching <= set(hyperpod.ROLLS_NODES), reaching - set(hyperpod.ROLLS_NODES)
    assert all(source for _, source in replacement.GROUP_PROPERTY_EFFECTS.values())
    # The deploy plan charges a group's node time only where nodes start.
    group_before = {"InstanceGroupName": "gpu", "InstanceType": "ml.g5.8xlarge", "InstanceCount": 1}
    cluster = lambda g: {"Properties": {"InstanceGroups": [g]}}  # noqa: E731
    labelled = {**group_before, "KubernetesConfig": {"Labels": {"team": "a"}}}
    script = {**group_before, "LifeCycleConfig": {"OnCreate": "on_create.sh", "SourceS3Uri": "s3://b/lifecycle/2/"}}
    retyped = {**group_before, "InstanceType": "ml.g6.8xlarge"}
    assert deploy_plan.cluster_update(cluster(group_before), cluster(labelled)).minutes == 0
    assert deploy_plan.cluster_update(cluster(group_before), cluster(script)).minutes == 0
    assert deploy_plan.cluster_update(cluster(group_before), cluster(retyped)).minutes == deploy_plan.group_minutes(retyped)


def test_a_new_alert_address_is_named_and_one_removed_too():
    # stacks/operations.py: one SNS e-mail subscription per operations.notifications.emails address.
    from cli.review import deltas
    from cli.review.assembly import StackSummary

    def stacks(*emails):
        subs = {f"S{i}": {"Type": "AWS::SNS::Subscription", "Properties": {"Protocol": "email", "Endpoint": e, "TopicArn": "t"}}
                for i, e in enumerate(emails)}
        return [StackSummary("ops", {"Resources": subs}, [])]

    found = deltas.compare(stacks("ops@example.com"), stacks("oncall@example.com"), "us-east-1", {})
    assert found["lines"]["exposure"] == [
        "Alerts: e-mailed to oncall@example.com from now on (a new subscriber: SNS sends it a confirmation first, and nothing "
        "reaches it until it confirms)",
        "Alerts: no longer e-mailed to ops@example.com",
    ]


def test_a_no_execute_taint_reaching_running_nodes_evicts_what_does_not_tolerate_it():
    # Kubernetes, Taints and Tolerations: NoExecute evicts running pods that do not tolerate it; HyperPod reconciles
    # KubernetesConfig onto the running nodes (cli/review/replacement.py), so the taint lands on them at this deploy.
    from cli.review.assembly import StackSummary

    def stacks(*taints):
        group = {"InstanceGroupName": "gpu", "InstanceType": "ml.g5.8xlarge", "InstanceCount": 1,
                 "KubernetesConfig": {"Taints": list(taints)}}
        return [StackSummary("hp", {"Resources": {"C": {"Type": "AWS::SageMaker::Cluster", "Properties": {"InstanceGroups": [group]}}}}, [])]

    schedule = {"Key": "reserved", "Value": "a", "Effect": "NoSchedule"}
    execute = {"Key": "drain", "Value": "now", "Effect": "NoExecute"}
    lines, callouts = cluster_wide.compare(stacks(schedule), stacks(schedule, execute))
    assert callouts == [(
        "PODS EVICTED: instance group gpu in hp gets a NoExecute taint (drain=now:NoExecute), reconciled onto its running nodes: "
        "every pod there that does not tolerate it is evicted at once, the running job's included",
        ["hyperpod.instance_groups[gpu].taints"],
    )]
    assert cluster_wide.compare(stacks(), stacks(schedule))[1] == []  # NoSchedule keeps what runs


def test_installing_the_inference_operator_and_moving_its_version_are_called_out():
    # docs/serving.md: a load balancer per endpoint, the inference priority; the 3.0 release notes' upgrade prerequisites.
    from cli.review.assembly import StackSummary

    def stacks(*versions):
        res = {f"A{i}": {"Type": "AWS::EKS::Addon", "Properties": {"AddonName": "amazon-sagemaker-hyperpod-inference", "AddonVersion": v}}
               for i, v in enumerate(versions)}
        return [StackSummary("addons", {"Resources": res}, [])]

    (installed,) = cluster_wide.compare(stacks(), stacks("v1.0.0-eksbuild.1"))[1]
    assert installed[0].startswith("SERVING: this deploy installs the HyperPod inference operator") and "Load Balancer" in installed[0]
    # Elastic Load Balancing's us-east-1 rates: $0.0225 an ALB-hour (730 hours a month), $0.008 an LCU-hour.
    assert "($0.0225 an hour, $16.43 a month, plus $0.008 per capacity unit an hour, us-east-1 rates;" in installed[0]
    assert installed[1] == ["inference.enabled"]
    (updated,) = cluster_wide.compare(stacks("v1.0.0-eksbuild.1"), stacks("v1.1.0-eksbuild.1"))[1]
    assert "v1.0.0-eksbuild.1 -> v1.1.0-eksbuild.1" in updated[0] and updated[1] == ["inference.version"]
    assert cluster_wide.compare(stacks("v1.0.0-eksbuild.1"), stacks("v1.0.0-eksbuild.1"))[1] == []
