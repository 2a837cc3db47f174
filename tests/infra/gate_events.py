"""What the readiness gates' tests share: the event CloudFormation's provider framework hands
a link of a gate's chain, and each gate's own (the node gate, the final backup, the VPC
teardown), the node list a GPU cluster answers (tests/fixtures/nodes), a self-signed
certificate for a TLS server standing in for the cluster's API, and the environment every
gate function runs with."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

from infra import timing

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NODES = json.loads((FIXTURES / "nodes" / "hyperpod_gpu_nodes.json").read_text())
GPU = {"Count": "4", "Resources": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}}
VPC, SUBNET, GROUP = "vpc-0a1b2c3d4e5f60718", "subnet-0a1b2c3d4e5f60711", "sg-0a1b2c3d4e5f60718"


def set_handler_environment(monkeypatch) -> None:
    """What every gate function's environment holds (ChainedWait sets it from infra/timing.py)."""
    for name, value in timing.handler_environment().items():
        monkeypatch.setenv(name, value)


def link_event(request="Create", link="1/1", deadline=10**10, **props):
    return {
        "RequestType": request,
        "PhysicalResourceId": "hyperpod-prod",
        "ResourceProperties": {"Link": link, "LinkSeconds": "3000", "TotalSeconds": str(3000 * int(link[-1])), **props},
        "Data": {"Deadline": str(deadline)},
    }


def nodes_event(**kw):
    return link_event(ClusterName="hyperpod-prod", Region="us-east-1", InstanceGroups={"gpu": "4"}, **kw)


def backup_event(request="Delete", deadline=10**10):
    return link_event(request, deadline=deadline, FileSystemId="fs-0123456789abcdef0", Region="us-east-1")


def teardown_event(request="Delete", deadline=10**10, **props):
    return link_event(request, deadline=deadline, VpcId=VPC, Region="us-east-1", SubnetIds=[SUBNET], SecurityGroupId=GROUP, **props)


def self_signed(tmp_path: Path) -> tuple[Path, Path, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    # What EKS's DescribeCluster (and CDK's clusterCertificateAuthorityData) gives: base64 of the PEM.
    return tmp_path / "cert.pem", tmp_path / "key.pem", base64.b64encode(pem).decode()
