"""The topology page as people see it: rendered by a real headless Chromium (Debian's) in a
1400 px window at 66 and 258 nodes (node and pod dumps made in the test, with cordoned,
NotReady, unreachable and replacement-pending nodes), measured from the rendered page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from cli import topology
from tests.cli.cluster_dumps import cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400

# Appended by the test only: reads the laid-out page (font sizes in px, boxes, colours).
MEASURE = """<script>
const groups = [...document.querySelectorAll('.group')].map(g => {
  const label = g.querySelector('.label'), box = label.getBoundingClientRect(), outer = g.getBoundingClientRect();
  // The text as laid out (a range covers text that overflows its element's box).
  const lines = [...g.querySelectorAll('li, .counts, .label')].map(e => { const r = document.createRange(); r.selectNodeContents(e); return r.getBoundingClientRect(); });
  return {text: label.textContent, px: parseFloat(getComputedStyle(label).fontSize), left: box.left, right: box.right,
          height: box.height, health: g.dataset.health, background: getComputedStyle(g).backgroundColor,
          inside: lines.every(r => r.left >= outer.left && r.right <= outer.right && r.bottom <= outer.bottom)};
});
const listed = [...document.querySelectorAll('table.unhealthy tr')].slice(1).map(r => r.cells[0].textContent);
const pre = document.createElement('pre');
pre.id = 'measure';
pre.textContent = JSON.stringify({groups, listed, width: document.documentElement.scrollWidth, text: document.body.innerText});
document.body.appendChild(pre);
</script>"""


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


@pytest.mark.parametrize("count", [66, 258])
def test_every_group_is_drawn_legibly_and_unhealthy_nodes_are_counted_and_listed_once(count, tmp_path):
    dumps = cluster(count)
    nodes = topology.parse_nodes(dumps.nodes, dumps.pods)
    measured = _render(topology.html_page(nodes), tmp_path)
    groups = measured["groups"]
    rows = topology.summary(nodes)
    assert sorted(g["text"] for g in groups) == sorted(r["layers"][2] or "no labels" for r in rows)  # one box per layer-3 node
    assert measured["width"] <= WIDTH  # no horizontal scroll
    for g in groups:
        assert g["px"] >= 12 and g["height"] >= g["px"], g  # drawn, at a size people read
        assert 0 <= g["left"] and g["right"] <= WIDTH, g  # inside the window
        assert g["inside"], g  # the long health states wrap inside their box
    bad = {n.layers[2] for n in nodes if not n.schedulable and n.placed}
    assert {g["text"] for g in groups if g["health"] == "degraded"} == bad
    colours = {g["health"]: g["background"] for g in groups}
    assert colours["degraded"] != colours["healthy"]
    # The totals, the unhealthy total and one list of the nodes that cannot run work.
    assert f"Not schedulable: {len(dumps.kinds)}" in measured["text"]
    assert sorted(measured["listed"]) == sorted(dumps.kinds)
    assert topology.totals(nodes) in measured["text"]
    assert f"Largest job with required topology at layer 3: {topology.largest_required_job(rows)} node(s)" in measured["text"]


def test_markdown_summary_for_pull_requests():
    dumps = cluster(16, unlabelled=0)
    text = topology.markdown(topology.parse_nodes(dumps.nodes, dumps.pods))
    assert "| layer-3 network node | layer-2 | schedulable / nodes | GPUs (free) | types | not schedulable |" in text
    # nn-3-0000: node 3 waits for replacement; 8 GPUs in use on node 0 of the three that run work.
    assert "| nn-3-0000 | nn-2-000 | 3 / 4 | 24 (16) | ml.p5.48xlarge | hyperpod-i-0003 (health UnschedulablePendingReplacement) |" in text
    assert "largest job with required topology at layer 3: **3 node(s)**" in text  # every group of 4 has one down
