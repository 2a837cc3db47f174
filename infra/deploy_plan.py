"""An estimated deploy plan: the critical path through the stack and resource graph.

Each resource takes its type's typical creation minutes (the table below: typical values
from the AWS documentation and from deploying these resource types; an estimate, not a
promise) and starts when everything it depends on is done: its DependsOn, the resources
it references, and, across stacks, the whole of every stack its stack depends on (CDK
deploys a stack only after its dependencies finished).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Typical creation minutes per resource type. Anything not listed: DEFAULT_MINUTES.
TYPICAL_MINUTES = {
    "AWS::EKS::Cluster": 12.0,
    "AWS::SageMaker::Cluster": 25.0,  # instances boot, run lifecycle scripts and deep health checks
    "AWS::EKS::Addon": 3.0,
    "Custom::AWSCDK-EKS-HelmChart": 4.0,
    "Custom::AWSCDK-EKS-KubernetesResource": 1.0,
    "AWS::EC2::NatGateway": 2.0,
    "AWS::EC2::VPCEndpoint": 2.0,
    "AWS::EC2::InternetGateway": 0.5,
    "AWS::EC2::VPC": 0.5,
    "AWS::Lambda::Function": 0.5,
    "AWS::Lambda::LayerVersion": 0.5,
    "Custom::CDKBucketDeployment": 1.0,
    "AWS::APS::Workspace": 2.0,
    "AWS::Grafana::Workspace": 5.0,
    "AWS::SageMaker::ClusterSchedulerConfig": 2.0,
    "AWS::SageMaker::ComputeQuota": 1.0,
    "AWS::KMS::Key": 0.5,
    "AWS::S3::Bucket": 0.3,
    "AWS::IAM::Role": 0.3,
    "AWS::IAM::ManagedPolicy": 0.2,
    "AWS::EKS::PodIdentityAssociation": 0.3,
    "AWS::EKS::AccessEntry": 0.2,
    "AWS::Logs::LogGroup": 0.1,
}
DEFAULT_MINUTES = 0.1


@dataclass
class Step:
    stack: str
    logical_id: str
    type: str
    start: float
    minutes: float

    @property
    def end(self) -> float:
        return self.start + self.minutes


def _references(resource: dict) -> set[str]:
    text = json.dumps(resource.get("Properties", {}))
    refs = set(re.findall(r'"Ref": "([A-Za-z0-9]+)"', text))
    refs |= set(re.findall(r'"Fn::GetAtt": \["([A-Za-z0-9]+)"', text))
    depends = resource.get("DependsOn", [])
    return refs | set(depends if isinstance(depends, list) else [depends])


def plan(stacks) -> tuple[float, list[Step]]:
    """stacks: infra.review.StackSummary in deploy order. (total minutes, critical path)."""
    finished: dict[str, tuple[float, Step | None]] = {}  # stack -> (end, its last step)
    best_path: dict[tuple[str, str], list[Step]] = {}
    stack_paths: dict[str, list[Step]] = {}
    for stack in stacks:
        base_end, base_path = 0.0, []
        for dep in stack.depends_on:
            if dep in finished and finished[dep][0] >= base_end:
                base_end, base_path = finished[dep][0], stack_paths[dep]
        resources = stack.resources
        memo: dict[str, Step] = {}

        def visit(lid: str, trail=()) -> Step:
            if lid in memo:
                return memo[lid]
            res = resources[lid]
            start, path = base_end, list(base_path)
            for ref in sorted(_references(res)):
                if ref in resources and ref not in trail:
                    step = visit(ref, trail + (lid,))
                    if step.end > start:
                        start, path = step.end, list(best_path[(stack.name, ref)])
            step = Step(stack.name, lid, res["Type"], start, TYPICAL_MINUTES.get(res["Type"], DEFAULT_MINUTES))
            memo[lid] = step
            best_path[(stack.name, lid)] = path + [step]
            return step

        last = None
        for lid in resources:
            step = visit(lid)
            if last is None or step.end > last.end:
                last = step
        end = last.end if last else base_end
        finished[stack.name] = (end, last)
        stack_paths[stack.name] = best_path[(stack.name, last.logical_id)] if last else list(base_path)
    if not finished:
        return 0.0, []
    total_stack = max(finished, key=lambda s: finished[s][0])
    return finished[total_stack][0], stack_paths[total_stack]
