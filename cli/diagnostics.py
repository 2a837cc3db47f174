"""What the acceptance run's GPU tests print, read and judged: nccl-tests' all_reduce_perf
(against the bus bandwidth the references publish for the instance type, infra/catalogue.py),
DCGM's `dcgmi diag`, and the rounds of node pairs a fabric that falls short is run again in,
with the node short in each of its pairs. `hyperpod-cdk accept` (cli/accept/) runs them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from infra import catalogue


# ------------------------------------------------------------------ NCCL output


@dataclass(frozen=True)
class NcclRow:
    size: int
    busbw: float  # out-of-place, GB/s
    busbw_in_place: float
    wrong: int


@dataclass(frozen=True)
class NcclResult:
    rows: tuple[NcclRow, ...]
    avg_busbw: float | None
    out_of_bounds: int | None
    errors: tuple[str, ...]

    @property
    def largest(self) -> NcclRow | None:
        return max(self.rows, key=lambda r: r.size) if self.rows else None


# What mpirun --tag-output ("[1,0]<stdout>:") or srun --label ("0: ") put before each line.
_TAG = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s)")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+\s+\S+\s+\S+\s+([\d.]+)\s+(\d+|N/A)\s+\S+\s+\S+\s+([\d.]+)\s+(\d+|N/A)\s*$")
# How nccl-tests reports an error it stops on (its common.cu): "Test NCCL failure <file>:<line> '<why>'".
_FAILURE = re.compile(r"(Test (?:NCCL |CUDA )?failure.*)")


def parse_nccl(text: str) -> NcclResult:
    """nccl-tests' all_reduce_perf output, as mpirun prints it from the launcher or as a
    Slurm run labels it: the sweep's rows, the closing summary and the error it stopped on."""
    rows, errors = [], []
    avg = oob = None
    for raw in text.splitlines():
        line = _TAG.sub("", raw, count=1)
        if match := _ROW.match(line):
            size, _, busbw, wrong, busbw_ip, wrong_ip = match.groups()
            bad = sum(int(w) for w in (wrong, wrong_ip) if w != "N/A")
            rows.append(NcclRow(int(size), float(busbw), float(busbw_ip), bad))
        elif line.lstrip().startswith("# Avg bus bandwidth"):
            avg = float(line.split(":", 1)[1])
        elif line.lstrip().startswith("# Out of bounds values"):
            oob = int(line.split(":", 1)[1].split()[0])
        elif match := _FAILURE.search(line):
            errors.append(match.group(1).strip())
    return NcclResult(tuple(rows), avg, oob, tuple(errors))


# ------------------------------------------------------------------ DCGM output


@dataclass(frozen=True)
class DcgmResult:
    tests: tuple[tuple[str, str, str], ...]  # (section, test, result)
    messages: tuple[tuple[str, str], ...]  # (Info | Warning | Error, text)

    @property
    def failed(self) -> list[str]:
        return [f"{test}: {result}" for _, test, result in self.tests if result.startswith("Fail")]

    @property
    def errors(self) -> list[str]:
        return [text for kind, text in self.messages if kind == "Error"]


_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_MESSAGE_KINDS = ("Info", "Warning", "Error")


def parse_dcgm(text: str) -> DcgmResult:
    """`dcgmi diag` text output: one row per test under its section, Info/Warning/Error rows
    explaining the test above. dcgmi wraps a long cell at a fixed width onto rows with an empty
    first column, cutting words where the width ends: a chunk that fills the width runs on into
    the next, a shorter one ended at a space."""
    section, tests, messages = "", [], []
    for line in text.splitlines():
        line = line.strip()
        if match := _SECTION.match(line):
            section = match.group(1)
            continue
        if not line.startswith("|") or line.count("|") < 3:
            continue
        left, raw = line[1:-1].split("|", 1)
        left, right = left.strip(), raw.strip()
        width = len(raw) - 3  # a space before the text, two after the widest chunk
        if (left, right) == ("Diagnostic", "Result") or section == "Metadata":
            continue
        if not left:  # a wrapped cell: it continues the message above (tests' results are short)
            if messages and messages[-1][2] == len(tests):
                kind, body, _, full = messages[-1]
                chunk = raw[1:].rstrip()  # a space that starts the chunk is the text's own
                joined = body + chunk if full else f"{body} {chunk.lstrip()}"
                messages[-1] = (kind, joined, len(tests), len(raw.rstrip()) - 1 >= width)
            continue
        if left in _MESSAGE_KINDS:
            messages.append((left, right, len(tests), len(raw.rstrip()) - 1 >= width))
        else:
            tests.append((section, left, right))
    return DcgmResult(tuple(tests), tuple((kind, body) for kind, body, _, _ in messages))


# ------------------------------------------------------------------ judging


def judge_nccl(result: NcclResult, instance_type: str, min_percent: int) -> tuple[str, str]:
    """(status, detail) of one all_reduce_perf run against the published figure for the type."""
    row = result.largest
    if result.errors:
        return "fail", f"NCCL test failed: {result.errors[0]}"
    if row is None:
        return "fail", "no all_reduce_perf results in the log"
    if row.wrong or result.out_of_bounds:
        return "fail", f"wrong results: {row.wrong or result.out_of_bounds} out-of-bounds values"
    measured = f"{row.busbw:.2f} GB/s bus bandwidth at {_size(row.size)}"
    published = catalogue.NCCL_ALL_REDUCE_BUSBW.get(instance_type)
    if published is None:
        return "warn", f"{measured}; no published figure for {instance_type} to judge it by"
    floor = published.busbw_gbps * min_percent / 100
    basis = f"published {published.busbw_gbps:.2f} GB/s ({published.published}), floor {min_percent}% = {floor:.2f}"
    if row.size != published.message_bytes:
        return "fail", f"{measured}: the sweep stopped before {_size(published.message_bytes)}, where {basis}"
    return ("pass" if row.busbw >= floor else "fail"), f"{measured}; {basis}"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def judge_dcgm(result: DcgmResult) -> tuple[str, str]:
    if not result.tests:
        return "fail", "no dcgmi diag results in the log"
    failed = result.failed + [f"Error: {e}" for e in result.errors]
    if failed:
        warning = next((text for kind, text in result.messages if kind == "Warning"), "")
        return "fail", "; ".join(failed) + (f" ({clip(warning)})" if warning else "")
    return "pass", f"{len(result.tests)} tests, none failed"


def clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def pair_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The ring of pairs (each node with the next, the last with the first) in rounds of
    disjoint pairs, so each pair has its nodes to itself: every node runs in two different
    pairs (three nodes or more), and a node short in both is the suspect, not its partners."""
    n = len(nodes)
    ring = [(nodes[i], nodes[(i + 1) % n]) for i in range(n)]
    rounds = [ring[0:n - n % 2:2], ring[1::2]]
    if n % 2:  # the pair closing an odd ring shares a node with both rounds
        rounds.append([ring[-1]])
    return rounds


def suspects(pairs: dict[tuple[str, str], bool]) -> list[str]:
    """Nodes every one of whose pairs fell short (pairs: pair -> passed)."""
    seen: dict[str, list[bool]] = {}
    for pair, ok in pairs.items():
        for node in pair:
            seen.setdefault(node, []).append(ok)
    return [node for node, results in seen.items() if not any(results)]
