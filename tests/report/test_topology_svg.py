"""The topology drawing, its one-line summary, and where the reports show them."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

from logsleuth.model.diagnosis import Diagnosis, JobView, Verdict
from logsleuth.model.topology import TopoAnomaly, TopoHost, TopoLink, TopologyView, TopoRank
from logsleuth.report.html import render_html
from logsleuth.report.json import build_json
from logsleuth.report.text import render_text
from logsleuth.report.topology_svg import (
    ANOMALY,
    COLOURS,
    CULPRIT,
    render_topology_svg,
    topology_summary,
)

SVG = "{http://www.w3.org/2000/svg}"


def _small() -> TopologyView:
    ranks = tuple(
        TopoRank(
            rank=r,
            host="node-a" if r < 2 else "node-b",
            pid=100 + r,
            cuda_dev=r % 2,
            bus_id="18000" if r % 2 == 0 else "2a000",
            anomalous=r >= 2,
        )
        for r in range(4)
    )
    return TopologyView(
        id="0xfeed",
        nranks=4,
        ranks=ranks,
        hosts=(
            TopoHost(name="node-a", address="10.0.0.1", ranks=(0, 1), network="NET/IB"),
            TopoHost(name="node-b", ranks=(2, 3), network="NET/Socket", anomalous=True),
        ),
        channels=2,
        transports=(("P2P/CUMEM", 4), ("NET/IB/GDRDMA", 2), ("NET/Socket", 2)),
        links=(
            TopoLink(src="0", dst="1", transport="P2P", detail="P2P/CUMEM", channels=2),
            TopoLink(src="1", dst="2", transport="NET/IB", detail="NET/IB/0/GDRDMA", channels=2),
            TopoLink(src="2", dst="3", transport="P2P", detail="P2P/CUMEM", channels=2),
            TopoLink(
                src="3",
                dst="0",
                transport="NET/Socket",
                detail="NET/Socket/0",
                channels=2,
                anomalous=True,
            ),
        ),
        anomalies=(
            TopoAnomaly(
                code="LS402",
                kind="transport-degraded",
                text="node-b uses TCP sockets while the other hosts use InfiniBand",
                hosts=("node-b",),
                ranks=(2, 3),
            ),
        ),
    )


def _large(hosts: int = 128, per_host: int = 8) -> TopologyView:
    names = [f"gpu-node{h:03d}" for h in range(hosts)]
    ranks = tuple(
        TopoRank(rank=r, host=names[r // per_host], cuda_dev=r % per_host)
        for r in range(hosts * per_host)
    )
    links = tuple(
        TopoLink(
            src=names[h],
            dst=names[(h + 1) % hosts],
            transport="NET/IB",
            detail="NET/IB/0/GDRDMA",
            channels=32,
        )
        for h in range(hosts)
    ) + tuple(
        TopoLink(src=n, dst=n, transport="P2P", detail="P2P/CUMEM", channels=32) for n in names
    )
    return TopologyView(
        id="0xbig",
        nranks=hosts * per_host,
        ranks=ranks,
        hosts=tuple(
            TopoHost(name=n, ranks=tuple(range(i * per_host, (i + 1) * per_host)))
            for i, n in enumerate(names)
        ),
        channels=32,
        links=links,
        aggregated=True,
    )


def test_hosts_are_boxes_with_their_gpus_and_the_culprit_is_outlined() -> None:
    svg = render_topology_svg(_small())
    root = ET.fromstring(svg)
    rects = root.findall(f".//{SVG}rect")
    host_boxes = [r for r in rects if r.get("rx") == "6"]
    assert len(host_boxes) == 2
    assert [b.get("stroke") for b in host_boxes] == ["#90a4ae", ANOMALY]
    gpus = [r for r in rects if r.find(f"{SVG}title") is not None and r.get("rx") is None]
    titles = [g.findtext(f"{SVG}title") for g in gpus]
    assert "rank 1, node-a pid 101, cudaDev 1, busId 0000:2a:00.0" in titles
    assert [g.get("fill") for g in gpus] == ["#ffffff", "#ffffff", "#ffcdd2", "#ffcdd2"]
    paths = root.findall(f".//{SVG}path")
    assert [p.get("stroke") for p in paths] == [
        COLOURS["P2P"],
        COLOURS["NET/IB"],
        COLOURS["P2P"],
        ANOMALY,  # the degraded NET/Socket link: red and dashed
    ]
    assert [p.get("stroke-dasharray") for p in paths] == [None, None, None, "6 3"]


def test_the_culprit_its_host_and_its_links_are_highlighted() -> None:
    view = _small()
    culprit = view.ranks[1].rank
    root = ET.fromstring(render_topology_svg(view, frozenset({culprit})))
    rects = root.findall(f".//{SVG}rect")
    marked = [r for r in rects if r.get("class") == "culprit"]
    assert len(marked) == 1
    assert (marked[0].findtext(f"{SVG}title") or "").startswith(f"the culprit: rank {culprit},")
    boxes = [r for r in rects if r.get("rx") == "6"]
    assert boxes[0].get("stroke") == CULPRIT  # its host
    outlined = root.findall(f".//{SVG}path[@class='culprit-link']")
    ends = {(k.src, k.dst) for k in view.links if str(culprit) in (k.src, k.dst)}
    assert len(outlined) == len(ends) > 0
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert any(t.startswith("node-a  ranks ") for t in texts)
    # A light card under the drawing, readable in a dark page.
    assert rects[0].get("fill") == "#ffffff" and root.get("fill") == "#1b1f24"


def test_the_drawing_has_no_script_and_no_style_attributes() -> None:
    svg = render_topology_svg(_small())
    assert "<script" not in svg and "style=" not in svg and "on" + "load" not in svg


def test_names_from_logs_are_escaped() -> None:
    view = replace(
        _small(),
        hosts=(TopoHost(name="<img src=x>", ranks=(0, 1)), *_small().hosts[1:]),
    )
    svg = render_topology_svg(view)
    assert "<img" not in svg
    ET.fromstring(svg)


def test_a_1024_rank_view_is_drawn_host_to_host_and_stays_small() -> None:
    svg = render_topology_svg(_large())
    root = ET.fromstring(svg)
    assert len(svg.encode()) < 2 * 1024 * 1024
    assert len(root.findall(f".//{SVG}path")) == 128  # host-to-host links; P2P is a label
    cells = [r for r in root.findall(f".//{SVG}rect") if r.get("width") == "8"]
    assert len(cells) == 1024
    assert "P2P x32" in svg


def test_summary_line_names_size_hosts_channels_transports_and_anomalies() -> None:
    assert topology_summary(_small()) == (
        "comm 0xfeed: 4 ranks on 2 hosts, 2 channels; transports P2P/CUMEM x4, "
        "NET/IB/GDRDMA x2, NET/Socket x2; anomalies: LS402 node-b uses TCP sockets while the "
        "other hosts use InfiniBand"
    )
    assert topology_summary(_large()).endswith("32 channels; no anomalies")


def _diagnosis() -> Diagnosis:
    return Diagnosis(
        verdict=Verdict(kind="transport-degraded", summary="node-b uses TCP sockets"),
        findings=(),
        job=JobView(),
        communicators=(),
        stack_classes=(),
        ranks=(),
        inputs=(),
        topology=(_small(),),
    )


def test_reports_show_the_topology() -> None:
    d = _diagnosis()
    html = render_html(d)
    section = html[html.index('<section id="topology">') :]
    assert "<svg" in section[: section.index("</section>")]
    assert 'href="#topology"' in html
    text = render_text(d)
    assert "comm 0xfeed: 4 ranks on 2 hosts" in text
    (entry,) = json.loads(json.dumps(build_json(d)))["communicators"]
    topo = entry["topology"]
    assert entry["id"] == topo["id"] == "0xfeed"
    assert topo["hosts"][1] == {
        "name": "node-b",
        "address": None,
        "ranks": "2-3",
        "nics": [],
        "network": "NET/Socket",
        "anomalous": True,
    }
    assert topo["anomalies"][0]["code"] == "LS402"


def test_a_report_without_topology_has_no_topology_section() -> None:
    html = render_html(replace(_diagnosis(), topology=()))
    assert 'id="topology"' not in html
