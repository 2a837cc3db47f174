#!/bin/bash
# HyperPod lifecycle script (OnCreate), run as root on every node when it is created.
#
# HyperPod mounts the secondary EBS volume of InstanceStorageConfigs at /opt/sagemaker,
# sometimes a little after this script starts. Container images and pod ephemeral storage
# are large on GPU nodes, so, as the AWS reference script does, containerd's data root and
# kubelet's directory move there: containerd through its own configuration, kubelet through
# a symlink. Both live on the root volume and survive a reboot; nothing is added to
# /etc/fstab (a bad fstab line can stop a node from booting).
#
# Pods must not reach the node's credentials: HyperPod has no instance metadata options, so a
# systemd unit drops traffic from pods (the VPC CNI's eni+ interfaces, routed through FORWARD)
# to the instance metadata service at every boot, before kubelet starts any pod. That is the
# rule of the EKS user guide ("Restrict access to the instance profile assigned to the worker
# node") and the EKS Best Practices Guide (Security, IAM). Host-network agents (the HyperPod
# health agent, the Pod Identity agent) send from the host, not through FORWARD, and pods still
# reach the Pod Identity endpoint, 169.254.170.23.
# The guard fails closed: iptables waits for the xtables lock that kube-proxy and aws-node
# hold at times (-w, as the EKS AMI's own kubelet unit does), tries again a bounded number of
# times, and kubelet Requires the unit (a drop-in), so a node whose rule is not in place runs
# no kubelet, goes NotReady and is replaced, instead of running pods that reach the node role.
# At creation a guard that cannot be placed fails this script, and so the node.
#
# Written for Amazon Linux 2's bash 4.2: no arrays (an empty one aborts under `set -u`
# there). Every step is logged, and running the script again changes nothing.
set -euo pipefail

DATA_ROOT="${DATA_ROOT:-/opt/sagemaker}"
CONTAINERD_DIR="${CONTAINERD_DIR:-/var/lib/containerd}"
KUBELET_DIR="${KUBELET_DIR:-/var/lib/kubelet}"
OS_RELEASE="${OS_RELEASE:-/etc/os-release}"
# Amazon Linux 2: the EKS bootstrap copies this file to /etc/containerd/config.toml.
AL2_CONTAINERD_CONFIG="${AL2_CONTAINERD_CONFIG:-/etc/eks/containerd/containerd-config.toml}"
SYSTEMD_DIR="${SYSTEMD_DIR:-/etc/systemd/system}"
MOUNT_WAIT_SECONDS="${MOUNT_WAIT_SECONDS:-60}"
LOG_FILE="${LOG_FILE:-/var/log/hyperpod-cdk/on_create.log}"

GUARD_DIR="${GUARD_DIR:-/usr/local/sbin}"

IMDS_UNIT="hyperpod-cdk-block-pod-imds.service"
IMDS_GUARD="$GUARD_DIR/hyperpod-cdk-block-pod-imds"
# The rule: checked first (-C), so a restart of the unit adds it once.
IMDS_RULE="FORWARD --in-interface eni+ --destination 169.254.169.254/32 --jump DROP"
# Seconds each iptables call waits for the xtables lock (the EKS AMI's kubelet unit: -w 5),
# tries, and seconds between them; the unit's start timeout covers them all.
IMDS_LOCK_WAIT_S="${IMDS_LOCK_WAIT_S:-5}"
IMDS_TRIES="${IMDS_TRIES:-12}"
IMDS_RETRY_S="${IMDS_RETRY_S:-5}"
IMDS_TIMEOUT_S=$((IMDS_TRIES * (2 * IMDS_LOCK_WAIT_S + IMDS_RETRY_S) + 30))

CONTAINERD_ROOT="$DATA_ROOT/containerd/data-root"
KUBELET_ROOT="$DATA_ROOT/kubelet"

mkdir -p "$(dirname "$LOG_FILE")"
exec > >(tee -a "$LOG_FILE") 2>&1

log() { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) on_create: $*"; }

service_active() { command -v systemctl >/dev/null && systemctl is-active --quiet "$1"; }

wait_for_data_root() {
  local deadline=$((SECONDS + MOUNT_WAIT_SECONDS))
  while ! mountpoint -q "$DATA_ROOT"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      return 1
    fi
    log "waiting for $DATA_ROOT to be mounted"
    sleep 1
  done
}

os_version() {
  # VERSION_ID is "2" on Amazon Linux 2 and "2023" on Amazon Linux 2023.
  if [ -r "$OS_RELEASE" ]; then
    sed -n 's/^VERSION_ID="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$OS_RELEASE"
  fi
}

# The containerd data root moves once; later runs only re-assert the configuration.
move_containerd_root() {
  if [ ! -d "$CONTAINERD_ROOT" ]; then
    mkdir -p "$CONTAINERD_ROOT"
    if [ -d "$CONTAINERD_DIR" ] && [ -n "$(ls -A "$CONTAINERD_DIR" 2>/dev/null)" ]; then
      log "copying existing containerd data to $CONTAINERD_ROOT"
      cp -a "$CONTAINERD_DIR/." "$CONTAINERD_ROOT/"
    fi
  fi
  local version
  version="$(os_version)"
  case "$version" in
    2)
      if [ ! -f "$AL2_CONTAINERD_CONFIG" ]; then
        log "Amazon Linux 2 without $AL2_CONTAINERD_CONFIG; containerd keeps its data root"
        return
      fi
      if grep -qE '^[# ]*root[[:space:]]*=' "$AL2_CONTAINERD_CONFIG"; then
        sed -i -E "s|^[# ]*root[[:space:]]*=.*|root = \"$CONTAINERD_ROOT\"|" "$AL2_CONTAINERD_CONFIG"
      else
        # A top-level key must come before the first [table]: put it first.
        sed -i "1i root = \"$CONTAINERD_ROOT\"" "$AL2_CONTAINERD_CONFIG"
      fi
      log "containerd data root set to $CONTAINERD_ROOT in $AL2_CONTAINERD_CONFIG"
      ;;
    2023)
      # nodeadm writes containerd's config at every boot, so the root is given on the
      # command line instead (the reference script replaces the whole config; this keeps
      # the one nodeadm writes, NVIDIA runtime included).
      mkdir -p "$SYSTEMD_DIR/containerd.service.d"
      printf '[Service]\nExecStart=\nExecStart=/usr/bin/containerd --root %s\n' "$CONTAINERD_ROOT" \
        > "$SYSTEMD_DIR/containerd.service.d/10-hyperpod-data-root.conf"
      if command -v systemctl >/dev/null; then systemctl daemon-reload; fi
      log "containerd data root set to $CONTAINERD_ROOT by a systemd drop-in"
      ;;
    *)
      log "unknown OS version '$version'; containerd keeps its data root"
      ;;
  esac
}

move_kubelet_dir() {
  if [ -L "$KUBELET_DIR" ]; then
    log "$KUBELET_DIR already points to $(readlink "$KUBELET_DIR"); nothing to do"
    return
  fi
  mkdir -p "$KUBELET_ROOT"
  if [ -d "$KUBELET_DIR" ]; then
    if [ -n "$(ls -A "$KUBELET_DIR" 2>/dev/null)" ]; then
      log "moving existing kubelet data to $KUBELET_ROOT"
      cp -a "$KUBELET_DIR/." "$KUBELET_ROOT/"
    fi
    rm -rf "$KUBELET_DIR"
  fi
  mkdir -p "$(dirname "$KUBELET_DIR")"
  ln -s "$KUBELET_ROOT" "$KUBELET_DIR"
  log "$KUBELET_DIR now points to $KUBELET_ROOT"
}

# A oneshot unit, enabled, so the rule is back at every boot before kubelet (a node recovered
# by reboot does not run this script again) and in place now; kubelet requires it.
block_pod_imds() {
  mkdir -p "$GUARD_DIR" "$SYSTEMD_DIR/kubelet.service.d"
  cat > "$IMDS_GUARD" <<GUARD
#!/bin/sh
# Written by the hyperpod-cdk lifecycle script: pods' traffic to 169.254.169.254 dropped, or a failure.
try=1
while :; do
  if iptables -w $IMDS_LOCK_WAIT_S -C $IMDS_RULE 2>/dev/null || iptables -w $IMDS_LOCK_WAIT_S -I $IMDS_RULE; then
    echo "pods' traffic to the instance metadata service is dropped"
    exit 0
  fi
  if [ "\$try" -ge $IMDS_TRIES ]; then
    echo "the rule is not in place after $IMDS_TRIES tries; kubelet stays stopped" >&2
    exit 1
  fi
  try=\$((try + 1))
  sleep $IMDS_RETRY_S
done
GUARD
  chmod 0755 "$IMDS_GUARD"
  cat > "$SYSTEMD_DIR/$IMDS_UNIT" <<UNIT
[Unit]
Description=Drop pod traffic to the instance metadata service (hyperpod-cdk)
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
TimeoutStartSec=$IMDS_TIMEOUT_S
ExecStart=$IMDS_GUARD

[Install]
WantedBy=multi-user.target
RequiredBy=kubelet.service
UNIT
  # kubelet starts only once the rule is in place, whatever enabled it.
  printf '[Unit]\nRequires=%s\nAfter=%s\n' "$IMDS_UNIT" "$IMDS_UNIT" > "$SYSTEMD_DIR/kubelet.service.d/10-hyperpod-cdk-imds-guard.conf"
  if command -v systemctl >/dev/null; then
    systemctl daemon-reload
    systemctl enable --now "$IMDS_UNIT"
  fi
  log "pods' traffic to 169.254.169.254 dropped ($IMDS_UNIT, required by kubelet)"
}

log "starting; data root $DATA_ROOT"
block_pod_imds
if ! wait_for_data_root; then
  log "$DATA_ROOT is not mounted after ${MOUNT_WAIT_SECONDS}s (no secondary volume); containerd and kubelet stay on the root volume"
  exit 0
fi

# Plain variables, not an array: see the bash 4.2 note above.
restart_kubelet=no
restart_containerd=no
if service_active kubelet; then
  log "stopping kubelet while its directory moves"
  systemctl stop kubelet
  restart_kubelet=yes
fi
if service_active containerd; then
  log "stopping containerd while its data root moves"
  systemctl stop containerd
  restart_containerd=yes
fi

move_containerd_root
move_kubelet_dir

if [ "$restart_containerd" = yes ]; then
  log "starting containerd"
  systemctl start containerd
fi
if [ "$restart_kubelet" = yes ]; then
  log "starting kubelet"
  systemctl start kubelet
fi
log "done: $(df -h "$DATA_ROOT" | tail -1)"
