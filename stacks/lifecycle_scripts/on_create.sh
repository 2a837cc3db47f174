#!/bin/bash
# HyperPod lifecycle script (OnCreate), run as root on every node at first boot.
#
# HyperPod mounts the instance's local NVMe (or the secondary EBS volume) at
# /opt/sagemaker. Container images and pod ephemeral storage are large on GPU nodes,
# so containerd's and kubelet's data roots are moved there with bind mounts that
# survive reboots (/etc/fstab). The root volume stays small and image pulls stay fast.
# Every step is logged; re-running the script is safe.
set -euo pipefail

DATA_ROOT="${DATA_ROOT:-/opt/sagemaker}"
CONTAINERD_DIR="${CONTAINERD_DIR:-/var/lib/containerd}"
KUBELET_DIR="${KUBELET_DIR:-/var/lib/kubelet}"
FSTAB="${FSTAB:-/etc/fstab}"
LOG_FILE="${LOG_FILE:-/var/log/hyperpod-cdk/on_create.log}"

mkdir -p "$(dirname "$LOG_FILE")"
exec > >(tee -a "$LOG_FILE") 2>&1

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) on_create: $*"; }

service_active() { command -v systemctl >/dev/null && systemctl is-active --quiet "$1"; }

# move_to_data_root DIR NAME: copy DIR's content to $DATA_ROOT/NAME and bind-mount it back.
move_to_data_root() {
  local dir="$1" target="$DATA_ROOT/$2"
  if grep -qsE "^${target}[[:space:]]+${dir}[[:space:]]" "$FSTAB"; then
    log "$dir is already bound to $target; nothing to do"
    return
  fi
  mkdir -p "$dir" "$target"
  if [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    log "copying existing data of $dir to $target"
    cp -a "$dir/." "$target/"
  fi
  echo "$target $dir none bind 0 0" >> "$FSTAB"
  mount --bind "$target" "$dir"
  log "bound $dir to $target (persisted in $FSTAB)"
}

# Jobs run as non-root users: give them a sticky, world-writable folder (like /tmp).
prepare_job_dir() {
  mkdir -p "$DATA_ROOT/jobs"
  chmod 1777 "$DATA_ROOT/jobs"
  log "job folder $DATA_ROOT/jobs ready"
}

log "starting; data root $DATA_ROOT"
if ! mountpoint -q "$DATA_ROOT"; then
  log "$DATA_ROOT is not a mount point (no local NVMe or secondary volume); containerd and kubelet stay on the root volume"
  prepare_job_dir
  exit 0
fi
prepare_job_dir

restart=()
for svc in kubelet containerd; do
  if service_active "$svc"; then
    log "stopping $svc while its data root moves"
    systemctl stop "$svc"
    restart=("$svc" "${restart[@]}")
  fi
done

move_to_data_root "$CONTAINERD_DIR" containerd
move_to_data_root "$KUBELET_DIR" kubelet

for svc in "${restart[@]}"; do
  log "starting $svc"
  systemctl start "$svc"
done
log "done: $(df -h "$DATA_ROOT" | tail -1)"
