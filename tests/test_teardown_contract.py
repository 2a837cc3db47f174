"""What an update, a teardown and the deploy after it depend on, each held against its source
(CloudFormation's documented import requirements, its schemas in cfn-lint, moto's CloudFormation,
S3 and CloudWatch Logs): every export a later stack imports kept, nothing retained on what
teardown deletes, kept data adoptable by the next deploy, shared storage backed up and gone
before the network."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ENVIRONMENTS, cdk_lib_source

ROOT = Path(__file__).resolve().parent.parent


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
    # docs/deploying.md's way through (`cdk deploy --import-existing-resources`) meets every requirement
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
