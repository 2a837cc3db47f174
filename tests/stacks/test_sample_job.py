"""Sample-job stack: the job applied after the add-ons and team queues, its image, its checkpoint access."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ENVIRONMENTS


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_job_is_applied_after_the_addons_and_the_team_queues(synth, env):
    s = synth(env)
    manifest = json.loads((s.outdir / "manifest.json").read_text())
    deps = manifest["artifacts"][f"hyperpod-{env}-sample-job"]["dependencies"]
    assert f"hyperpod-{env}-addons" in deps  # the operator, Kueue, the quotas and the team namespaces


def test_manifest_applies_the_service_account_and_the_job(synth):
    objects = synth("prod").manifests("sample-job")
    assert [o["kind"] for o in objects] == ["ServiceAccount", "NetworkPolicy", "HyperPodPyTorchJob"]
    job = objects[2]
    assert job["metadata"]["namespace"] == "hyperpod-ns-ml-research"
    command = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    assert any(a.startswith("--checkpoint-dir=s3://") for a in command)


def test_image_is_built_from_training_unless_config_names_one(synth):
    s = synth("dev")
    job = s.manifests("sample-job")[-1]
    image = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["image"]
    assert "TOKEN" in image or "dkr.ecr" in image
    assets = json.loads((s.outdir / "hyperpod-dev-sample-job.assets.json").read_text())
    assert assets["dockerImages"]
    given = synth("dev", {"sample_job": {"image_uri": "public.ecr.aws/example/train:1"}})
    assert given.manifests("sample-job")[-1]["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["image"] == "public.ecr.aws/example/train:1"
    assert not json.loads((given.outdir / "hyperpod-dev-sample-job.assets.json").read_text()).get("dockerImages")


def test_checkpoint_bucket_is_encrypted_versioned_and_only_the_job_prefix_is_granted(synth):
    s = synth("dev")
    buckets = s.resources("sample-job", "AWS::S3::Bucket")
    (bucket_id, bucket), = buckets.items()
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    (policy,) = s.resources("sample-job", "AWS::IAM::ManagedPolicy").values()
    object_resources = [
        json.dumps(st["Resource"]) for st in policy["Properties"]["PolicyDocument"]["Statement"] if any("s3:PutObject" in a for a in st["Action"])
    ]
    assert object_resources and all("/llama3-1-8b-fsdp/*" in r for r in object_resources)


def test_job_role_is_pod_identity_for_the_job_service_account(synth):
    s = synth("dev")
    (assoc,) = s.resources("sample-job", "AWS::EKS::PodIdentityAssociation").values()
    assert assoc["Properties"]["Namespace"] == "hyperpod-ns-ml-research"
    assert assoc["Properties"]["ServiceAccount"] == "sample-job"
    (res_id,) = s.resources("sample-job", "Custom::AWSCDK-EKS-KubernetesResource")
    assert any(d.startswith("SampleJobPodIdentity") for d in s.templates["sample-job"]["Resources"][res_id]["DependsOn"])


def test_switching_the_job_off_deploys_the_platform_without_it(synth):
    s = synth("dev", {"sample_job": {"enabled": False}})
    assert "sample-job" not in s.templates and "addons" in s.templates


def test_job_writes_to_the_bucket_the_stack_creates_and_render_job_agrees(synth, capsys):
    import yaml

    from cli import main as cli

    s = synth("prod")
    ((bucket_id, bucket),) = s.resources("sample-job", "AWS::S3::Bucket").items()
    command = s.manifests("sample-job")[-1]["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    (uri,) = [a.split("=", 1)[1] for a in command if a.startswith("--checkpoint-dir=")]
    assert uri.startswith(f"s3://{bucket['Properties']['BucketName']}/")
    assert cli.main(["render-job", "-c", "env=prod", "--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1"]) == 0
    out, err = capsys.readouterr()
    rendered = list(yaml.safe_load_all(out))[-1]
    assert f"--checkpoint-dir={uri}" in rendered["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["command"]
    # The stack's one Pod Identity association is in the deployed team's namespace: a job rendered
    # for another team (as that team's kit says to) gets no credentials there, and is told so.
    (association,) = s.resources("sample-job", "AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["Namespace"] == rendered["metadata"]["namespace"] and "Pod Identity" not in err
    assert cli.main(["render-job", "-c", "env=prod", "--team", "ml-production", "--image", "111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1"]) == 0
    err = capsys.readouterr().err
    assert (f"warning: hyperpod-ns-ml-production has no Pod Identity role for service account sample-job (the sample-job stack made "
            f"one in {association['Properties']['Namespace']} only)") in err
    # the job starts after the bucket it writes to exists
    (job,) = s.resources("sample-job", "Custom::AWSCDK-EKS-KubernetesResource").values()
    assert bucket_id in job["DependsOn"]


def test_checkpoint_bucket_expires_deleted_checkpoints_and_aborts_stale_uploads(synth):
    (bucket,) = synth("prod").resources("sample-job", "AWS::S3::Bucket").values()
    rules = {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["ExpireDeletedCheckpoints"]["NoncurrentVersionExpiration"]["NoncurrentDays"] > 0
    assert rules["AbortIncompleteUploads"]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1
    assert all(r["Status"] == "Enabled" for r in rules.values())


def test_the_token_secret_is_required_at_deploy_and_readable_only_by_the_job(synth):
    s = synth("prod")
    name = s.settings.sample_job.hf_token_secret
    # Beside it, the calls that set what a redeploy's adopted checkpoint bucket keeps (test_teardown_contract).
    (check_id, check), = [(k, r) for k, r in s.resources("sample-job", "Custom::AWS").items() if k.startswith("TokenSecretExists")]
    create = json.loads(json.dumps(check["Properties"]["Create"]))
    text = create if isinstance(create, str) else "".join(p if isinstance(p, str) else "" for p in create["Fn::Join"][1])
    assert '"action":"describeSecret"' in text and f'"SecretId":"{name}"' in text
    (job_id,) = [k for k, r in s.resources("sample-job", "Custom::AWSCDK-EKS-KubernetesResource").items()]
    assert check_id in s.templates["sample-job"]["Resources"][job_id]["DependsOn"]
    (policy,) = [p for k, p in s.resources("sample-job", "AWS::IAM::ManagedPolicy").items() if k.startswith("SampleJobTokenPolicy")]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "secretsmanager:GetSecretValue"
    assert statement["Resource"] == f"arn:aws:secretsmanager:us-east-1:111111111111:secret:{name}-??????"
