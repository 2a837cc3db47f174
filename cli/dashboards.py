"""`hyperpod-cdk dashboards`: the one command that imports HyperPod's observability dashboards
into this environment's Amazon Managed Grafana workspace.

Why a printed command and not a resource of the deploy: CloudFormation has no Grafana
dashboard (nor data source) resource. The console's quick setup (aws/sagemaker-hyperpod-cluster-
setup, eks/cloudformation/observability-template.yaml) gets them in with three Lambda-backed
custom resources: one makes a Grafana service account and token, one (in the VPC) reads the
dashboard JSON from AWS's artifacts bucket and POSTs a Prometheus data source and each dashboard
to the workspace's HTTP API (`/api/datasources`, `/api/dashboards/db`), one updates the add-on.
Doing that at deploy would mean copying the reference's Lambda and dashboards into this
repository, or a deploy-time function calling Grafana over HTTP with a long-lived token, none of
which the offline tests could check. The command below does the same steps once, with the
operator's own credentials and a token that expires in minutes.

The dashboards are the quick setup's published templates, each under the uid the quick setup
gives it, read from the repository at a pinned commit. Their panels pick a Prometheus data source
through a `datasource` variable; the command first creates one as the quick setup does (uid
`prometheus`, the default, SigV4 to this environment's workspace). A few panels read CloudWatch
through a `cloudwatch` variable: the workspace's role here may query only its Prometheus
workspace, so those stay empty.
"""

from __future__ import annotations

import shlex

from infra.config import Settings

# aws/sagemaker-hyperpod-cluster-setup at 6e045f8 (2025-08-12, the newest commit that changes the
# templates): eks/cloudformation/resources/grafana-lambda-function/lambda_function/, its
# DASHBOARD_UIDS and dashboards/templates/<name>.json.
SOURCE_COMMIT = "6e045f89fe89c4aa24925096477217165b815e7e"
TEMPLATES = "eks/cloudformation/resources/grafana-lambda-function/lambda_function/dashboards/templates"
DASHBOARDS = {
    "cluster": "aws-sm-hp-observability-cluster-v1_0",
    "efa": "aws-sm-hp-observability-efa-v1_0",
    "training": "aws-sm-hp-observability-training-v1_0",
    "inference": "aws-sm-hp-observability-inference-v1_0",
    "tasks": "aws-sm-hp-observability-task-v1_0",
}
# The data source the quick setup makes for the dashboards (create_prometheus_datasource).
DATASOURCE_UID = "prometheus"
SERVICE_ACCOUNT = "hyperpod-cdk-dashboards"
# Long enough for five uploads; Grafana tokens may live up to 30 days (CreateWorkspaceServiceAccountToken).
TOKEN_SECONDS = 900


class NoGrafana(RuntimeError):
    """Grafana is off in this environment: there is nothing to import into."""


def template_url(name: str) -> str:
    return f"https://raw.githubusercontent.com/aws/sagemaker-hyperpod-cluster-setup/{SOURCE_COMMIT}/{TEMPLATES}/{name}.json"


def workspace_name(settings: Settings) -> str:
    """The name the observability add-on gives the Grafana workspace (addons/observability.py)."""
    return f"{settings.prefix}-{settings.env_name}-hyperpod"


def command(settings: Settings) -> str:
    """A bash script, run once after deploy with credentials that may administer the workspace."""
    obs = settings.addons.observability
    if not (obs.enabled and obs.grafana.enabled):
        raise NoGrafana(
            f"addons.observability.grafana.enabled is off in {settings.env_name}: there is no Grafana workspace "
            "to import the dashboards into"
        )
    region, name = settings.region, workspace_name(settings)
    prometheus_alias = f"{settings.prefix}-{settings.env_name}-hyperpod"
    q = shlex.quote
    lines = [
        "set -euo pipefail",
        f"REGION={q(region)}",
        f"WS=$(aws grafana list-workspaces --region $REGION --query \"workspaces[?name=='{name}'].id | [0]\" --output text)",
        f"AMP=$(aws amp list-workspaces --region $REGION --alias {q(prometheus_alias)} --query 'workspaces[0].workspaceId' --output text)",
        f"SA=$(aws grafana list-workspace-service-accounts --region $REGION --workspace-id $WS "
        f"--query \"serviceAccounts[?name=='{SERVICE_ACCOUNT}'].id | [0]\" --output text)",
        f"[ \"$SA\" != None ] || SA=$(aws grafana create-workspace-service-account --region $REGION --workspace-id $WS "
        f"--name {SERVICE_ACCOUNT} --grafana-role ADMIN --query id --output text)",
        f"TOKEN=$(aws grafana create-workspace-service-account-token --region $REGION --workspace-id $WS "
        f"--service-account-id $SA --name import-$(date +%s) --seconds-to-live {TOKEN_SECONDS} --query serviceAccountToken.key --output text)",
        "API=https://$WS.grafana-workspace.$REGION.amazonaws.com/api",
        "post() { curl -fsS -X POST -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' \"$API/$1\" -d @- >/dev/null; }",
        # 409: the data source exists from an earlier import.
        "jq -n --arg url \"https://aps-workspaces.$REGION.amazonaws.com/workspaces/$AMP\" --arg region \"$REGION\" "
        f"'{{name:\"prometheus\",type:\"prometheus\",uid:\"{DATASOURCE_UID}\",url:$url,access:\"proxy\",isDefault:true,"
        "jsonData:{httpMethod:\"POST\",sigV4Auth:true,sigV4AuthType:\"ec2_iam_role\",sigV4Region:$region}}' | post datasources || true",
    ]
    for dashboard, uid in DASHBOARDS.items():
        lines.append(
            f"curl -fsSL {template_url(dashboard)} | jq '{{dashboard: (. + {{uid: \"{uid}\", id: null}}), overwrite: true}}' | post dashboards/db"
        )
    lines.append(f"echo \"imported {len(DASHBOARDS)} dashboards into https://$WS.grafana-workspace.$REGION.amazonaws.com\"")
    return "\n".join(lines) + "\n"
