"""An existing EKS cluster (eks.existing_cluster): HyperPod joins it, and nothing of its
control plane is created; only what HyperPod needs goes onto it."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match

from infra.handlers import accelerators
from tests.conftest import CAPABILITIES

NAME = CAPABILITIES["existing-cluster"]["eks"]["existing_cluster"]["name"]
CLUSTER_GROUP = CAPABILITIES["existing-cluster"]["eks"]["existing_cluster"]["security_group_id"]
# The other way round, in one synthesis: its own kubectl role, the Pod Identity agent installed,
# no new admins, the nodes in the cluster's own group (as the quick setup puts them) and the
# lifecycle scripts in a bucket of the platform's.
OWN_ROLE = "arn:aws:iam::111111111111:role/platform-kubectl"
SCRIPTS_BUCKET = "platform-lifecycle-111111111111"
# With a path, as IAM lets a role have: SageMaker takes the full ARN.
NODE_ROLE = "arn:aws:iam::111111111111:role/service-role/platform-hyperpod-nodes"
WITH_OWN_ROLE = {
    "hyperpod": {"existing_lifecycle_bucket": SCRIPTS_BUCKET, "existing_execution_role_arn": NODE_ROLE},
    "network": {**CAPABILITIES["existing-cluster"]["network"], "existing_security_group_id": CLUSTER_GROUP},
    "eks": {"existing_cluster": {**CAPABILITIES["existing-cluster"]["eks"]["existing_cluster"], "kubectl_role_arn": OWN_ROLE,
                                 "install_pod_identity_agent": True},
            "admin_principal_arns": []},
}


def _types(s, suffix: str) -> set[str]:
    return {r["Type"] for r in s.templates[suffix]["Resources"].values()}


def test_nothing_of_the_control_plane_is_created(synth):
    s = synth("existing-cluster")
    cluster = _types(s, "cluster")
    assert "AWS::EKS::Cluster" not in cluster and "AWS::EKS::Addon" not in cluster
    # No secrets key and no control-plane log group: the cluster's own settings stand.
    aliases = [r["Properties"]["AliasName"] for r in s.resources("cluster", "AWS::KMS::Alias").values()]
    assert aliases == ["alias/hyperpod-dev-data"]
    groups = [r["Properties"].get("LogGroupName") for r in s.resources("cluster", "AWS::Logs::LogGroup").values()]
    assert not any(isinstance(g, str) and g.startswith("/aws/eks/") for g in groups)
    # Nor anything in the other stacks that creates an EKS cluster.
    assert all("AWS::EKS::Cluster" not in _types(s, suffix) for suffix in s.templates)


def test_the_chart_and_every_kubernetes_object_go_onto_the_existing_cluster(synth):
    s = synth("existing-cluster")
    s.template("cluster").has_resource_properties(
        "Custom::AWSCDK-EKS-HelmChart", {"ClusterName": NAME, "Namespace": "kube-system"}
    )
    for suffix in s.templates:
        for kind in ("Custom::AWSCDK-EKS-KubernetesResource", "Custom::AWSCDK-EKS-HelmChart", "AWS::EKS::Addon",
                     "AWS::EKS::AccessEntry", "AWS::EKS::PodIdentityAssociation"):
            for resource in s.resources(suffix, kind).values():
                assert resource["Properties"]["ClusterName"] == NAME, (suffix, kind)
    (hyperpod,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    assert hyperpod["Properties"]["Orchestrator"]["Eks"]["ClusterArn"] == f"arn:aws:eks:us-east-1:111111111111:cluster/{NAME}"


def test_the_kubectl_lambda_gets_cluster_admin_by_an_access_entry_before_the_chart(synth):
    """As the quick setup's helm-chart-template gives its Helm Lambda (HelmCustomResourceAccessEntry)."""
    s = synth("existing-cluster")
    entries = {
        k: r for k, r in s.resources("cluster", "AWS::EKS::AccessEntry").items()
        if isinstance(r["Properties"]["PrincipalArn"], dict)
    }
    (entry_id, entry), = entries.items()
    role = entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]
    assert s.templates["cluster"]["Resources"][role]["Metadata"]["aws:cdk:path"].startswith("hyperpod-dev-cluster/KubectlProvider/Handler/")
    assert entry["Properties"]["AccessPolicies"] == [{
        "AccessScope": {"Type": "cluster"},
        "PolicyArn": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"]]},
    }]
    (chart,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
    assert entry_id in chart["DependsOn"]


def test_the_nodes_group_and_the_clusters_group_admit_each_other_and_the_chart_waits_for_it(synth):
    s = synth("existing-cluster")
    rules = s.resources("cluster", "AWS::EC2::SecurityGroupIngress")
    ours = Match.object_like({"Fn::ImportValue": Match.string_like_regexp("EfaSecurityGroup")})
    t = s.template("cluster")
    t.has_resource_properties("AWS::EC2::SecurityGroupIngress", {"GroupId": CLUSTER_GROUP, "SourceSecurityGroupId": ours, "IpProtocol": "-1"})
    t.has_resource_properties("AWS::EC2::SecurityGroupIngress", {"GroupId": ours, "SourceSecurityGroupId": CLUSTER_GROUP, "IpProtocol": "-1"})
    (chart,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
    assert set(rules) <= set(chart["DependsOn"])
    # The customer's group gets that one rule and nothing else of ours.
    touching = [r for suffix in s.templates for r in s.resources(suffix, "AWS::EC2::SecurityGroupIngress").values()
                if r["Properties"]["GroupId"] == CLUSTER_GROUP]
    assert len(touching) == 1
    assert not any(r["Properties"].get("GroupId") == CLUSTER_GROUP for suffix in s.templates
                   for r in s.resources(suffix, "AWS::EC2::SecurityGroupEgress").values())


def test_the_kubectl_lambda_runs_in_the_clusters_subnets_with_the_nodes_group(synth):
    s = synth("existing-cluster")
    handlers = [r for k, r in s.resources("cluster", "AWS::Lambda::Function").items()
                if s.templates["cluster"]["Resources"][k]["Metadata"]["aws:cdk:path"].startswith("hyperpod-dev-cluster/KubectlProvider/")]
    assert handlers
    private = CAPABILITIES["existing-cluster"]["network"]["existing_vpc"]["private_subnet_ids"]
    for handler in handlers:
        vpc = handler["Properties"]["VpcConfig"]
        assert vpc["SubnetIds"] == private
        assert json.dumps(vpc["SecurityGroupIds"]).count("EfaSecurityGroup") == 1


def test_no_core_add_on_is_installed_and_add_ons_wait_for_the_clusters_own_agent(synth):
    s = synth("existing-cluster")
    names = {r["Properties"]["AddonName"] for suffix in s.templates for r in s.resources(suffix, "AWS::EKS::Addon").values()}
    assert not names & {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent"}
    assert "amazon-sagemaker-hyperpod-training-operator" in names
    # Without addons.cert_manager.existing, cert-manager is an add-on of ours there too.
    created = {r["Properties"]["AddonName"] for r in synth("dev", WITH_OWN_ROLE).resources("addons", "AWS::EKS::Addon").values()}
    assert "cert-manager" in created


def test_an_adopted_cert_manager_is_created_by_nobody_and_the_training_operator_waits_for_its_webhook(synth):
    # A quick-setup cluster runs the cert-manager add-on (its cert-manager-template.yaml): creating
    # a second fails CreateAddon, so the deploy creates none and proves the cluster's one serving.
    s = synth("existing-cluster")
    addons = s.templates["addons"]["Resources"]
    assert not [r for suffix in s.templates for r in s.resources(suffix, "AWS::EKS::Addon").values()
                if r["Properties"]["AddonName"] == "cert-manager"]
    (gate,) = [k for k, r in addons.items() if k.startswith("CertManagerAddonReady") and r["Type"].startswith("Custom::")]
    assert "cert-manager-webhook" in json.dumps(addons[gate]["Properties"])
    (operator,) = [k for k, r in addons.items() if r["Type"] == "AWS::EKS::Addon"
                   and r["Properties"]["AddonName"] == "amazon-sagemaker-hyperpod-training-operator"]
    assert gate in addons[operator]["DependsOn"]


def test_a_kubectl_role_of_its_own_gets_no_access_entry_and_the_agent_is_installed_only_when_asked(synth):
    s = synth("dev", WITH_OWN_ROLE)
    assert not [r for r in s.resources("cluster", "AWS::EKS::AccessEntry").values() if isinstance(r["Properties"]["PrincipalArn"], dict)]
    handler = next(r for k, r in s.resources("cluster", "AWS::Lambda::Function").items()
                   if s.templates["cluster"]["Resources"][k]["Metadata"]["aws:cdk:path"] == "hyperpod-dev-cluster/KubectlProvider/Handler/Resource")
    assert handler["Properties"]["Role"] == OWN_ROLE
    # No new admins listed: the output still says who can reach the cluster.
    access = s.templates["cluster"]["Outputs"]["KubectlAccess"]["Value"]
    assert access.startswith(f"As a principal that has access to {NAME}: aws eks update-kubeconfig")
    (agent,) = s.resources("cluster", "AWS::EKS::Addon").values()
    # Kept on the cluster when this environment goes: other workloads may rely on it by then.
    assert agent["Properties"]["AddonName"] == "eks-pod-identity-agent" and agent["Properties"]["PreserveOnDelete"] is True


def test_the_accelerator_gate_asks_describe_cluster_where_the_cluster_is_known_by_name(synth):
    s = synth("existing-cluster")
    (gate,) = [r for r in s.resources("hyperpod", "Custom::HyperPodAcceleratorsReady").values()]
    assert gate["Properties"]["ClusterName"] == NAME
    assert "Endpoint" not in gate["Properties"] and "CertificateAuthority" not in gate["Properties"]
    s.template("hyperpod").has_resource_properties("AWS::IAM::Policy", {"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Action": "eks:DescribeCluster", "Resource": f"arn:aws:eks:us-east-1:111111111111:cluster/{NAME}"})
    ])}})
    # A cluster of ours hands the gate its endpoint and CA, and grants no DescribeCluster.
    dev = synth("dev")
    (ours,) = dev.resources("hyperpod", "Custom::HyperPodAcceleratorsReady").values()
    assert "Endpoint" in ours["Properties"]


def test_the_gate_reads_an_existing_clusters_address_from_describe_cluster():
    from botocore.session import get_session
    from botocore.stub import Stubber

    client = get_session().create_client("eks", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response(
            "describe_cluster",
            {"cluster": {"name": NAME, "endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com", "certificateAuthority": {"data": "Q0E="}}},
            {"name": NAME},
        )
        props = {"ClusterName": NAME, "Region": "us-east-1"}
        assert accelerators.cluster_address(props, client) == ("https://ABC.gr7.us-east-1.eks.amazonaws.com", "Q0E=")
    # Given in the template, the template's values are used and nothing is asked.
    assert accelerators.cluster_address({**props, "Endpoint": "https://x", "CertificateAuthority": "Y"}, object()) == ("https://x", "Y")


def test_the_outputs_name_the_existing_cluster(synth):
    outputs = synth("existing-cluster").templates["cluster"]["Outputs"]
    assert outputs["EksClusterName"]["Value"] == NAME
    assert f"--name {NAME}" in outputs["UpdateKubeconfigCommand"]["Value"]


def test_nodes_in_the_clusters_own_group_need_no_rule_and_no_group_of_ours(synth):
    s = synth("dev", WITH_OWN_ROLE)
    assert not s.resources("network", "AWS::EC2::SecurityGroupIngress") and not s.resources("cluster", "AWS::EC2::SecurityGroupIngress")
    descriptions = [r["Properties"]["GroupDescription"] for r in s.resources("network", "AWS::EC2::SecurityGroup").values()]
    assert descriptions == ["Interface endpoints: HTTPS from the VPC"]  # the endpoints' group only
    (hyperpod,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    assert hyperpod["Properties"]["VpcConfig"]["SecurityGroupIds"] == [CLUSTER_GROUP]


def test_lifecycle_scripts_go_into_an_existing_bucket_which_nodes_may_read_under_their_prefix_only(synth):
    s = synth("dev", WITH_OWN_ROLE)
    names = [r["Properties"].get("BucketName") for r in s.resources("cluster", "AWS::S3::Bucket").values()]
    assert SCRIPTS_BUCKET not in names and len(names) == 1  # the access-log bucket only
    (upload,) = s.resources("cluster", "Custom::CDKBucketDeployment").values()
    assert upload["Properties"]["DestinationBucketName"] == SCRIPTS_BUCKET
    (hyperpod,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    for group in hyperpod["Properties"]["InstanceGroups"]:
        assert group["LifeCycleConfig"]["SourceS3Uri"].startswith(f"s3://{SCRIPTS_BUCKET}/lifecycle/")
    # The nodes' read of it is the existing execution role's own (preflight simulates it); the
    # stack's role and its grant are in the default existing-cluster synthesis.
    s = synth("existing-cluster")
    s.template("hyperpod").has_resource_properties("AWS::IAM::ManagedPolicy", {"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Action": ["s3:GetBucket*", "s3:GetObject*", "s3:List*"],
                           "Resource": Match.array_with([Match.string_like_regexp("/lifecycle/\\*$")])})])}})


def test_an_existing_execution_role_runs_every_group_and_the_stack_attaches_nothing_to_it(synth):
    s = synth("dev", WITH_OWN_ROLE)
    # No role and no policy of ours in the hyperpod stack: the role is used as it is.
    assert not s.resources("hyperpod", "AWS::IAM::Role") or all(
        "sagemaker.amazonaws.com" not in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
        for r in s.resources("hyperpod", "AWS::IAM::Role").values()
    )
    assert NODE_ROLE.rsplit("/", 1)[1] not in json.dumps(s.resources("hyperpod", "AWS::IAM::ManagedPolicy"))
    (hyperpod,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    assert {g["ExecutionRole"] for g in hyperpod["Properties"]["InstanceGroups"]} == {NODE_ROLE}
    # The stack's own role, by contrast, is trusted by SageMaker.
    own = synth("existing-cluster")
    own.template("hyperpod").has_resource_properties("AWS::IAM::Role", {"AssumeRolePolicyDocument": {"Statement": [
        Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})]}})


def test_importing_the_cluster_asks_aws_nothing_at_synth(synth):
    """from_cluster_attributes with a provider of our own: no context lookup (manifest.json would
    list it under `missing`, and `cdk synth` would then want credentials)."""
    manifest = json.loads((synth("existing-cluster").outdir / "manifest.json").read_text())
    assert "missing" not in manifest


def test_with_a_kubectl_role_given_the_cluster_stack_passes_cfn_lint_with_only_accepted_warnings(synth):
    # aws_eks_v2 leaves its ECR Public condition unused when the provider's role is given (W8001); the
    # variant is not a gated config, so cfn-lint runs here on the one stack it changes.
    from cli.review import report as review

    s = synth("dev", WITH_OWN_ROLE)
    name = s.settings.stack_name("cluster")
    findings = review.lint(s.outdir, [st for st in review.load_stacks(s.outdir) if st.name == name])
    assert [(f.rule, f.message) for f in findings if f.level != "info" and not f.accepted] == []
