"""Node lists: the servers a production trace ran on, as a replay cluster.

Alibaba's GPU trace 2023 (`openb_node_list_all_node.csv`, `openb_node_list_gpu_node.csv`)
lists one node a row: `sn, cpu_milli, memory_mib, gpu, model` (CPU in milli-cores, memory
in MiB, GPUs a whole count, `model` the GPU type, empty for a node without GPUs). A node list
read here is the cluster a replay runs on (`schedlab replay SOURCE --nodes FILE`), each
server with its own GPU count, GPU type, CPU cores and memory (GB, as the jobs table holds
memory). Only regular files are read (`read_regular`); a bad row is an IngestError naming
the file, the row (1 is the header) and the field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass
from pathlib import Path

from tracelib.ingest.base import IngestError, printable
from tracelib.ingest.files import read_regular
from tracelib.sim.replay import ReplayCluster

NODE_FORMATS = ("alibaba-2023-nodes",)
"""Node list layouts `read_node_list` reads."""

ALIBABA_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

MIB_GB = 2**20 / 1e9
"""GB in one MiB (the jobs table's memory is in GB; the mapping converts the same way)."""

MAX_NODE_GPUS = 64
"""Most GPUs one node may list: a larger count is a typo, not a server."""


@dataclass(frozen=True)
class NodeList:
    """A node list's servers and its content hash. A node without GPUs is a server with no
    GPUs and no type: only GPU-less pods fit it (best fit sends them there first)."""

    cluster: ReplayCluster
    names: tuple[str, ...]
    content_hash: str

    def describe(self) -> str:
        """ "1,213 servers (6,212 GPUs: 549 G2 x 8, ...)": what the replay runs on."""
        c = self.cluster
        by_type: dict[tuple[str, float], int] = {}
        for t, g in zip(c.gpu_types or (), c.server_gpus or (), strict=True):
            if g > 0:
                by_type[(t, g)] = by_type.get((t, g), 0) + 1
        shapes = ", ".join(
            f"{n:,} {t} x {g:g}" for (t, g), n in sorted(by_type.items(), key=lambda kv: -kv[1])
        )
        no_gpu = sum(1 for g in c.server_gpus or () if g == 0)
        return f"{c.n_servers:,} servers ({c.total_gpus:,.0f} GPUs: {shapes})" + (
            f", {no_gpu:,} of them without GPUs" if no_gpu else ""
        )


def _number(
    path: Path, row: list[str], row_no: int, col: int, name: str, ceiling: float, whole: bool
) -> float:
    """Field `name` (index `col`) of row `row_no` as a number in [0, ceiling]."""
    raw = row[col].strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= ceiling) or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        raise IngestError(
            path,
            f"row {row_no}, field {name}: {printable(repr(raw), 40)} is not {kind} "
            f"from 0 to {ceiling:g}",
            column=name,
        )
    return value


def read_node_list(path: Path | str, fmt: str = "alibaba-2023-nodes") -> NodeList:
    """The node list at `path` as a replay cluster; IngestError naming the file, row and
    field of the first bad value."""
    path = Path(path)
    if fmt not in NODE_FORMATS:
        raise IngestError(path, f"unknown node list format {fmt!r}; known: {NODE_FORMATS}")
    data = read_regular(path, "node list")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(path, f"not UTF-8 text (byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in ALIBABA_COLUMNS if c not in header]
    if missing:
        raise IngestError(
            path, f"missing column(s) {missing}; a node list has {', '.join(ALIBABA_COLUMNS)}"
        )
    at = {c: header.index(c) for c in ALIBABA_COLUMNS}
    names: list[str] = []
    gpus: list[float] = []
    types: list[str] = []
    cpus: list[float] = []
    mems: list[float] = []
    seen: set[str] = set()
    for row_no, row in enumerate(reader, start=2):
        if not row or all(not v.strip() for v in row):
            continue
        if len(row) != len(header):
            raise IngestError(
                path, f"row {row_no}: {len(row)} fields, the header has {len(header)}"
            )

        name = row[at["sn"]].strip()
        if not name or name in seen:
            raise IngestError(
                path,
                f"row {row_no}, field sn: "
                f"{'empty' if not name else 'repeats ' + printable(name, 40)}"
                " (each node needs its own name)",
                column="sn",
            )
        seen.add(name)
        cpu = _number(path, row, row_no, at["cpu_milli"], "cpu_milli", 1e7, False) / 1000.0
        mem = _number(path, row, row_no, at["memory_mib"], "memory_mib", 1e9, False) * MIB_GB
        gpu = _number(path, row, row_no, at["gpu"], "gpu", MAX_NODE_GPUS, True)
        model = row[at["model"]].strip() if gpu > 0 else ""
        if gpu > 0 and not model:
            raise IngestError(
                path, f"row {row_no}, field model: empty for a node with GPUs", column="model"
            )
        names.append(name)
        gpus.append(gpu)
        types.append(model)
        cpus.append(cpu)
        mems.append(mem)
    if not names:
        raise IngestError(path, "no node listed")
    if max(gpus) == 0:
        raise IngestError(path, "no node with GPUs: a replay needs at least one")
    cluster = ReplayCluster(
        len(names),
        max(gpus),
        tuple(types),
        server_gpus=tuple(gpus),
        server_cpus=tuple(cpus),
        server_mem_gb=tuple(mems),
    )
    return NodeList(cluster, tuple(names), hashlib.sha256(data).hexdigest())
