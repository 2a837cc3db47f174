"""on_create.sh, run for real in a sandbox: paths and the mount tools are redirected."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from stacks.hyperpod import LIFECYCLE_SCRIPTS

SCRIPT = LIFECYCLE_SCRIPTS / "on_create.sh"


def _run(tmp_path: Path, *, mounted: bool):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls.log"
    # Stand-ins for the node's mount tools, recording what the script asks of them.
    (bin_dir / "mountpoint").write_text(f"#!/bin/sh\necho mountpoint \"$@\" >> {calls}\nexit {0 if mounted else 1}\n")
    (bin_dir / "mount").write_text(f"#!/bin/sh\necho mount \"$@\" >> {calls}\n")
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho systemctl \"$@\" >> {calls}\nexit 3\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    containerd = tmp_path / "var/lib/containerd"
    containerd.mkdir(parents=True, exist_ok=True)
    (containerd / "image.db").write_text("layers")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DATA_ROOT": str(tmp_path / "opt/sagemaker"),
        "CONTAINERD_DIR": str(containerd),
        "KUBELET_DIR": str(tmp_path / "var/lib/kubelet"),
        "FSTAB": str(tmp_path / "fstab"),
        "LOG_FILE": str(tmp_path / "log/on_create.log"),
    }
    (tmp_path / "fstab").touch()
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    return result, env, calls


def test_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_without_local_storage_it_leaves_everything_in_place_and_says_so(tmp_path):
    result, env, _ = _run(tmp_path, mounted=False)
    assert result.returncode == 0, result.stderr
    assert "is not a mount point" in Path(env["LOG_FILE"]).read_text()
    jobs = Path(env["DATA_ROOT"]) / "jobs"
    assert jobs.is_dir() and (jobs.stat().st_mode & 0o7777) == 0o1777  # non-root jobs can write
    assert Path(env["FSTAB"]).read_text() == ""


def test_with_local_nvme_it_moves_containerd_and_kubelet_and_persists_the_binds(tmp_path):
    result, env, calls = _run(tmp_path, mounted=True)
    assert result.returncode == 0, result.stderr
    data = Path(env["DATA_ROOT"])
    assert (data / "containerd/image.db").read_text() == "layers"  # existing data copied
    fstab = Path(env["FSTAB"]).read_text().splitlines()
    assert f"{data}/containerd {env['CONTAINERD_DIR']} none bind 0 0" in fstab
    assert f"{data}/kubelet {env['KUBELET_DIR']} none bind 0 0" in fstab
    assert f"mount --bind {data}/containerd {env['CONTAINERD_DIR']}" in calls.read_text()
    log = Path(env["LOG_FILE"]).read_text()
    assert "bound" in log and "done:" in log


def test_running_it_twice_changes_nothing_the_second_time(tmp_path):
    _run(tmp_path, mounted=True)
    result, env, _ = _run(tmp_path, mounted=True)
    assert result.returncode == 0
    assert len(Path(env["FSTAB"]).read_text().splitlines()) == 2
    assert "already bound" in Path(env["LOG_FILE"]).read_text()
