"""What config names that the deploy uses as it is, without creating it: instance groups'
AMIs and rollback alarms, the sample job's token secret, an operations SNS topic, a volume key, a lifecycle bucket and an
execution role, each as the stacks need it."""

from __future__ import annotations

from cli.preflight.base import Clients, Result, error_code
from infra import identity
from infra.config import Settings


def check_named_resources(settings: Settings, aws: Clients) -> list[Result]:
    """What config names but no stack creates: custom AMIs and rollback alarms of instance groups,
    and the sample job's Hugging Face token secret (the sample-job stack, deployed last, fails
    on a missing one after every other stack is up)."""
    results = []
    job = settings.sample_job
    if job.enabled and job.hf_token_secret:
        check = f"secret {job.hf_token_secret}"
        try:
            aws("secretsmanager").describe_secret(SecretId=job.hf_token_secret)
            results.append(Result(check, "pass", "exists (sample_job.hf_token_secret)"))
        except Exception as err:  # noqa: BLE001
            if error_code(err) != "ResourceNotFoundException":
                raise
            results.append(Result(check, "fail", f"sample_job.hf_token_secret names no secret in {aws.region}",
                                  f"aws secretsmanager create-secret --name {job.hf_token_secret} --secret-string <your Hugging Face token>"))
    for group in settings.hyperpod.instance_groups:
        if group.image_id:
            images = aws("ec2").describe_images(Filters=[{"Name": "image-id", "Values": [group.image_id]}])["Images"]
            results.append(
                Result(f"AMI {group.image_id}", "pass", f"exists (group {group.name})")
                if images
                else Result(f"AMI {group.image_id}", "fail", f"group {group.name}'s image_id is not an AMI this account can use in {aws.region}",
                            "build it from the HyperPod AMI or drop image_id")
            )
        alarms = list(group.scheduled_update.rollback_alarms) if group.scheduled_update else []
        if alarms:
            found = {a["AlarmName"] for a in aws("cloudwatch").describe_alarms(AlarmNames=alarms)["MetricAlarms"]}
            for alarm in alarms:
                results.append(
                    Result(f"alarm {alarm}", "pass", f"exists (group {group.name})")
                    if alarm in found
                    else Result(f"alarm {alarm}", "fail", f"group {group.name}'s rollback alarm does not exist in {aws.region}",
                                "create the CloudWatch alarm, or remove it from scheduled_update.rollback_alarms")
                )
    return results


def check_operations_topic(settings: Settings, aws: Clients) -> list[Result]:
    """An existing operations topic (operations.notifications.topic_arn) exists and its policy
    lets this config's publishers publish; the stack grants them only on a topic it creates."""
    import json

    from infra import alerting

    arn = settings.operations.notifications.topic_arn
    if not arn:
        return []
    name = f"topic {arn.rsplit(':', 1)[1]}"
    try:
        attrs = aws("sns").get_topic_attributes(TopicArn=arn)["Attributes"]
    except Exception as err:  # noqa: BLE001
        if error_code(err) not in ("NotFound", "NotFoundException"):
            raise
        return [Result(name, "fail", f"{arn} does not exist", "create it, or fix operations.notifications.topic_arn")]
    admitted = set()
    for st in json.loads(attrs.get("Policy") or "{}").get("Statement", []):
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        services = st.get("Principal", {}).get("Service", []) if isinstance(st.get("Principal"), dict) else []
        services = [services] if isinstance(services, str) else services
        if st.get("Effect") == "Allow" and any(a.lower() in ("sns:publish", "sns:*") for a in actions):
            admitted |= set(services)
    missing = sorted(alerting.publishers(settings) - admitted)
    if missing:
        return [Result(name, "fail", f"its policy does not let {', '.join(missing)} publish",
                       "add an sns:Publish statement per service (docs/operations.md, an existing topic)")]
    key = attrs.get("KmsMasterKeyId")
    if key:
        return [Result(name, "warn", f"is encrypted with {key}",
                       f"its key policy must let {', '.join(sorted(alerting.publishers(settings)))} use kms:GenerateDataKey* and kms:Decrypt")]
    return [Result(name, "pass", f"exists; its policy admits {', '.join(sorted(alerting.publishers(settings)))}")]


def check_volume_key(settings: Settings, aws: Clients) -> list[Result]:
    """A key named in hyperpod.volume_encryption.kms_key_arn, as HyperPod's customer managed key
    page (smcluster-cmk) needs it: enabled, symmetric, and a key policy with no
    encryption-context condition (HyperPod passes none) that lets the execution role in, through
    the account's IAM policies (the stack grants the role on the key) or by name."""
    enc = settings.hyperpod.volume_encryption
    if enc is None or not enc.kms_key_arn:
        return []
    check, kms = "volume key", aws("kms")
    try:
        key = kms.describe_key(KeyId=enc.kms_key_arn)["KeyMetadata"]
    except Exception as err:  # noqa: BLE001
        if error_code(err) not in ("NotFoundException", "AccessDeniedException"):
            raise
        return [Result(check, "fail", f"{enc.kms_key_arn} cannot be read here ({error_code(err)})",
                       "create the key, or give one these credentials can describe")]
    if key.get("KeyState") != "Enabled" or key.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
        return [Result(check, "fail", f"{enc.kms_key_arn} is {key.get('KeyState')}, {key.get('KeySpec')}",
                       "EBS takes an enabled symmetric key (SYMMETRIC_DEFAULT)")]
    import json as _json

    policy = _json.loads(kms.get_key_policy(KeyId=enc.kms_key_arn, PolicyName="default")["Policy"])
    statements = policy.get("Statement", [])
    statements = statements if isinstance(statements, list) else [statements]
    if any("EncryptionContext" in _json.dumps(s.get("Condition", {})) for s in statements if s.get("Effect") == "Allow"):
        return [Result(check, "fail", "its key policy scopes a grant by encryption context, which HyperPod does not pass",
                       "drop the kms:EncryptionContext conditions (HyperPod's customer managed key page)")]
    root = f"arn:{key['Arn'].split(':')[1]}:iam::{settings.account}:root"

    def principals(s):
        aws_ = s.get("Principal", {}).get("AWS", []) if isinstance(s.get("Principal"), dict) else []
        return aws_ if isinstance(aws_, list) else [aws_]

    delegates = any(s.get("Effect") == "Allow" and (root in principals(s) or settings.account in principals(s))
                    and s.get("Action") in ("kms:*", ["kms:*"]) and not s.get("Condition") for s in statements)
    if delegates:
        return [Result(check, "pass", f"{key['KeyId']}: enabled, symmetric; its policy lets IAM policies grant it (the stack grants the execution role)")]
    return [Result(check, "warn", f"{key['KeyId']}: its policy does not let IAM policies grant it",
                   "let the execution role kms:CreateGrant (kms:GrantIsForAWSResource) and kms:DescribeKey via "
                   f"sagemaker.{settings.region}.amazonaws.com in the key policy, once the hyperpod stack has created the role")]


def check_existing_lifecycle_bucket(settings: Settings, aws: Clients) -> list[Result]:
    """hyperpod.existing_lifecycle_bucket exists in this region, and its default encryption is
    one the stacks can work with: SSE-S3 or the AWS managed key. Under a customer managed key
    the upload Lambda and the nodes would need grants on a key the stacks do not know."""
    name = settings.hyperpod.existing_lifecycle_bucket
    if not name:
        return []
    s3, check = aws("s3"), f"bucket {name}"
    try:
        region = s3.get_bucket_location(Bucket=name).get("LocationConstraint") or "us-east-1"
    except Exception as err:  # noqa: BLE001
        if error_code(err) not in ("NoSuchBucket", "404", "AccessDenied", "403"):
            raise
        return [Result(check, "fail", f"does not exist or is not this account's ({error_code(err)})", "fix hyperpod.existing_lifecycle_bucket")]
    if region != aws.region:
        return [Result(check, "fail", f"is in {region}; HyperPod reads lifecycle scripts from {aws.region}", "name a bucket in the cluster's region")]
    try:
        rules = s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]["Rules"]
    except Exception as err:  # noqa: BLE001
        if error_code(err) != "ServerSideEncryptionConfigurationNotFoundError":
            raise
        rules = []
    default = next((r["ApplyServerSideEncryptionByDefault"] for r in rules if "ApplyServerSideEncryptionByDefault" in r), {})
    key = default.get("KMSMasterKeyID", "")
    if default.get("SSEAlgorithm", "").startswith("aws:kms") and key and not key.endswith("alias/aws/s3"):
        return [Result(check, "fail", f"encrypts with customer managed key {key}, which the stacks grant neither the upload nor the nodes",
                       "name a bucket under SSE-S3 or the AWS managed key aws/s3")]
    return [Result(check, "pass", f"in {region}, {default.get('SSEAlgorithm', 'AES256')}")]


# What the hyperpod stack grants its own execution role (stacks/hyperpod.py _execution_role), as
# (what for, actions, resource to simulate them on): a role of yours must be able to do the same.
def _execution_role_needs(settings: Settings, aws: Clients) -> list[tuple[str, tuple[str, ...], str]]:
    from infra import naming

    p, region, account = naming.partition(aws.region), aws.region, settings.account
    bucket = settings.lifecycle_bucket_name
    needs = [
        ("lifecycle scripts", ("s3:GetObject",), f"arn:{p}:s3:::{bucket}/lifecycle/on_create.sh"),
        ("lifecycle bucket", ("s3:ListBucket",), f"arn:{p}:s3:::{bucket}"),
        ("VPC CNI network interfaces", ("ec2:CreateNetworkInterface", "ec2:AttachNetworkInterface", "ec2:AssignPrivateIpAddresses",
                                        "ec2:DeleteNetworkInterface", "ec2:CreateTags"),
         f"arn:{p}:ec2:{region}:{account}:network-interface/*"),
        ("describe and pull", ("ec2:DescribeNetworkInterfaces", "ec2:DescribeInstances", "ecr:GetAuthorizationToken", "ecr:BatchGetImage",
                               "ecr:GetDownloadUrlForLayer", "cloudwatch:DescribeAlarms", *(("fsx:DescribeFileSystems",) if settings.fsx.enabled else ())),
         "*"),
        ("Pod Identity", ("eks-auth:AssumeRoleForPodIdentity",), f"arn:{p}:eks:{region}:{account}:cluster/{settings.eks_cluster_name}"),
    ]
    enc = settings.hyperpod.volume_encryption
    if enc is not None and enc.kms_key_arn:  # keys the stack creates name the role in their key policy
        needs.append(("volume key", ("kms:CreateGrant", "kms:DescribeKey"), enc.kms_key_arn))
    return needs


def check_existing_execution_role(settings: Settings, aws: Clients) -> list[Result]:
    """hyperpod.existing_execution_role_arn, which the stack uses as it is: trusted by SageMaker,
    with AmazonSageMakerClusterInstanceRolePolicy (both as the quick setup's and awsome's role
    templates make theirs), and allowed what the stack grants its own role, by IAM's policy
    simulator. The references check none of this before the nodes boot. A volume key's own key
    policy may let the role in where IAM does not: that case warns, as the simulator reads only
    the role's policies."""
    import json as _json
    from urllib.parse import unquote

    arn = settings.hyperpod.existing_execution_role_arn
    if not arn:
        return []
    iam, name = aws("iam"), identity.parse(arn).name  # GetRole takes the name without its path
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except Exception as err:  # noqa: BLE001
        if error_code(err) not in ("NoSuchEntity", "AccessDenied"):
            raise
        return [Result("execution role", "fail", f"{arn} cannot be read here ({error_code(err)})", "fix hyperpod.existing_execution_role_arn")]
    if role["Arn"] != arn:
        return [Result("execution role", "fail", f"{name} is {role['Arn']}, not {arn}", "give hyperpod.existing_execution_role_arn its path as IAM has it")]
    trust = role.get("AssumeRolePolicyDocument", {})
    trust = _json.loads(unquote(trust)) if isinstance(trust, str) else trust
    statements = trust.get("Statement", [])
    trusted = any(
        s.get("Effect") == "Allow" and "sts:AssumeRole" in _as_list(s.get("Action"))
        and "sagemaker.amazonaws.com" in _as_list(s.get("Principal", {}).get("Service"))
        for s in (statements if isinstance(statements, list) else [statements])
    )
    results = [Result("execution role trust", "pass" if trusted else "fail",
                      "sagemaker.amazonaws.com may assume it" if trusted else "its trust policy does not let sagemaker.amazonaws.com assume it",
                      "" if trusted else "allow sts:AssumeRole to the service principal sagemaker.amazonaws.com")]
    attached = {pol["PolicyName"] for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=name) for pol in page["AttachedPolicies"]}
    managed = "AmazonSageMakerClusterInstanceRolePolicy"  # stacks.hyperpod.INSTANCE_ROLE_POLICY, without a CDK import
    results.append(Result("execution role managed policy", "pass" if managed in attached else "fail",
                          f"{managed} {'attached' if managed in attached else 'not attached'}",
                          "" if managed in attached else f"aws iam attach-role-policy --role-name {name} --policy-arn arn:aws:iam::aws:policy/{managed}"))
    for what, actions, resource in _execution_role_needs(settings, aws):
        answers = iam.simulate_principal_policy(PolicySourceArn=arn, ActionNames=list(actions), ResourceArns=[resource])["EvaluationResults"]
        denied = sorted(a["EvalActionName"] for a in answers if a["EvalDecision"] != "allowed")
        if not denied:
            results.append(Result(f"execution role: {what}", "pass", f"{', '.join(actions)} on {resource}"))
        else:
            results.append(Result(f"execution role: {what}", "warn" if what == "volume key" else "fail",
                                  f"may not {', '.join(denied)} on {resource}" + (" by its IAM policies (the key policy may still allow it)" if what == "volume key" else ""),
                                  "grant it as stacks/hyperpod.py grants the stack's own execution role"))
    return results


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value] if value else []
