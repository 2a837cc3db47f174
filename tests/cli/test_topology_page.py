"""The topology page as people see it: rendered by a real headless Chromium (Debian's) in a
1400 px window at 16, 64 and 256 nodes, measured from the rendered page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from cli import topology

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400

# Appended by the test only: reads the laid-out page (font sizes in px, boxes, colours).
MEASURE = """<script>
const groups = [...document.querySelectorAll('.group')].map(g => {
  const label = g.querySelector('.label'), box = label.getBoundingClientRect();
  return {text: label.textContent, px: parseFloat(getComputedStyle(label).fontSize), left: box.left, right: box.right,
          height: box.height, health: g.dataset.health, background: getComputedStyle(g).backgroundColor};
});
const pre = document.createElement('pre');
pre.id = 'measure';
pre.textContent = JSON.stringify({groups, text: document.body.innerText});
document.body.appendChild(pre);
</script>"""


def _cluster(count: int) -> dict:
    """`kubectl get nodes -o json` of `count` p5 nodes: 4 under each layer-3 network node, 4
    layer-3 under each layer-2; every seventh node not schedulable."""
    items = []
    for i in range(count):
        l3, l2 = i // 4, i // 16
        items.append({
            "metadata": {"name": f"hyperpod-i-{i:04d}", "labels": {
                "node.kubernetes.io/instance-type": "ml.p5.48xlarge",
                "sagemaker.amazonaws.com/node-health-status": "Unschedulable" if i % 7 == 3 else "Schedulable",
                "topology.k8s.aws/network-node-layer-1": "nn-1-0",
                "topology.k8s.aws/network-node-layer-2": f"nn-2-{l2:03d}",
                "topology.k8s.aws/network-node-layer-3": f"nn-3-{l3:04d}"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}},
        })
    return {"items": items}


def _render(page: str, where) -> dict:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    path = where / "page.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"))
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},900", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    (found,) = re.findall(r'<pre id="measure">(.*?)</pre>', result.stdout, flags=re.S)
    return json.loads(found.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"'))


@pytest.mark.parametrize("count", [16, 64, 256])
def test_every_group_is_drawn_legibly_and_unhealthy_groups_stand_out(count, tmp_path):
    nodes = topology.parse_nodes(_cluster(count))
    measured = _render(topology.html_page(nodes), tmp_path)
    groups = measured["groups"]
    assert sorted(g["text"] for g in groups) == sorted({n.layers[2] for n in nodes})  # one box per layer-3 node
    for g in groups:
        assert g["px"] >= 12 and g["height"] >= g["px"], g  # drawn, at a size people read
        assert 0 <= g["left"] and g["right"] <= WIDTH, g  # inside the window, no horizontal scroll
    bad = {n.layers[2] for n in nodes if n.health != "Schedulable"}
    assert {g["text"] for g in groups if g["health"] == "degraded"} == bad
    colours = {g["health"]: g["background"] for g in groups}
    assert colours["degraded"] != colours["healthy"]
    # the summary and the answer people come for are on the page
    rows = topology.summary(nodes)
    assert f"Largest job with required topology at layer 3: {topology.largest_required_job(rows)} node(s)" in measured["text"]
    assert all(n.name in measured["text"] for n in nodes if n.health != "Schedulable")  # drawn individually


def test_markdown_summary_for_pull_requests():
    nodes = topology.parse_nodes(_cluster(16))
    text = topology.markdown(nodes)
    assert "| layer-3 network node | layer-2 | schedulable / nodes | GPUs | types | not schedulable |" in text
    assert "| nn-3-0000 | nn-2-000 | 3 / 4 | 32 | ml.p5.48xlarge | hyperpod-i-0003 (Unschedulable) |" in text
    assert "largest job with required topology at layer 3: **4 node(s)**" in text
