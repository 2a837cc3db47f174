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


# ---------------------------------------------------------------- what a redeploy adopts, followed to its grants


def _placeholders(create) -> tuple[dict, dict]:
    """An AwsCustomResource's call (its `Create`: JSON with tokens joined in) as a dict whose
    tokens are placeholder strings, and the placeholders' tokens."""
    parts = create["Fn::Join"][1] if isinstance(create, dict) else [create]
    tokens = {f"@{i}@": p for i, p in enumerate(parts) if not isinstance(p, str)}
    text = "".join(p if isinstance(p, str) else f"@{i}@" for i, p in enumerate(parts))
    return json.loads(text), tokens


def _restore(value, tokens: dict):
    if isinstance(value, dict):
        return {k: _restore(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, tokens) for v in value]
    return tokens.get(value, value)


class _Redeploy:
    """`cdk destroy` then `cdk deploy --import-existing-resources` of one environment, as
    CloudFormation documents them. Every resource of the earlier deploy is `("earlier", stack,
    logical id)`, of the new one `("new", ...)`. The import adopts each kept resource whose
    primary identifier the template fixes, as it is: its properties name the earlier deploy's
    resources. Every other kept resource stays outside the stacks, and the template makes a new
    one in its place. Then the new deploy's calls that set an adopted resource's settings run."""

    # The API call that sets each setting of an adopted resource: (SDK service, action) ->
    # (resource type, its CloudFormation property, the call's parameter naming the resource, the
    # property naming it). S3 API reference: PutBucketEncryption sets the bucket's default
    # encryption, PutBucketLogging its server access logging; CloudWatch Logs: AssociateKmsKey.
    SETTERS = {
        ("S3", "putBucketEncryption"): ("AWS::S3::Bucket", "BucketEncryption", "Bucket", "BucketName"),
        ("S3", "putBucketLogging"): ("AWS::S3::Bucket", "LoggingConfiguration", "Bucket", "BucketName"),
        ("CloudWatchLogs", "associateKmsKey"): ("AWS::Logs::LogGroup", "KmsKeyId", "logGroupName", "LogGroupName"),
    }
    # aws-sdk-js-v3's client names (what AwsCustomResource's `service` takes) as botocore's.
    BOTOCORE = {"S3": "s3", "CloudWatchLogs": "logs"}

    def __init__(self, s):
        from infra import cfn_schema

        self.s = s
        self.adopted: dict[tuple[str, str], dict] = {}  # (stack, lid) -> its actual properties
        for suffix, template in s.templates.items():
            for lid in _retained(template):
                resource = template["Resources"][lid]
                schema = cfn_schema.resource(resource["Type"])
                keys = [p.rsplit("/", 1)[-1] for p in schema.get("primaryIdentifier", [])]
                if keys and all(isinstance(resource["Properties"].get(k), str) for k in keys) and "read" in schema.get("handlers", {}):
                    self.adopted[(suffix, lid)] = self._resolved(suffix, resource["Properties"], "earlier")
        self.set_by: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for suffix, template in s.templates.items():
            for lid, r in template["Resources"].items():
                if r["Type"] == "Custom::AWS":
                    self._run(suffix, lid, r)

    def identity(self, suffix: str, value, generation: str):
        """What `value` (a Ref, GetAtt or ImportValue, imports followed) names, adopted
        resources keeping their earlier identity; anything else as it is."""
        if isinstance(value, dict) and len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Fn::ImportValue":
                producer, exported = self.s.exported(arg)
                return self.identity(producer, exported, generation)
            if fn in ("Ref", "Fn::GetAtt"):
                lid = arg if fn == "Ref" else arg[0]
                if lid in self.s.templates[suffix]["Resources"]:
                    kept = (suffix, lid) in self.adopted
                    return ("earlier" if kept else generation, suffix, lid)
        return value

    def _resolved(self, suffix: str, value, generation: str):
        named = self.identity(suffix, value, generation)
        if named is not value:
            return named
        if isinstance(value, dict):
            return {k: self._resolved(suffix, v, generation) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolved(suffix, v, generation) for v in value]
        return value

    def _run(self, suffix: str, lid: str, resource: dict) -> None:
        import botocore.session
        from botocore.validate import ParamValidator

        call, tokens = _placeholders(resource["Properties"]["Create"])
        assert resource["Properties"].get("Update") == resource["Properties"]["Create"], lid  # on every update too
        params = call["parameters"]
        if (call["service"], call["action"]) not in self.SETTERS:
            return
        # The call is one the service takes: botocore's model of the same API.
        model = botocore.session.get_session().get_service_model(self.BOTOCORE[call["service"]])
        operation = model.operation_model(call["action"][0].upper() + call["action"][1:])
        report = ParamValidator().validate(params, operation.input_shape)
        assert not report.has_errors(), report.generate_report()
        type_, prop, by, name_prop = self.SETTERS[(call["service"], call["action"])]
        target = _restore(params[by], tokens)
        matches = [
            key for key in self.adopted
            if self.s.templates[key[0]]["Resources"][key[1]]["Type"] == type_
            and (self.identity(suffix, target, "new") == ("earlier", *key)
                 or self.s.templates[key[0]]["Resources"][key[1]]["Properties"].get(name_prop) == target)
        ]
        assert len(matches) == 1, (lid, target)
        (key,) = matches
        value = self._resolved(suffix, _restore(params, tokens), "new")
        self.adopted[key][prop] = self._as_property(prop, value)
        self.set_by.setdefault(key, []).append((suffix, lid))

    @staticmethod
    def _as_property(prop: str, params: dict):
        """The API's parameters as the CloudFormation property they set (the same settings in
        the S3 API reference's and the AWS::S3::Bucket schema's shapes)."""
        if prop == "BucketEncryption":
            return {"ServerSideEncryptionConfiguration": [
                {"ServerSideEncryptionByDefault": rule["ApplyServerSideEncryptionByDefault"], "BucketKeyEnabled": rule["BucketKeyEnabled"]}
                for rule in params["ServerSideEncryptionConfiguration"]["Rules"]]}
        if prop == "LoggingConfiguration":
            enabled = params["BucketLoggingStatus"]["LoggingEnabled"]
            return {"DestinationBucketName": enabled["TargetBucket"], "LogFilePrefix": enabled["TargetPrefix"]}
        return params["kmsKeyId"]

    def stale(self, key: tuple[str, str]) -> list:
        """What the adopted resource still names of the earlier deploy that the redeploy replaced."""
        found = []

        def walk(value):
            if isinstance(value, tuple):
                if value[0] == "earlier" and value[1:] not in self.adopted:
                    found.append(value)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(self.adopted[key])
        return found

    def policies(self):
        """(stack, lid, its statements resolved, new generation) of every IAM policy the new deploy makes."""
        for suffix, template in self.s.templates.items():
            for lid, r in template["Resources"].items():
                if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                    statements = r["Properties"]["PolicyDocument"]["Statement"]
                    yield suffix, lid, [self._resolved(suffix, st, "new") for st in statements]


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def fnmatch_arn(text: str, pattern: str) -> bool:
    """IAM's wildcard match (`*` and `?`), case-sensitive."""
    import fnmatch

    return fnmatch.fnmatchcase(text, pattern)


def _allows(statements: list[dict], action: str, key, *, via_s3_for: str | None = None, region: str | None = None) -> bool:
    """Whether `statements` allow `action` on the key `key` (an identity, or an ARN in this
    account), where the call comes through S3 (of `region`, else the key ARN's) for an object of
    bucket `via_s3_for`."""
    import fnmatch

    for st in statements:
        if st.get("Effect") != "Allow" or not any(fnmatch.fnmatchcase(action, a) for a in _listed(st["Action"])):
            continue
        for resource in _listed(st["Resource"]):
            if resource == key or (isinstance(resource, str) and isinstance(key, str) and fnmatch.fnmatchcase(key, resource)):
                conditions = st.get("Condition", {})
                if not conditions:
                    return True
                # Through S3 for that bucket's object: kms:ViaService must name S3 of the key's region, and
                # an encryption-context condition, where there is one, must admit the object. Any other
                # condition key is not one this model can settle, so it does not count as allowing.
                equals, likes = conditions.get("StringEquals", {}), conditions.get("StringLike", {})
                if via_s3_for and set(conditions) <= {"StringEquals", "StringLike"} and set(equals) == {"kms:ViaService"} \
                        and set(likes) <= {"kms:EncryptionContext:aws:s3:arn"}:
                    region = region or key.split(":")[3]
                    context = _listed(likes.get("kms:EncryptionContext:aws:s3:arn", []))
                    if equals["kms:ViaService"] == f"s3.{region}.amazonaws.com" and (
                            not likes or any(fnmatch.fnmatchcase(via_s3_for, c) for c in context)):
                        return True
    return False


def _names_bucket(value, bucket: tuple, bucket_name: str) -> bool:
    text = json.dumps(value, default=list)
    return json.dumps(list(bucket)) in text or f":::{bucket_name}/" in text or f':::{bucket_name}"' in text


@pytest.mark.parametrize("env", [*ENVIRONMENTS, "closed-network"])
def test_what_a_redeploy_adopts_is_usable_by_the_stacks_that_adopt_it(synth, env):
    # FACTS (imports adopt what is there): CloudFormation's import keeps each adopted resource's
    # actual configuration ("Import AWS resources into a CloudFormation stack automatically":
    # drift detection "after the import is complete"). What prod keeps under a fixed name comes
    # back naming the earlier deploy's keys and log bucket; its keys and workspace cannot come
    # back at all: their primary identifiers are read-only (cfn-lint's schemas), so no template
    # fixes them and the redeploy makes new ones. Follow each adopted resource to what the new
    # templates grant on what it actually uses.
    from infra import cfn_schema

    s = synth(env)
    redeploy = _Redeploy(s)
    assert bool(redeploy.adopted) == s.settings.protection.retain_data
    for type_ in ("AWS::KMS::Key", "AWS::APS::Workspace"):
        schema = cfn_schema.resource(type_)
        assert {p.rsplit("/", 1)[-1] for p in schema["primaryIdentifier"]} <= {p.rsplit("/", 1)[-1] for p in schema["readOnlyProperties"]}
    account, region = s.settings.account, s.settings.region
    for (suffix, lid), actual in redeploy.adopted.items():
        template = s.templates[suffix]["Resources"][lid]
        # Once the new deploy's calls have run, nothing it names is of the replaced earlier deploy.
        assert redeploy.stale((suffix, lid)) == [], (suffix, lid, redeploy.set_by.get((suffix, lid)))
        if template["Type"] == "AWS::S3::Bucket":
            name = template["Properties"]["BucketName"]
            (rule,) = actual["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            key = rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]
            # Whatever writes or reads the bucket's objects in the new deploy may use the key new
            # objects go under (S3 user guide, SSE-KMS: PUT needs kms:GenerateDataKey, GET kms:Decrypt) ...
            def does(statements, action):
                return any(st.get("Effect") == "Allow" and _names_bucket(st.get("Resource"), ("earlier", suffix, lid), name)
                           and any(fnmatch_arn(action, a) for a in _listed(st["Action"])) for st in statements)

            # aws-cdk-lib's upload (BucketDeployment) reads no object of its destination: its handler
            # runs `aws s3 sync` from the extracted asset to it, which lists the destination only.
            upload = cdk_lib_source("aws-s3-deployment/bucket-deployment-handler/index.py")
            assert 's3_command = ["s3", "sync"]' in upload and "s3_command.extend([contents_dir, s3_dest])" in upload
            users = [(plid, statements) for _, plid, statements in redeploy.policies()
                     if does(statements, "s3:GetObject") or does(statements, "s3:PutObject")]
            assert users, (suffix, lid)
            for plid, statements in users:
                if does(statements, "s3:PutObject"):
                    # SSE-KMS: S3 calls the key for the object's PUT, so a grant held to kms:ViaService S3 counts.
                    assert _allows(statements, "kms:GenerateDataKey", key, via_s3_for=f"arn:aws:s3:::{name}/x", region=region), (plid, key)
                if does(statements, "s3:GetObject") and not plid.startswith("CustomCDKBucketDeployment"):
                    assert _allows(statements, "kms:Decrypt", key, via_s3_for=f"arn:aws:s3:::{name}/x", region=region), (plid, key)
                    # ... and its readers the key an earlier deploy wrote under: kept, its id unknown to
                    # the template, so any key of the account, through S3, for this bucket's objects.
                    earlier = f"arn:aws:kms:{region}:{account}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
                    assert _allows(statements, "kms:Decrypt", earlier, via_s3_for=f"arn:aws:s3:::{name}"), plid
            # What writes them waits for the new default encryption: the upload, and the job.
            setters = {setter for _, setter in redeploy.set_by[(suffix, lid)]}
            for wlid, w in s.templates[suffix]["Resources"].items():
                if w["Type"] in ("Custom::CDKBucketDeployment", "Custom::AWSCDK-EKS-KubernetesResource") and (
                    {"Ref": lid} == w["Properties"].get("DestinationBucketName") or f"s3://{name}/" in json.dumps(w["Properties"])
                ):
                    assert setters <= set(w.get("DependsOn", [])), (wlid, setters)
            # That kept key lets IAM policies of the account grant it (its key policy as created).
            kept_key = redeploy.identity(suffix, template["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
                                         ["ServerSideEncryptionByDefault"]["KMSMasterKeyID"], "earlier")
            key_resource = s.templates[kept_key[1]]["Resources"][kept_key[2]]
            assert key_resource["DeletionPolicy"] == "Retain"
            assert any(st["Principal"] == {"AWS": f"arn:aws:iam::{account}:root"} and st["Action"] == "kms:*"
                       for st in key_resource["Properties"]["KeyPolicy"]["Statement"]), kept_key
            # Its access logs go to the new deploy's log bucket, which admits them.
            target = actual["LoggingConfiguration"]["DestinationBucketName"]
            assert target[0] == "new"
        elif template["Type"] == "AWS::Logs::LogGroup":
            # New events go under the new deploy's logs key; CloudWatch Logs decrypts earlier ones with
            # the key they were written under (AssociateKmsKey's API reference), which is kept and
            # still lets CloudWatch Logs use it for this group.
            name = template["Properties"]["LogGroupName"]
            for generation, key in (("new", actual["KmsKeyId"]), ("earlier", redeploy.identity(suffix, template["Properties"]["KmsKeyId"], "earlier"))):
                assert key[0] == generation, (lid, key)
                key_resource = s.templates[key[1]]["Resources"][key[2]]
                if generation == "earlier":
                    assert key_resource["DeletionPolicy"] == "Retain"
                logs = [st for st in key_resource["Properties"]["KeyPolicy"]["Statement"]
                        if st["Principal"] == {"Service": f"logs.{region}.amazonaws.com"} and "kms:Decrypt*" in st["Action"]]
                assert logs and all(
                    fnmatch_arn(f"arn:aws:logs:{region}:{account}:log-group:{name}", st["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
                    for st in logs
                ), lid
        else:
            pytest.fail(f"{template['Type']} {lid} is adopted by a redeploy and not followed here")
