"""on_create.sh, run for real in a sandbox: paths, the mount check and systemctl are redirected.

What it must do comes from the AWS reference script (awsome-distributed-ai,
1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh):
wait up to 60 s for /opt/sagemaker, put containerd's data root there through containerd's
configuration, symlink /var/lib/kubelet there, and write no /etc/fstab entry.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from stacks.lifecycle import LIFECYCLE_SCRIPTS

SCRIPT = LIFECYCLE_SCRIPTS / "on_create.sh"
IMDS_UNIT = "hyperpod-cdk-block-pod-imds.service"
# The EKS user guide ("Restrict access to the instance profile assigned to the worker node") and
# the EKS Best Practices Guide (Security, IAM), for pods on the VPC CNI's interfaces:
EKS_GUIDE_RULE = "iptables --insert FORWARD 1 --in-interface eni+ --destination 169.254.169.254/32 --jump DROP"
AL2_CONFIG = 'version = 2\n# root = "/var/lib/containerd"\n\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "pause"\n'


def _sandbox(tmp_path: Path, *, os_version: str = "2", mounted_after_checks: int | None = 0) -> dict:
    """A node's file system under tmp_path. The volume is mounted from the Nth mount check
    on (None: never), as HyperPod mounts it while the script may already be running."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls, checks = tmp_path / "calls.log", tmp_path / "mount-checks"
    checks.write_text("0")
    mounted = "exit 1" if mounted_after_checks is None else f'[ "$n" -gt {mounted_after_checks} ]'
    (bin_dir / "mountpoint").write_text(
        f'#!/bin/sh\nn=$(( $(cat {checks}) + 1 )); echo $n > {checks}\n{mounted}\n'
    )
    # Services are inactive (is-active exits 3, as systemd does); other verbs succeed.
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho systemctl "$@" >> {calls}\n[ "$1" = is-active ] && exit 3\nexit 0\n'
    )
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")  # the wait is counted in checks, not seconds
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    node = tmp_path / "node"
    containerd = node / "var/lib/containerd"
    containerd.mkdir(parents=True)
    (containerd / "image.db").write_text("layers")
    kubelet = node / "var/lib/kubelet"
    kubelet.mkdir(parents=True)
    (kubelet / "kubeconfig").write_text("node credentials")
    (node / "etc/eks/containerd").mkdir(parents=True)
    (node / "etc/eks/containerd/containerd-config.toml").write_text(AL2_CONFIG)
    (node / "etc/os-release").write_text(f'NAME="Amazon Linux"\nVERSION_ID="{os_version}"\n')
    (node / "etc/fstab").write_text("UUID=root / xfs defaults 0 0\n")
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DATA_ROOT": str(node / "opt/sagemaker"),
        "CONTAINERD_DIR": str(containerd),
        "KUBELET_DIR": str(kubelet),
        "OS_RELEASE": str(node / "etc/os-release"),
        "AL2_CONTAINERD_CONFIG": str(node / "etc/eks/containerd/containerd-config.toml"),
        "SYSTEMD_DIR": str(node / "etc/systemd/system"),
        "GUARD_DIR": str(node / "usr/local/sbin"),
        "MOUNT_WAIT_SECONDS": "5",
        "LOG_FILE": str(node / "var/log/on_create.log"),
        "CALLS": str(calls),
        "CHECKS": str(checks),
        "NODE": str(node),
    }


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def _snapshot(root: Path) -> dict:
    """Every path under root with its content (or link target), to compare runs."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if "var/log" in rel:
            continue
        out[rel] = ("->", os.readlink(path)) if path.is_symlink() else (path.read_text() if path.is_file() else "dir")
    return out


def test_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_it_uses_nothing_that_aborts_under_bash_4_2_with_set_u():
    # Amazon Linux 2 ships bash 4.2, where "${empty[@]}" under `set -u` is an unbound
    # variable (fixed in bash 4.4, per its CHANGES). The only safe rule: no array expansions.
    code = "\n".join(line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"\$\{[A-Za-z_]+\[[@*]\]", code)
    assert "set -euo pipefail" in code


def test_on_amazon_linux_2_containerd_root_is_set_in_its_config_and_kubelet_is_symlinked(tmp_path):
    env = _sandbox(tmp_path, os_version="2")
    result = _run(env)
    assert result.returncode == 0, result.stdout + result.stderr
    data = Path(env["DATA_ROOT"])
    config = Path(env["AL2_CONTAINERD_CONFIG"]).read_text()
    assert f'root = "{data}/containerd/data-root"' in config.splitlines()
    assert config.count("root =") == 1 and "sandbox_image" in config  # the rest is untouched
    assert (data / "containerd/data-root/image.db").read_text() == "layers"  # existing data copied
    kubelet = Path(env["KUBELET_DIR"])
    assert kubelet.is_symlink() and os.readlink(kubelet) == str(data / "kubelet")
    assert (kubelet / "kubeconfig").read_text() == "node credentials"


def test_on_amazon_linux_2023_a_systemd_drop_in_gives_containerd_its_root(tmp_path):
    env = _sandbox(tmp_path, os_version="2023")
    result = _run(env)
    assert result.returncode == 0, result.stdout + result.stderr
    drop_in = Path(env["SYSTEMD_DIR"]) / "containerd.service.d/10-hyperpod-data-root.conf"
    lines = drop_in.read_text().splitlines()
    assert lines == ["[Service]", "ExecStart=", f"ExecStart=/usr/bin/containerd --root {env['DATA_ROOT']}/containerd/data-root"]
    assert "systemctl daemon-reload" in Path(env["CALLS"]).read_text()


def test_it_writes_no_fstab_entry(tmp_path):
    env = _sandbox(tmp_path)
    _run(env)
    assert (Path(env["NODE"]) / "etc/fstab").read_text() == "UUID=root / xfs defaults 0 0\n"
    assert "fstab" not in SCRIPT.read_text().split("set -euo pipefail", 1)[1]


def test_a_volume_mounted_late_is_waited_for(tmp_path):
    env = _sandbox(tmp_path, mounted_after_checks=3)
    result = _run(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert int(Path(env["CHECKS"]).read_text()) == 4
    assert Path(env["KUBELET_DIR"]).is_symlink()
    assert "waiting for" in Path(env["LOG_FILE"]).read_text()


def test_without_the_volume_it_gives_up_after_the_wait_and_leaves_everything_in_place(tmp_path):
    env = _sandbox(tmp_path, mounted_after_checks=None)
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "is not mounted after 5s" in Path(env["LOG_FILE"]).read_text()
    assert not Path(env["KUBELET_DIR"]).is_symlink()
    assert Path(env["AL2_CONTAINERD_CONFIG"]).read_text() == AL2_CONFIG
    # No folder of the node is made for jobs to share: each job's scratch is its own emptyDir.
    assert not (Path(env["DATA_ROOT"]) / "jobs").exists()
    # Pods lose the instance metadata service all the same.
    assert (Path(env["SYSTEMD_DIR"]) / IMDS_UNIT).is_file()


@pytest.mark.parametrize("os_version", ["2", "2023"])
def test_a_reboot_runs_it_again_and_nothing_changes(tmp_path, os_version):
    env = _sandbox(tmp_path, os_version=os_version)
    assert _run(env).returncode == 0
    first = _snapshot(Path(env["NODE"]))
    result = _run(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _snapshot(Path(env["NODE"])) == first
    assert "already points to" in Path(env["LOG_FILE"]).read_text()


def _unit(env: dict) -> dict[str, str]:
    lines = (Path(env["SYSTEMD_DIR"]) / IMDS_UNIT).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _fake_iptables(tmp_path: Path, *, locked_for: int = 0, fresh: bool = False) -> tuple[Path, Path]:
    """An iptables that keeps FORWARD's rules in a file and logs each call; the first
    `locked_for` calls find the xtables lock held (exit 4, "Resource temporarily unavailable",
    as iptables does when -w runs out); `fresh`: a node whose FORWARD is empty again (a reboot).
    (rules file, calls file)"""
    rules, calls, count = tmp_path / "forward.rules", tmp_path / "iptables.calls", tmp_path / "iptables.count"
    if fresh:
        rules.unlink(missing_ok=True)
    calls.unlink(missing_ok=True)
    rules.touch()
    count.write_text("0")
    fake = tmp_path / "bin" / "iptables"
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\nn=$(( $(cat {count}) + 1 )); echo $n > {count}\n'
        f'[ "$n" -le {locked_for} ] && exit 4\n'
        f'[ "$1" = -w ] || exit 2\nshift 2\nop=$1; shift\nrule="$*"\n'
        f'case "$op" in -C) grep -qxF "$rule" {rules};; -I) echo "$rule" >> {rules};; *) exit 2;; esac\n'
    )
    fake.chmod(0o755)
    return rules, calls


def _run_exec_start(env: dict, tmp_path: Path, *, locked_for: int = 0, fresh: bool = False) -> tuple[int, list[str], list[str]]:
    """The unit's ExecStart as systemd runs it at boot, against _fake_iptables: (exit status,
    the rules in FORWARD afterwards, the iptables calls)."""
    rules, calls = _fake_iptables(tmp_path, locked_for=locked_for, fresh=fresh)
    command = _unit(env)["ExecStart"]
    result = subprocess.run([command], env=env, capture_output=True, text=True, timeout=60)
    return result.returncode, rules.read_text().splitlines(), calls.read_text().splitlines() if calls.exists() else []


def _dropin(env: dict) -> str:
    return (Path(env["SYSTEMD_DIR"]) / "kubelet.service.d" / "10-hyperpod-cdk-imds-guard.conf").read_text()


def test_pods_lose_the_instance_metadata_service_at_every_boot_before_kubelet(tmp_path):
    env = _sandbox(tmp_path)
    assert _run(env).returncode == 0
    unit = _unit(env)
    # A boot-persistent oneshot, ordered before kubelet starts any pod, enabled and started now.
    assert (unit["Type"], unit["RemainAfterExit"], unit["Before"], unit["WantedBy"]) == ("oneshot", "yes", "kubelet.service", "multi-user.target")
    calls = Path(env["CALLS"]).read_text()
    assert f"systemctl enable --now {IMDS_UNIT}" in calls and "systemctl daemon-reload" in calls
    # The guide's rule, inserted at the head of FORWARD once however often the unit runs.
    line = "FORWARD --in-interface eni+ --destination 169.254.169.254/32 --jump DROP"
    assert _run_exec_start(env, tmp_path)[:2] == (0, [line])
    assert _run_exec_start(env, tmp_path)[:2] == (0, [line])
    guide = EKS_GUIDE_RULE.split()
    assert guide[1:3] == ["--insert", "FORWARD"] and guide[3] == "1"
    assert _run_exec_start(env, tmp_path)[1][0].split() == guide[2:3] + guide[4:]


# systemd.unit(5): Requires= with After= means the unit is not started when a required unit
# fails; RequiredBy= in [Install] adds that Requires= when the unit is enabled.
def test_kubelet_requires_the_guard_so_a_node_without_the_rule_runs_no_pod(tmp_path):
    env = _sandbox(tmp_path)
    assert _run(env).returncode == 0
    assert _unit(env)["RequiredBy"] == "kubelet.service"
    dropin = dict(line.split("=", 1) for line in _dropin(env).splitlines() if "=" in line)
    assert dropin == {"Requires": IMDS_UNIT, "After": IMDS_UNIT}
    assert _dropin(env).startswith("[Unit]\n")


def test_the_guard_waits_for_the_xtables_lock_retries_and_fails_closed(tmp_path):
    env = _sandbox(tmp_path)
    assert _run(env).returncode == 0
    unit = _unit(env)
    # Every call waits for the lock (iptables(8): -w SECONDS), as the EKS AMI's kubelet unit's -w 5.
    status, rules, calls = _run_exec_start(env, tmp_path, locked_for=5)
    assert status == 0 and len(rules) == 1
    assert calls and all(c.split()[:2] == ["-w", "5"] for c in calls), calls
    # Held for longer than every try: the unit fails, so kubelet (which requires it) does not start.
    guard = Path(unit["ExecStart"]).read_text()
    tries = int(re.search(r'-ge (\d+) \]', guard).group(1))
    status, rules, calls = _run_exec_start(env, tmp_path, locked_for=10_000, fresh=True)
    assert status != 0 and rules == [] and len(calls) == 2 * tries
    # The unit's start timeout outlasts every try: lock waits and pauses (systemd would kill it sooner).
    pause = int(re.search(r"sleep (\d+)", guard).group(1))
    assert int(unit["TimeoutStartSec"]) >= tries * (2 * 5 + pause)


def test_on_create_fails_where_the_guard_cannot_be_placed(tmp_path):
    # At creation the unit is started by the script (enable --now): a failure fails the script,
    # and HyperPod then fails the node rather than let it join without the rule.
    env = _sandbox(tmp_path)
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(systemctl.read_text().replace("exit 0\n", '[ "$1" = enable ] && exit 1\nexit 0\n'))
    result = _run(env)
    assert result.returncode != 0


def test_the_rule_leaves_the_host_and_the_pod_identity_endpoint_alone():
    # Only routed traffic from pods' interfaces to the metadata address: not OUTPUT (the host's
    # own agents), not 169.254.170.23 (EKS Pod Identity's agent, which pods must reach).
    code = SCRIPT.read_text()
    rule = next(line for line in code.splitlines() if line.startswith("IMDS_RULE="))
    assert rule == 'IMDS_RULE="FORWARD --in-interface eni+ --destination 169.254.169.254/32 --jump DROP"'
    assert "OUTPUT" not in code and "169.254.170" not in rule
