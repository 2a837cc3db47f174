"""The Pod Security Standards as the Kubernetes documentation states them, to judge a pod by.

Source: https://kubernetes.io/docs/concepts/security/pod-security-standards/ ("Profile
Details", the Baseline and Restricted tables: each control's restricted fields and allowed
values, with the notes under Running as Non-root and Seccomp), as read in Dec 2026. Written
here as data from those tables, one row a control: no maintained evaluator is on PyPI or in
Debian (the reference one is the Go module k8s.io/pod-security-admission). Windows-only rules
(the HostProcess row aside) do not apply to these Linux pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

UNDEFINED = object()
CONTAINERS = ("containers", "initContainers", "ephemeralContainers")


def _containers(path: str) -> list[str]:
    return [f"spec.{kind}[*].{path}" for kind in CONTAINERS]


def _pod_and_containers(path: str) -> list[str]:
    return [f"spec.{path}", *_containers(path)]


def values(obj: dict, path: str) -> list:
    """What `path` selects in a pod: `[*]` is every element of a list (a list that is not there
    selects nothing); a scalar not set is UNDEFINED."""
    current = [obj]
    for part in path.split("."):
        wild = part.endswith("[*]")
        key = part[:-3] if wild else part
        nxt = []
        for item in current:
            value = item.get(key, UNDEFINED) if isinstance(item, dict) else UNDEFINED
            if wild:
                nxt += value if isinstance(value, list) else []
            else:
                nxt.append(value)
        current = nxt
    return current


@dataclass(frozen=True)
class Control:
    level: str
    name: str
    fields: tuple[str, ...]
    allowed: Callable[[object], bool]

    def violations(self, pod: dict) -> list[str]:
        return [f"{self.level} {self.name}: {path} = {v!r}" for path in self.fields for v in values(pod, path) if not self.allowed(v)]


def one_of(*allowed) -> Callable[[object], bool]:
    return lambda v: any(v is a if a is UNDEFINED else (v is not UNDEFINED and v == a and type(v) is type(a)) for a in allowed)


SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
)
DEFAULT_CAPABILITIES = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID",
    "SETPCAP", "SETUID", "SYS_CHROOT",
)
_HOST_FIELDS = tuple(
    f"spec.{kind}[*].{where}.host"
    for kind in ("containers", "initContainers")
    for where in (
        "livenessProbe.httpGet", "readinessProbe.httpGet", "startupProbe.httpGet", "livenessProbe.tcpSocket",
        "readinessProbe.tcpSocket", "startupProbe.tcpSocket", "lifecycle.postStart.tcpSocket", "lifecycle.preStop.tcpSocket",
        "lifecycle.postStart.httpGet", "lifecycle.preStop.httpGet",
    )
)

BASELINE = (
    Control("baseline", "HostProcess", ("spec.securityContext.windowsOptions.hostProcess", *_containers("securityContext.windowsOptions.hostProcess")), one_of(UNDEFINED, False)),
    Control("baseline", "Host Namespaces", ("spec.hostNetwork", "spec.hostPID", "spec.hostIPC"), one_of(UNDEFINED, False)),
    Control("baseline", "Privileged Containers", tuple(_containers("securityContext.privileged")), one_of(UNDEFINED, False)),
    Control("baseline", "Capabilities", tuple(_containers("securityContext.capabilities.add[*]")), one_of(UNDEFINED, *DEFAULT_CAPABILITIES)),
    Control("baseline", "HostPath Volumes", ("spec.volumes[*].hostPath",), one_of(UNDEFINED)),
    Control("baseline", "Host Ports", tuple(_containers("ports[*].hostPort")), one_of(UNDEFINED, 0)),
    Control("baseline", "Host Probes / Lifecycle Hooks", _HOST_FIELDS, one_of(UNDEFINED, "")),
    Control("baseline", "AppArmor", tuple(_pod_and_containers("securityContext.appArmorProfile.type")), one_of(UNDEFINED, "RuntimeDefault", "Localhost")),
    Control("baseline", "SELinux type", tuple(_pod_and_containers("securityContext.seLinuxOptions.type")),
            one_of(UNDEFINED, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")),
    Control("baseline", "SELinux user and role",
            (*_pod_and_containers("securityContext.seLinuxOptions.user"), *_pod_and_containers("securityContext.seLinuxOptions.role")), one_of(UNDEFINED, "")),
    Control("baseline", "/proc Mount Type", tuple(_containers("securityContext.procMount")), one_of(UNDEFINED, "Default")),
    Control("baseline", "Seccomp", tuple(_pod_and_containers("securityContext.seccompProfile.type")), one_of(UNDEFINED, "RuntimeDefault", "Localhost")),
    Control("baseline", "Sysctls", ("spec.securityContext.sysctls[*].name",), one_of(UNDEFINED, *SAFE_SYSCTLS)),
)
RESTRICTED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret")
RESTRICTED = (
    Control("restricted", "Privilege Escalation", tuple(_containers("securityContext.allowPrivilegeEscalation")), one_of(False)),
    Control("restricted", "Running as Non-root user", tuple(_pod_and_containers("securityContext.runAsUser")),
            lambda v: v is UNDEFINED or (isinstance(v, int) and v != 0)),
    Control("restricted", "Capabilities (add)", tuple(_containers("securityContext.capabilities.add[*]")), one_of(UNDEFINED, "NET_BIND_SERVICE")),
)


def _containers_of(pod: dict) -> list[dict]:
    return [c for kind in CONTAINERS for c in pod.get("spec", {}).get(kind, [])]


def _restricted_rules(pod: dict) -> list[str]:
    """The restricted rows that read more than one field at once (the notes under them)."""
    out = []
    spec = pod.get("spec", {})
    for volume in spec.get("volumes", []):  # Volume Types: each volume sets one of these
        if not any(volume.get(kind) is not None for kind in RESTRICTED_VOLUMES):
            out.append(f"restricted Volume Types: {volume.get('name')} is {sorted(set(volume) - {'name'})}")
    pod_sc = spec.get("securityContext", {})
    for c in _containers_of(pod):
        sc = c.get("securityContext", {})
        # Running as Non-root: true, or the container's undefined where the pod's is true.
        if sc.get("runAsNonRoot") is False or (sc.get("runAsNonRoot") is not True and pod_sc.get("runAsNonRoot") is not True):
            out.append(f"restricted Running as Non-root: {c['name']}")
        # Seccomp: RuntimeDefault or Localhost, the container's undefined where the pod's is set.
        own = sc.get("seccompProfile", {}).get("type")
        if own not in ("RuntimeDefault", "Localhost") and not (own is None and pod_sc.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost")):
            out.append(f"restricted Seccomp: {c['name']}")
        # Capabilities: drop a list that includes ALL.
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            out.append(f"restricted Capabilities (drop ALL): {c['name']}")
    if pod_sc.get("seccompProfile", {}).get("type") == "Unconfined":
        out.append("restricted Seccomp: the pod's is Unconfined")
    return out


def _annotation_rules(pod: dict) -> list[str]:
    """AppArmor's annotation form (baseline): runtime/default or localhost/*."""
    out = []
    for key, value in pod.get("metadata", {}).get("annotations", {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (value == "runtime/default" or value.startswith("localhost/")):
            out.append(f"baseline AppArmor: {key} = {value!r}")
    return out


def violations(pod: dict, level: str) -> list[str]:
    """Every control of `level` (baseline, or restricted: baseline's and its own) a pod breaks."""
    found = [v for control in BASELINE for v in control.violations(pod)] + _annotation_rules(pod)
    if level == "restricted":
        found += [v for control in RESTRICTED for v in control.violations(pod)] + _restricted_rules(pod)
    return found


def pod_of(template: dict) -> dict:
    """A pod template as the Pod it becomes."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": template.get("metadata", {}), "spec": template["spec"]}
