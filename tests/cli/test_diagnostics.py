"""What `hyperpod-cdk accept` reads of its GPU tests (cli/diagnostics.py), held to real recorded
outputs (their sources in tests/fixtures/acceptance/SOURCE.md): nccl-tests' all_reduce_perf
judged against the bus bandwidth the awsome references publish, DCGM's dcgmi diag with its
wrapped rows, and the pairs that name a weak node."""

from __future__ import annotations

import re

import pytest

from cli import diagnostics
from infra import catalogue
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "acceptance"
P5 = (FIXTURES / "nccl" / "awsome-2x-p5.48xlarge.log").read_text()
P4DE = (FIXTURES / "nccl" / "awsome-2x-p4de.24xlarge.log").read_text()
EKS = (FIXTURES / "nccl" / "awsome-eks-2x-p5.48xlarge-excerpt.log").read_text()
DCGM_FAIL = (FIXTURES / "dcgm" / "h100-cuda-not-initialized.txt").read_text()
DCGM_PASS = (FIXTURES / "dcgm" / "h200-all-pass.txt").read_text()


def slowed(log: str, factor: float) -> str:
    """The recorded p5 run with every bandwidth figure scaled: a fabric that falls short,
    made here from the real output (nothing like it is published)."""
    def scale(match):
        cols = match.group(0).split()
        for i in (6, 7, 10, 11):
            cols[i] = f"{float(cols[i]) * factor:.2f}"
        return "  ".join(cols)
    return re.sub(r"(?m)(?<=^0: )\s*\d+\s+\d+\s+float.*$", scale, log)


# ------------------------------------------------------------------ the recorded outputs


def test_the_awsome_p5_run_parses_to_its_published_figures():
    result = diagnostics.parse_nccl(P5)
    assert len(result.rows) == 32 and result.rows[0].size == 8
    # The README's last row: 17179869184 B, busbw 487.09 out-of-place, 487.26 in place, 0 wrong.
    assert result.largest == diagnostics.NcclRow(17179869184, 487.09, 487.26, 0)


def test_the_eks_launcher_log_parses_through_mpiruns_tags():
    result = diagnostics.parse_nccl(EKS)
    assert [r.size for r in result.rows] == [0, 67108864, 134217728, 268435456, 536870912, 1073741824, 2147483648]
    assert result.largest.busbw == 437.79 and result.avg_busbw == 52.9753 and result.out_of_bounds == 0


def test_the_error_nccl_tests_stops_on_fails_the_run_and_an_nccl_warning_does_not():
    text = ("[1,8]<stdout>:hyperpod-i-0a1b2c3d4e5f60702:93:93 [0] NCCL INFO NCCL WARN-free line\n"
            "hyperpod-i-0a1b2c3d4e5f60702: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'\n")
    result = diagnostics.parse_nccl(text)
    assert diagnostics.parse_nccl(P5 + "[1,3]<stdout>:host:9:9 [3] NCCL WARN NET/OFI something benign\n").errors == ()
    assert diagnostics.judge_nccl(result, "ml.p5.48xlarge", 90) == (
        "fail", "NCCL test failed: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'")


def test_the_published_runs_pass_against_their_own_figures():
    assert diagnostics.judge_nccl(diagnostics.parse_nccl(P5), "ml.p5.48xlarge", 100)[0] == "pass"
    assert diagnostics.judge_nccl(diagnostics.parse_nccl(P4DE), "ml.p4de.24xlarge", 100)[0] == "pass"


def test_a_fabric_under_the_floor_fails_with_both_figures():
    status, detail = diagnostics.judge_nccl(diagnostics.parse_nccl(slowed(P5, 0.8)), "ml.p5.48xlarge", 90)
    assert status == "fail"
    assert detail == ("389.67 GB/s bus bandwidth at 16 GiB; published 487.09 GB/s (2024-04-19), floor 90% = 438.38")


def test_a_sweep_that_stops_short_of_the_published_size_is_not_compared():
    # The EKS excerpt stops at 2 GiB (437.79 GB/s); the published p5 figure is at 16 GiB.
    status, detail = diagnostics.judge_nccl(diagnostics.parse_nccl(EKS), "ml.p5.48xlarge", 90)
    assert status == "fail" and "stopped before 16 GiB" in detail


def test_a_type_without_a_published_figure_is_reported_not_judged():
    status, detail = diagnostics.judge_nccl(diagnostics.parse_nccl(P5), "ml.p5en.48xlarge", 90)
    assert status == "warn" and "no published figure for ml.p5en.48xlarge" in detail


def test_the_published_figures_are_the_last_rows_of_the_recorded_runs():
    # catalogue.NCCL_ALL_REDUCE_BUSBW carries the awsome README's figures; the recordings are that README.
    for log, itype in ((P5, "ml.p5.48xlarge"), (P4DE, "ml.p4de.24xlarge")):
        row, published = diagnostics.parse_nccl(log).largest, catalogue.NCCL_ALL_REDUCE_BUSBW[itype]
        assert (row.busbw, row.size) == (published.busbw_gbps, published.message_bytes)


def test_dcgm_failures_are_named_with_the_warning_read_across_wrapped_rows():
    result = diagnostics.parse_dcgm(DCGM_FAIL)
    assert result.failed == ["GPU Memory: Fail - All"]
    assert ("Integration", "PCIe", "Skip - All") in result.tests
    warning = next(text for kind, text in result.messages if kind == "Warning")
    assert warning.startswith("GPU 0 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. Restart DCGM.")
    assert "'system not yet initialized'" in warning and "https://github.com/nvidia/cuda-samples" in warning
    assert diagnostics.judge_dcgm(result)[0] == "fail"


def test_a_clean_dcgm_run_passes_and_an_empty_log_does_not():
    assert diagnostics.judge_dcgm(diagnostics.parse_dcgm(DCGM_PASS)) == ("pass", "16 tests, none failed")
    assert diagnostics.judge_dcgm(diagnostics.parse_dcgm("")) == ("fail", "no dcgmi diag results in the log")


# ------------------------------------------------------------------ naming the weak node


@pytest.mark.parametrize("n", range(3, 9))
def test_pair_rounds_put_every_node_in_two_pairs_and_no_node_twice_in_a_round(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = diagnostics.pair_rounds(nodes)
    for round_ in rounds:
        members = [node for pair in round_ for node in pair]
        assert len(members) == len(set(members))
    pairs = [pair for round_ in rounds for pair in round_]
    assert all(sum(node in pair for pair in pairs) == 2 for node in nodes)


def test_only_the_node_short_in_all_its_pairs_is_a_suspect():
    pairs = {("a", "b"): False, ("b", "c"): False, ("c", "d"): True, ("d", "a"): True}
    assert diagnostics.suspects(pairs) == ["b"]
