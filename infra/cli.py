"""`hyperpod-cdk`: the operator CLI.

  hyperpod-cdk topology [--from FILE] [--format mermaid|html] [--output FILE] [--summary]

Each command has --help. Errors are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from infra import topology

ROOT = Path(__file__).resolve().parent.parent
MERMAID_JS = ROOT / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"


class CliError(Exception):
    """A problem to report in one line, with exit status 2."""


def _live_nodes() -> dict:
    if shutil.which("kubectl") is None:
        raise CliError("kubectl is not on PATH; install it or pass --from FILE (a `kubectl get nodes -o json` dump)")
    result = subprocess.run(["kubectl", "get", "nodes", "-o", "json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise CliError(f"kubectl get nodes failed: {result.stderr.strip()[-300:]}")
    return json.loads(result.stdout)


def cmd_topology(args) -> int:
    if args.from_file:
        try:
            doc = json.loads(Path(args.from_file).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise CliError(f"--from {args.from_file}: {err}") from None
    else:
        doc = _live_nodes()
    nodes = topology.parse_nodes(doc)
    if args.summary:
        text = topology.summary_text(nodes)
    else:
        text = topology.mermaid(nodes, cluster=args.cluster_name)
        if args.format == "html":
            if not MERMAID_JS.is_file():
                raise CliError(f"{MERMAID_JS} is missing; run `make install` (npm ci installs mermaid)")
            text = topology.html_page(text, MERMAID_JS.read_text())
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hyperpod-cdk", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    topo = sub.add_parser(
        "topology",
        help="draw the EC2 network topology of the cluster's nodes",
        description=topology.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  hyperpod-cdk topology > topology.mmd\n"
        "  hyperpod-cdk topology --from nodes.json --format html --output topology.html\n"
        "  hyperpod-cdk topology --summary",
    )
    topo.add_argument("--from", dest="from_file", metavar="FILE", help="node list JSON (default: kubectl get nodes -o json)")
    topo.add_argument("--format", choices=["mermaid", "html"], default="mermaid", help="Mermaid text or a self-contained HTML page")
    topo.add_argument("--output", metavar="FILE", help="write here instead of stdout")
    topo.add_argument("--summary", action="store_true", help="per layer-3 network node: nodes, schedulable nodes, GPUs")
    topo.add_argument("--cluster-name", default="HyperPod cluster", help="label of the diagram's root")
    topo.set_defaults(func=cmd_topology)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
