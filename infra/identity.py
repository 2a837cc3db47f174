"""Who an IAM principal ARN names, as IAM and EKS see it: the one rule for a role (or user) ARN.

IAM keeps role names unique in an account whatever their path, and compares them without case
(IAM User Guide, "IAM identifiers": `role/Admin` and `role/ops/admin` cannot both exist); a
name is 1 to 64 of `[A-Za-z0-9_+=,.@-]` and a path `/`, or `/.../` of printable ASCII, at most
512 characters (botocore's IAM model: roleNameType, userNameType, pathType); a path with no
name names nothing. EKS gives a principal one access entry ("An IAM principal can't be included
in more than one access entry", EKS user guide, Create access entries), and takes a role's ARN
with its path.

Every field that makes an access entry (eks.admin_principal_arns, governance.teams[].principals,
eks.existing_cluster.kubectl_role_arn, which already has one on that cluster, and
hyperpod.existing_execution_role_arn, which HyperPod gives one: SageMaker's
ClusterMetadata.EksRoleAccessEntries) is read through `parse`, and two ARNs are one principal
when `same` says so (validation, and preflight against the entries a cluster has).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# botocore IAM roleNameType and userNameType: min 1, max 64, pattern [\w+=,.@-]+ (ASCII \w).
NAME_MAX = 64
NAME = re.compile(r"[\w+=,.@-]+", re.ASCII)
# botocore IAM pathType: "/" or "/" + printable ASCII (! to ~) + "/", at most 512.
PATH_MAX = 512
PATH = re.compile(r"(/)|(/[\x21-\x7e]+/)", re.ASCII)
_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):(role|user)/(.*)$", re.ASCII | re.DOTALL)

Kind = Literal["role", "user"]


class NotAPrincipal(ValueError):
    """The ARN names no IAM role (or user): the message says what is allowed."""


@dataclass(frozen=True)
class Principal:
    arn: str
    partition: str
    account: str
    kind: Kind
    # "/" or "/a/b/", as IAM reports a role's Path.
    path: str
    name: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What IAM and EKS tell principals apart by: partition, account, kind and the name
        without case; the path is not part of it."""
        return (self.partition, self.account, self.kind, self.name.lower())

    def __str__(self) -> str:
        return f"{self.kind} {self.name!r} of account {self.account}"


def parse(arn: str, kinds: tuple[Kind, ...] = ("role",)) -> Principal:
    """The principal `arn` names, or NotAPrincipal saying why it names none."""
    shape = " or ".join(f"arn:<partition>:iam::<account>:{k}/<optional path/>name" for k in kinds)
    found = _ARN.match(arn)
    if not found or found.group(3) not in kinds:
        raise NotAPrincipal(f"is not an IAM {' or '.join(kinds)} ARN ({shape})")
    partition, account, kind, rest = found.groups()
    name = rest.rpartition("/")[2]
    # The ARN is "<kind>" + path + name, the path starting and ending with "/".
    path = "/" + rest[: len(rest) - len(name)]
    if not name:
        raise NotAPrincipal(f"has a path but no {kind} name after it ({shape})")
    if len(name) > NAME_MAX:
        raise NotAPrincipal(f"has a {kind} name of {len(name)} characters; IAM {kind} names are at most {NAME_MAX}")
    if not NAME.fullmatch(name):
        raise NotAPrincipal(f"has the {kind} name {name!r}; IAM {kind} names are letters, digits and +=,.@_- only")
    if len(path) > PATH_MAX or not PATH.fullmatch(path):
        raise NotAPrincipal(f"has the path {path!r}; IAM paths are at most {PATH_MAX} printable ASCII characters between slashes")
    return Principal(arn, partition, account, kind, path, name)


def same(a: str, b: str) -> bool:
    """Whether two ARNs name one principal (False where either names none)."""
    try:
        return parse(a, ("role", "user")).key == parse(b, ("role", "user")).key
    except NotAPrincipal:
        return False
