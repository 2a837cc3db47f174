"""The contract a first `cdk deploy --all` depends on, each part held against its source:
the AWS reference templates, FACTS, the chart's own values, and the SageMaker API's shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from infra import chart, config, readiness, timing
from stacks.cluster import chart_values
from tests.conftest import CONTEXT, ENVIRONMENTS, GATED, cdk_lib_source, patched_context

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- readiness gates


def _custom_resources(template: dict) -> dict:
    return {
        k: r for k, r in template["Resources"].items()
        if r["Type"].startswith("Custom::") or r["Type"] == "AWS::CloudFormation::CustomResource"
    }


def _service_function(s, suffix: str, token) -> tuple[str, dict]:
    """(stack, Lambda resource) a ServiceToken leads to, imports followed."""
    if "Fn::ImportValue" in token:
        suffix, token = s.exported(token["Fn::ImportValue"])
    (lid, attr) = token["Fn::GetAtt"]
    function = s.templates[suffix]["Resources"][lid]
    assert function["Type"] == "AWS::Lambda::Function" and attr == "Arn", (suffix, lid)
    return suffix, function


def _waiter(s, suffix: str, function: dict) -> dict | None:
    """aws-cdk-lib's provider framework with an isComplete handler: the user functions'
    timeouts and the waiter state machine's Retry block (interval, attempts; backoff 1)."""
    env = function["Properties"].get("Environment", {}).get("Variables", {})
    if "WAITER_STATE_MACHINE_ARN" not in env:
        return None
    resources = s.templates[suffix]["Resources"]
    machine = resources[env["WAITER_STATE_MACHINE_ARN"]["Ref"]]["Properties"]["DefinitionString"]
    text = "".join(p for p in machine["Fn::Join"][1] if isinstance(p, str))
    ((interval, attempts, backoff),) = re.findall(r'"IntervalSeconds":(\d+),"MaxAttempts":(\d+),"BackoffRate":(\d+)', text)
    assert backoff == "1"

    def timeout(name: str) -> int:
        return resources[env[name]["Fn::GetAtt"][0]]["Properties"].get("Timeout", 3)

    return {"interval": int(interval), "attempts": int(attempts),
            "on_event": timeout("USER_ON_EVENT_FUNCTION_ARN"), "is_complete": timeout("USER_IS_COMPLETE_FUNCTION_ARN")}


def _longest_answer_seconds(s, suffix: str, resource: dict) -> tuple[int, dict | None]:
    """How long a custom resource's provider may take to answer CloudFormation, if every call
    ran to its Lambda timeout: one invocation, or the start handler plus every attempt of the
    provider framework's waiter (the interval, then the check)."""
    suffix, function = _service_function(s, suffix, resource["Properties"]["ServiceToken"])
    waiter = _waiter(s, suffix, function)
    if waiter is None:
        return function["Properties"].get("Timeout", 3), None
    return waiter["on_event"] + waiter["attempts"] * (waiter["interval"] + waiter["is_complete"]), waiter


@pytest.mark.parametrize("env", GATED)
def test_no_custom_resource_can_wait_longer_than_cloudformation_waits_for_it(synth, env):
    # CloudFormation fails a custom resource that has not answered within its ServiceTimeout
    # (1-3600 s, default 3600: CloudFormation User Guide; aws-cdk-lib's CustomResource checks
    # the same range, which this asks it for).
    import aws_cdk as cdk

    app = cdk.App()
    stack = cdk.Stack(app, "Probe")
    cdk.CustomResource(stack, "Max", service_token="arn:aws:lambda:us-east-1:111111111111:function:x",
                       service_timeout=cdk.Duration.seconds(timing.SERVICE_TIMEOUT_MAX_S))
    with pytest.raises(Exception, match="between 1 and 3600"):
        cdk.CustomResource(stack, "Over", service_token="arn:aws:lambda:us-east-1:111111111111:function:x",
                           service_timeout=cdk.Duration.seconds(timing.SERVICE_TIMEOUT_MAX_S + 1))
    s = synth(env)
    checked = 0
    for suffix, template in s.templates.items():
        for lid, resource in _custom_resources(template).items():
            limit = int(resource["Properties"].get("ServiceTimeout", timing.SERVICE_TIMEOUT_MAX_S))
            answer, waiter = _longest_answer_seconds(s, suffix, resource)
            assert answer <= limit, (suffix, lid, answer, limit)
            if resource["Type"].startswith("Custom::HyperPod"):
                # Ours say so explicitly, and their own deadline fires while the framework still
                # has attempts left (at most one check per interval has run by then).
                assert "ServiceTimeout" in resource["Properties"], lid
                assert int(resource["Properties"]["LinkSeconds"]) // waiter["interval"] + 1 < waiter["attempts"]
            checked += 1
    assert checked


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_node_gate_waits_past_the_documented_deep_health_checks_in_links(synth, env):
    # HyperPod docs (Create a NodeClass): "a DHC takes around 60-90 minutes to complete";
    # prod's p5 group has both checks, so the chain must last past 90 minutes plus a boot.
    s = synth(env)
    links = sorted(s.resources("hyperpod", "Custom::HyperPodNodesReady").values(), key=lambda r: r["Properties"]["Link"])
    total = sum(int(r["Properties"]["LinkSeconds"]) for r in links)
    assert {r["Properties"]["TotalSeconds"] for r in links} == {str(total)}
    assert [r["Properties"]["Link"] for r in links] == [f"{i}/{len(links)}" for i in range(1, len(links) + 1)]
    checked = [g for g in s.settings.hyperpod.instance_groups if g.health_checks]
    if checked:
        assert total >= (90 + timing.BOOT_MINUTES["efa-cluster"]) * 60
        assert len(links) > 1
    # Each link waits for the one before it.
    ids = {r["Properties"]["Link"]: k for k, r in s.resources("hyperpod", "Custom::HyperPodNodesReady").items()}
    for i in range(2, len(links) + 1):
        assert ids[f"{i - 1}/{len(links)}"] in s.resources("hyperpod", "Custom::HyperPodNodesReady")[ids[f"{i}/{len(links)}"]]["DependsOn"]


@pytest.mark.parametrize("env", GATED)
def test_the_accelerator_gate_waits_for_what_the_job_asks_of_each_node_before_anything_runs_on_them(synth, env):
    s = synth(env)
    gates = s.resources("hyperpod", "Custom::HyperPodAcceleratorsReady")
    accelerated = [g for g in s.settings.hyperpod.instance_groups if g.count > 0 and g.spec.is_accelerated]
    if not accelerated:
        assert gates == {}
        return
    groups = {k: v for k, v in next(iter(gates.values()))["Properties"]["Groups"].items()}
    assert set(groups) == {g.name for g in accelerated}
    # After the last link of the node gate.
    nodes = s.resources("hyperpod", "Custom::HyperPodNodesReady")
    last = max(nodes, key=lambda k: nodes[k]["Properties"]["Link"])
    first = min(gates, key=lambda k: gates[k]["Properties"]["Link"])
    assert last in gates[first]["DependsOn"]
    # The job's pods ask for exactly what the gate waits to see allocatable (a whole node), or
    # for one slice of those the gate waits for (a job on a MIG slice).
    if "sample-job" in s.templates:
        job = next(o for o in s.manifests("sample-job") if o["kind"] == "HyperPodPyTorchJob")
        template = job["spec"]["replicaSpecs"][0]["template"]["spec"]
        requests = template["containers"][0]["resources"]["requests"]
        wanted = groups[s.settings.sample_job.instance_group]["Resources"]
        if s.settings.sample_job.gpu_partition:
            devices = {r: n for r, n in requests.items() if "/" in r}
            assert devices == {f"nvidia.com/mig-{s.settings.sample_job.gpu_partition}": 1} and set(devices) <= set(wanted)
        else:
            assert {r: str(requests[r]) for r in wanted} == wanted
        manifest = json.loads((s.outdir / "manifest.json").read_text())
        assert f"{s.settings.prefix}-{s.settings.env_name}-hyperpod" in _all_dependencies(manifest, f"{s.settings.prefix}-{s.settings.env_name}-sample-job")


def _all_dependencies(manifest: dict, artifact: str) -> set[str]:
    out, todo = set(), [artifact]
    while todo:
        for dep in manifest["artifacts"][todo.pop()].get("dependencies", []):
            if dep not in out:
                out.add(dep)
                todo.append(dep)
    return out


def test_the_accelerator_gate_may_list_nodes_and_nothing_else(synth):
    s = synth("prod")
    (access,) = [r for r in s.resources("hyperpod", "AWS::EKS::AccessEntry").values()]
    assert access["Properties"]["KubernetesGroups"] == [readiness.NODE_READERS]
    assert "AccessPolicies" not in access["Properties"]
    rbac = readiness.node_reader_rbac()
    (role,) = [o for o in rbac if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    (binding,) = [o for o in rbac if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": readiness.NODE_READERS}]
    # Its check runs in the VPC, where a private endpoint answers.
    checks = [r for k, r in s.resources("hyperpod", "AWS::Lambda::Function").items() if k.startswith("AcceleratorsReadyIsComplete")]
    assert checks and "VpcConfig" in checks[0]["Properties"]


def test_the_hyperpod_cluster_waits_for_the_policies_its_nodes_assume(synth):
    # The quick setup (sagemaker-iam-role-template.yaml) writes the node grants into the role,
    # so the cluster's reference to the role orders them; ours are attached managed policies.
    for env in ("prod", "karpenter"):
        s = synth(env)
        (cluster,) = s.resources("hyperpod", "AWS::SageMaker::Cluster").values()
        policies = {k for k, r in s.resources("hyperpod", "AWS::IAM::ManagedPolicy").items()
                    if any(k2 in json.dumps(r["Properties"].get("Roles", [])) for k2 in ("ExecutionRole", "AutoscalerRole"))}
        assert policies and policies <= set(cluster["DependsOn"]), (env, policies)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_node_gate_follows_the_cluster_and_asks_for_every_group(synth, env):
    s = synth(env)
    (gate_id, gate), = [(k, r) for k, r in s.resources("hyperpod", "Custom::HyperPodNodesReady").items() if r["Properties"]["Link"].startswith("1/")]
    (cluster_id,) = s.resources("hyperpod", "AWS::SageMaker::Cluster")
    props = gate["Properties"]
    assert cluster_id in gate["DependsOn"]
    assert props["InstanceGroups"] == {g.name: str(g.count) for g in s.settings.hyperpod.instance_groups}
    assert props["Link"].startswith("1/")
    assert props["ClusterName"] == s.settings.hyperpod_cluster_name
    # Its only grant reads nodes of this account's clusters in this region.
    policies = [p for p in s.resources("hyperpod", "AWS::IAM::Policy").values() if "sagemaker:ListClusterNodes" in json.dumps(p)]
    (policy,) = policies
    (st,) = [st for st in policy["Properties"]["PolicyDocument"]["Statement"] if st["Action"] == "sagemaker:ListClusterNodes"]
    assert st["Resource"] == f"arn:aws:sagemaker:{s.settings.region}:{s.settings.account}:cluster/*"
    # Every later stack needs nodes: each depends on the hyperpod stack, gate included.
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    assert f"hyperpod-{env}-hyperpod" in manifest["artifacts"][f"hyperpod-{env}-addons"]["dependencies"]


def test_each_team_namespace_is_waited_for_after_its_quota_and_before_the_job(synth):
    s = synth("prod")
    gates = {r["Properties"]["ObjectName"]: r for r in s.resources("addons", "Custom::AWSCDK-EKS-KubernetesObjectValue").values()
             if r["Properties"]["ObjectType"] == "namespace"}
    # What task governance creates for each team (FACTS: hyperpod-ns-<team>).
    assert set(gates) == {"hyperpod-ns-ml-research", "hyperpod-ns-ml-production"}
    quotas = {r["Properties"]["ComputeQuotaTarget"]["TeamName"]: k for k, r in s.resources("addons", "AWS::SageMaker::ComputeQuota").items()}
    for team, quota_id in quotas.items():
        assert gates[f"hyperpod-ns-{team}"]["Properties"]["JsonPath"] == ".status.phase"
        assert quota_id in gates[f"hyperpod-ns-{team}"]["DependsOn"]
    # The job's stack starts only once the addons stack, these waits included, is done.
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    assert "hyperpod-prod-addons" in manifest["artifacts"]["hyperpod-prod-sample-job"]["dependencies"]


# ---------------------------------------------------------------- access and exposure


def _problems(patch: dict, env: str = "dev") -> tuple[list[str], list[str]]:
    try:
        return [], config.load_settings(patched_context(env, patch), env)[1]
    except config.ConfigError as err:
        return err.problems, err.warnings


def test_a_deploy_without_an_admin_principal_is_refused_with_how_to_find_one():
    errors, _ = _problems({"eks": {"admin_principal_arns": []}})
    (line,) = [e for e in errors if "eks.admin_principal_arns" in e]
    assert "aws sts get-caller-identity" in line


def test_an_sts_session_arn_is_refused_with_the_role_arn_to_use_instead():
    errors, _ = _problems({"eks": {"admin_principal_arns": ["arn:aws:sts::111111111111:assumed-role/Admin/alice"]}})
    assert any("arn:aws:iam::111111111111:role/Admin" in e and "STS session" in e for e in errors)


def test_an_endpoint_open_to_the_internet_is_an_error_where_stacks_are_protected_and_a_warning_elsewhere():
    open_endpoint = {"eks": {"endpoint_access": "public_and_private", "public_access_cidrs": ["0.0.0.0/0"]}}
    errors, _ = _problems(open_endpoint, env="prod")
    assert any(e.startswith("prod: eks.public_access_cidrs:") and "0.0.0.0/0" in e for e in errors)
    errors, warnings = _problems(open_endpoint, env="dev")
    assert not errors and any("eks.public_access_cidrs" in w for w in warnings)
    assert not _problems({"eks": {"endpoint_access": "public_and_private", "public_access_cidrs": ["203.0.113.0/24"]}}, "prod")[0]


def test_warnings_are_still_shown_when_there_are_errors():
    errors, warnings = _problems({"eks": {"version": "1.34"}, "sample_job": {"nodes": 99}})
    assert errors and any("eks.version" in w for w in warnings)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_cluster_stack_prints_the_commands_to_reach_the_cluster(synth, env):
    s = synth(env)
    outputs = {k: v["Value"] for k, v in s.templates["cluster"]["Outputs"].items() if not k.startswith("Exports")}
    text = json.dumps(outputs)
    assert f"aws eks update-kubeconfig --region {s.settings.region} --name {s.settings.eks_cluster_name}" in text
    assert "kubectl get nodes" in text
    assert s.settings.eks.admin_principal_arns[0] in text


# ---------------------------------------------------------------- updates and teardown


def _exports(s) -> set[str]:
    return {o["Export"]["Name"] for t in s.templates.values() for o in t.get("Outputs", {}).values() if "Export" in o}


def _imports(template: dict) -> set[str]:
    return set(re.findall(r'"Fn::ImportValue": "([^"]+)"', json.dumps(template)))


def test_switching_the_sample_job_off_keeps_every_export_it_imports(synth):
    # FACTS: a strong reference's export disappears with its consumer; CloudFormation then
    # refuses the producer's update while the deployed consumer still imports it. (Task
    # governance lives in the addons stack, so switching it off removes no stack.)
    full = synth("prod")
    without = synth("prod", {"sample_job": {"enabled": False}})
    assert "sample-job" not in without.templates
    assert _imports(full.templates["sample-job"]) <= _exports(without)


def _retained(template: dict) -> set[str]:
    return {k for k, r in template["Resources"].items() if r.get("DeletionPolicy") == "Retain"}


def _references(s, suffix: str, resource: dict) -> set[tuple[str, str]]:
    """(stack, logical id) of every resource `resource` refers to, imports followed."""
    def refs(value) -> set[str]:
        return set(re.findall(r'"(?:Ref|Fn::GetAtt)": \["?([A-Za-z0-9]+)', json.dumps(value)))

    props = resource.get("Properties", {})
    out = {(suffix, lid) for lid in refs(props) | set(resource.get("DependsOn", []))}
    for name in re.findall(r'"Fn::ImportValue": "([^"]+)"', json.dumps(props)):
        producer, exported = s.exported(name)
        out |= {(producer, lid) for lid in refs(exported)}
    return {(st, lid) for st, lid in out if lid in s.templates[st]["Resources"]}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_no_retained_resource_sits_on_a_resource_that_teardown_deletes(synth, env):
    # FACTS: a kept resource whose VPC, subnets or security group are deleted fails the delete.
    s = synth(env)
    blocking = []
    for suffix, template in s.templates.items():
        for lid in _retained(template):
            for stack, ref in _references(s, suffix, template["Resources"][lid]):
                if ref not in _retained(s.templates[stack]):
                    blocking.append((suffix, lid, stack, ref))
    assert blocking == []


def test_late_access_logs_cannot_refill_the_emptied_log_bucket(synth):
    # S3 delivers server access logs late (best effort, hours). aws-cdk-lib's auto-delete handler
    # (custom-resource-handlers/dist/aws-s3/auto-delete-objects-handler) first adds a bucket
    # policy statement denying s3:PutObject to every principal, log delivery included, then
    # empties the bucket: nothing lands between emptying and DeleteBucket.
    source = cdk_lib_source("aws-s3/auto-delete-objects-handler/index.js")
    assert 'Principal:"*",Effect:"Deny",Action:["s3:PutObject"]' in source
    assert source.index("s3:PutObject") < source.index("listObjectVersions")
    s = synth("dev")
    (log_bucket,) = [k for k in s.resources("cluster", "AWS::S3::Bucket") if k.startswith("AccessLogsBucket")]
    deleters = [r for r in s.resources("cluster", "Custom::S3AutoDeleteObjects").values()
                if r["Properties"]["BucketName"] == {"Ref": log_bucket}]
    assert deleters


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_a_kept_resource_with_a_fixed_name_can_be_adopted_by_the_next_deploy(synth, env):
    # After `cdk destroy` a kept bucket or log group still holds its name, and creating it again
    # fails ("already exists"). `cdk deploy --import-existing-resources` (CloudFormation's
    # ImportExistingResources: resources whose names the template fixes) adopts it, for types
    # that support import: a read handler in the type's registry schema (cfn-lint ships them).
    from infra import cfn_schema

    s = synth(env)
    fixed = []
    for suffix, template in s.templates.items():
        for lid in _retained(template):
            resource = template["Resources"][lid]
            schema = cfn_schema.resource(resource["Type"])
            keys = [p.rsplit("/", 1)[-1] for p in schema.get("primaryIdentifier", [])]
            if keys and all(isinstance(resource["Properties"].get(k), str) for k in keys):
                assert "read" in schema.get("handlers", {}), (suffix, lid)
                fixed.append(resource["Properties"][keys[0]])
    assert bool(fixed) == s.settings.protection.retain_data, fixed
    assert "--import-existing-resources" in (ROOT / "docs" / "deploying.md").read_text()


def test_the_eks_cluster_is_deleted_on_teardown_even_in_prod(synth):
    (cluster,) = synth("prod").resources("cluster", "AWS::EKS::Cluster").values()
    assert cluster.get("DeletionPolicy", "Delete") == "Delete"


# ---------------------------------------------------------------- network and chart


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_nodes_may_send_anywhere_as_both_references_allow(synth, env):
    # awsome nested-stacks/security-group-stack.yaml: all traffic to itself and to 0.0.0.0/0.
    t = synth(env).templates["network"]["Resources"]
    (sg_id,) = [k for k, r in t.items() if r["Type"] == "AWS::EC2::SecurityGroup" and k.startswith("EfaSecurityGroup")]
    egress = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    ours = [e for e in egress if e["GroupId"] == {"Fn::GetAtt": [sg_id, "GroupId"]}]
    assert {"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"} in [{k: e[k] for k in ("IpProtocol", "CidrIp") if k in e} for e in ours]


def _chart_keys() -> tuple[str, set[str]]:
    lines = (ROOT / "tests/fixtures/hyperpod_chart_value_keys.txt").read_text().splitlines()
    (revision,) = re.findall(r"revision ([0-9a-f]{40})", "\n".join(lines[:3]))
    return revision, {line for line in lines if line and not line.startswith("#")}


def test_the_chart_is_pinned_to_the_revision_its_value_keys_were_read_from():
    revision, _ = _chart_keys()
    assert CONTEXT["defaults"]["hyperpod"]["helm_chart"]["revision"] == revision == "a00b22d17ea928a6e39a43bd2efdafe01b1005ea"


@pytest.mark.parametrize("env", [*ENVIRONMENTS, "mig"])
def test_chart_values_set_only_keys_the_chart_has(env):
    from tests.conftest import CAPABILITIES, patched_context

    _, keys = _chart_keys()
    settings = config.load_settings(patched_context("dev", CAPABILITIES[env]) if env in CAPABILITIES else CONTEXT, "dev" if env in CAPABILITIES else env)[0]

    def leaves(value, prefix=""):
        if isinstance(value, dict):
            return {p for k, v in value.items() for p in leaves(v, f"{prefix}{k}.")}
        return {prefix.rstrip(".")}

    assert leaves(chart_values(settings)) <= keys


def test_the_review_shows_an_endpoint_open_to_the_internet(synth):
    from cli import review

    report = review.build(synth("dev").outdir, with_lint=False)
    assert any("eks.public_access_cidrs" in w and "0.0.0.0/0" in w for w in report["warnings"])
    assert "## Warnings" in review.to_markdown(report)


# ---------------------------------------------------------------- images in a closed network


def _chart_values_in_template(s) -> dict:
    (chart_resource,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
    return json.loads(chart_resource["Properties"]["Values"])


@pytest.mark.parametrize("env", ["closed-network", "dev"])
def test_a_network_without_nat_pulls_every_chart_image_from_ecr_in_its_own_region(synth, env):
    # ECR's VPC endpoints serve this region's private registries only, not public ECR or other
    # registries, and a pull-through cache needs a NAT for its first pull (ECR user guide, VPC
    # endpoints). The chart's images come from its values: infra/chart.py CHART_IMAGES, read
    # from the chart at the pinned revision and checked again by `make hyperpod-chart`.
    s = synth(env)
    values = _chart_values_in_template(s)
    rendered = chart.rendered_images(values, s.settings.region)
    own = f"{s.settings.account}.dkr.ecr.{s.settings.region}.amazonaws.com/"
    if env == "dev":  # with a NAT the chart keeps its own registries
        assert not s.settings.mirrors_chart_images and any(not uri.startswith(own) for uri in rendered.values())
        assert not s.resources("cluster", "Custom::CDKECRDeployment")
        return
    assert s.settings.mirrors_chart_images
    assert rendered and all(uri.startswith(own) for uri in rendered.values()), rendered
    # Each is a copy, made before the chart, of what the chart would pull.
    repositories = {k: r["Properties"]["RepositoryName"] for k, r in s.resources("cluster", "AWS::ECR::Repository").items()}
    copies = s.resources("cluster", "Custom::CDKECRDeployment")
    (chart_id,) = s.resources("cluster", "Custom::AWSCDK-EKS-HelmChart")
    chart_depends = s.templates["cluster"]["Resources"][chart_id]["DependsOn"]
    for image in chart.CHART_IMAGES:
        if image.subchart not in rendered:
            continue
        (copy_id, copy) = next((k, c) for k, c in copies.items() if c["Properties"]["SrcImage"] == f"docker://{image.upstream(s.settings.region)}")
        (repo_id,) = [k for k in repositories if k in json.dumps(copy["Properties"]["DestImage"])]
        assert rendered[image.subchart] == f"{own}{repositories[repo_id]}:{image.tag}"
        assert json.dumps(copy["Properties"]["DestImage"]).endswith(f':{image.tag}"]]}}')
        assert copy["Properties"]["CopyImageIndex"] in (True, "true")  # arm64 hosts too (GB200)
        assert copy_id in chart_depends


def test_no_image_is_copied_without_credentials_from_a_registry_that_limits_anonymous_pulls(synth):
    # Docker Hub, "Usage and limits": 10 pulls an hour per IPv4 address without credentials; the
    # copier is a Lambda whose outbound address AWS shares. A refused pull fails the cluster stack,
    # whose rollback deletes the control plane: where images are copied, config refuses a Docker
    # Hub source without credentials (tests/bad_inputs), and every copy made carries them.
    assert set(chart.ANONYMOUS_PULL_LIMITS) == {"docker.io/"}
    limited = [i for i in chart.CHART_IMAGES if i.source.startswith(tuple(chart.ANONYMOUS_PULL_LIMITS))]
    assert {i.subchart for i in limited} == {"training-operators", "mpi-operator"}
    seen = 0
    for name in GATED:
        for copy in synth(name).resources("cluster", "Custom::CDKECRDeployment").values():
            source = copy["Properties"]["SrcImage"].removeprefix("docker://")
            if source.startswith(tuple(chart.ANONYMOUS_PULL_LIMITS)):
                seen += 1
                assert copy["Properties"].get("SrcCreds"), (name, source)
    assert seen == len(limited)  # closed-network copies both, with credentials


def test_a_device_plugin_whose_image_no_value_can_move_is_refused_where_images_are_copied():
    from tests.conftest import CAPABILITIES

    patch = config.deep_merge(CAPABILITIES["closed-network"], {
        "hyperpod": {"instance_groups": [{"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                                         {"name": "trn", "instance_type": "ml.trn1.32xlarge", "count": 1}]},
        "governance": {"teams": []}, "sample_job": {"enabled": False}})
    errors, _ = _problems(patch)
    (line,) = [e for e in errors if e.startswith("dev: hyperpod.instance_groups:")]
    assert "public.ecr.aws/neuron/neuron-device-plugin:2.19.16.0" in line and "NAT" in line


def test_device_plugins_follow_the_instance_groups_and_tolerate_their_taints(synth):
    # The chart's device plugins schedule on the types in their values and tolerate only the
    # taints listed there (chart values.yaml at the pinned revision): a group tainted by config
    # would never have its GPUs advertised.
    values = _chart_values_in_template(synth("cluster-options"))
    assert values["nvidia-device-plugin"]["devicePlugin"]["enabled"] is True
    assert values["neuron-device-plugin"]["devicePlugin"]["enabled"] is False
    reserved = {"key": "reserved", "operator": "Exists", "effect": "NoSchedule"}
    for plugin, defaults in chart.DEVICE_PLUGIN_TOLERATIONS.items():
        assert values[plugin]["tolerations"] == defaults + [reserved]
    assert "tolerations" not in _chart_values_in_template(synth("dev"))["nvidia-device-plugin"]


# ---------------------------------------------------------------- shared storage


def test_switching_fsx_off_later_keeps_every_export_the_addons_stack_imports(synth):
    # FACTS: a strong reference's export disappears with what it exports; CloudFormation then
    # refuses the cluster stack's update while the deployed addons stack imports it.
    with_fsx, without = synth("fsx"), synth("dev")
    assert _imports(with_fsx.templates["addons"]) <= _exports(without)
    # The file system reaches the addons stack as SSM parameters the cluster stack writes.
    names = {r["Properties"].get("Name") for r in with_fsx.resources("cluster", "AWS::SSM::Parameter").values()}
    read = {p["Default"] for p in with_fsx.templates["addons"].get("Parameters", {}).values()
            if p["Type"] == "AWS::SSM::Parameter::Value<String>" and "/fsx/" in p["Default"]}
    assert len(read) == 3 and read <= names


def test_a_kept_file_system_is_backed_up_and_deleted_so_the_network_can_go(synth):
    # FACTS (retain inside delete): a retained file system keeps its network interfaces in the
    # HyperPod subnet, and the network stack's deletion fails. Where data is kept, a final
    # backup (which outlives the file system) is taken before the file system is deleted.
    s = synth("closed-network")
    assert s.settings.protection.retain_data
    (fs_id, fs), = s.resources("cluster", "AWS::FSx::FileSystem").items()
    assert fs["DeletionPolicy"] == "Delete" and fs["UpdateReplacePolicy"] == "Retain"
    (backup,) = s.resources("cluster", "Custom::FsxFinalBackup").values()
    # It refers to the file system, so CloudFormation deletes it (taking the backup) first.
    assert backup["Properties"]["FileSystemId"] == {"Ref": fs_id}


def test_the_file_system_is_lustre_over_tcp_so_no_efa_client_setup_or_fsx_endpoint_is_needed(synth):
    # FSx for Lustre guide: a file system speaks Lustre over EFA only if created with EfaEnabled,
    # and then clients need the EFA setup the awsome on_create_main.sh downloads at boot. The FSx
    # CSI driver (kubernetes-sigs/aws-fsx-csi-driver pkg/driver/controller.go) calls the FSx API
    # in CreateVolume, DeleteVolume, ValidateVolumeCapabilities and ControllerExpandVolume only:
    # static volumes (ours: addons/fsx_csi.py) need no `fsx` endpoint in a closed network.
    for env in ("fsx", "closed-network"):
        s = synth(env)
        (fs,) = s.resources("cluster", "AWS::FSx::FileSystem").values()
        assert "EfaEnabled" not in fs["Properties"]["LustreConfiguration"]
        pvs = [o for o in s.manifests("addons") if o["kind"] == "PersistentVolume"]
        assert pvs and all(pv["spec"]["storageClassName"] == "" for pv in pvs)  # static, no provisioner
    assert "fsx" not in synth("closed-network").settings.network.endpoint_services


def _kept_with_fixed_names(s) -> dict[str, dict]:
    """Stack suffix -> a template of its kept resources whose names the template fixes, each
    with its literal properties only (the name, the retention: what moto can create)."""
    out: dict[str, dict] = {}
    for suffix, template in s.templates.items():
        for lid in _retained(template):
            resource = template["Resources"][lid]
            name_key = {"AWS::S3::Bucket": "BucketName", "AWS::Logs::LogGroup": "LogGroupName"}.get(resource["Type"])
            if name_key and isinstance(resource["Properties"].get(name_key), str):
                literal = {k: v for k, v in resource["Properties"].items() if isinstance(v, (str, int))}
                out.setdefault(suffix, {"Resources": {}})["Resources"][lid] = {**resource, "Properties": literal}
    return out


def test_an_environment_destroyed_deploys_again_over_what_it_kept_as_preflight_and_the_readme_say(synth):
    # prod keeps its buckets and log groups. On moto (CloudFormation honours DeletionPolicy Retain,
    # S3 and CloudWatch Logs refuse a name in use): deploy what prod keeps under a fixed name,
    # destroy, and see what the next deploy meets, what `preflight` says about it, and that the
    # README's way through (`cdk deploy --import-existing-resources`) meets every requirement
    # CloudFormation documents for importing them. moto does not implement ImportExistingResources
    # (it creates regardless), so the import itself is held to its documented requirements, not run.
    import boto3
    from moto import mock_aws

    from cli import preflight
    from infra import cfn_schema

    s = synth("prod")
    settings = s.settings
    kept = _kept_with_fixed_names(s)
    named = {(kind, name, stack) for kind, name, stack in preflight.retained_names(settings)}
    # preflight's list is exactly what the templates keep under a fixed name.
    in_templates = {
        ("bucket" if r["Type"] == "AWS::S3::Bucket" else "log group", r["Properties"].get("BucketName") or r["Properties"]["LogGroupName"],
         settings.stack_name(suffix))
        for suffix, t in kept.items() for r in t["Resources"].values()
    }
    assert named == in_templates, named ^ in_templates
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name=settings.region)
        stacks = {settings.stack_name(suffix): json.dumps(t) for suffix, t in kept.items()}
        for name, body in stacks.items():
            cfn.create_stack(StackName=name, TemplateBody=body)
            assert cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
        for name in stacks:  # cdk destroy
            cfn.delete_stack(StackName=name)
        aws = preflight.Clients(boto3.Session(region_name=settings.region), settings.region)
        results = preflight.check_retained_names(settings, aws)
        assert {r.check for r in results} == {f"{kind} {name}" for kind, name, _ in named}
        for r in results:  # still there, outside any stack, and preflight says how to go on
            assert r.status == "fail" and f"cdk deploy --all -c env={settings.env_name} --import-existing-resources" in r.action
        # A deploy that does not adopt them fails on the first one it creates.
        with pytest.raises(Exception, match="BucketAlreadyExists|ResourceAlreadyExists|already exists"):
            for name, body in stacks.items():
                cfn.create_stack(StackName=f"{name}-again", TemplateBody=body)
        live = {r["PhysicalResourceId"] for st in cfn.describe_stacks()["Stacks"] if not st["StackName"].endswith("-again")
                for r in cfn.describe_stack_resources(StackName=st["StackName"])["StackResources"]}
    # CloudFormation, "Import AWS resources into a CloudFormation stack automatically": a static custom
    # name in the template, DeletionPolicy Retain or RetainExceptOnCreate, in no other stack, a type
    # that supports import (a read handler in its registry schema), its primary identifier in the template.
    for suffix, t in kept.items():
        for lid, r in t["Resources"].items():
            schema = cfn_schema.resource(r["Type"])
            keys = [p.rsplit("/", 1)[-1] for p in schema["primaryIdentifier"]]
            assert all(isinstance(r["Properties"].get(k), str) for k in keys), (suffix, lid)
            assert r["DeletionPolicy"] in ("Retain", "RetainExceptOnCreate") and "read" in schema["handlers"]
            assert r["Properties"][keys[0]] not in live
    # The CDK CLI (node_modules/aws-cdk) passes the flag to CreateChangeSet as ImportExistingResources
    # with its default change-set method (`--method=direct` refuses the flag).
    cli = (ROOT / "node_modules" / "aws-cdk" / "lib" / "index.js").read_text()
    assert "ImportExistingResources: importExistingResources," in cli
    assert 'importExistingResources: "--import-existing-resources"' in cli
