"""An Alibaba GPU 2023-like pod list and node list in the published layouts, at the
published counts (docs: SPEC "Production traces and live clusters"): 8,152 pods (Running
5,193, Failed 1,870, Pending 897, Succeeded 192) and 1,213 GPU nodes (G2 549, T4 404,
P100 134, V100M16 55, G3 39, V100M32 30, A10 2; 6,212 GPUs). Per-node GPU counts are not
published by type: 8 for G2, G3 and the V100s, 1 for T4 and A10, and 3 or 4 for P100 make
the published total. Demands are drawn, not the trace's: ~13% GPU-less pods, ~37% sharing a
GPU (gpu_milli 50-950), the rest 1, 2, 4 or 8 whole GPUs; ~10% of GPU pods constrained by
gpu_spec; times over 60 days.

`python -m benchmarks.alibaba_like DIR` writes DIR/openb_pod_list_like.csv and
DIR/openb_node_list_gpu_node_like.csv (deterministic, seed 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PHASES = {"Running": 5193, "Failed": 1870, "Pending": 897, "Succeeded": 192}
NODES = {"G2": 549, "T4": 404, "P100": 134, "V100M16": 55, "G3": 39, "V100M32": 30, "A10": 2}
GPUS_PER_NODE = {"G2": 8, "T4": 1, "V100M16": 8, "G3": 8, "V100M32": 8, "A10": 1}
TOTAL_GPUS = 6212
SPAN_S = 60 * 86400


def node_rows() -> list[str]:
    """One CSV line per GPU node (sn, cpu_milli, memory_mib, gpu, model)."""
    fixed = sum(NODES[t] * g for t, g in GPUS_PER_NODE.items())
    p100_left = TOTAL_GPUS - fixed  # over 134 P100 nodes of 3 or 4 GPUs
    four = p100_left - 3 * NODES["P100"]
    lines, k = [], 0
    for model, n in NODES.items():
        for j in range(n):
            gpus = GPUS_PER_NODE.get(model) or (4 if j < four else 3)
            cpu = 96000 if gpus >= 4 else 64000
            mem = 786432 if gpus >= 4 else 262144
            lines.append(f"openb-node-{k:04d},{cpu},{mem},{gpus},{model}")
            k += 1
    return lines


def pod_rows(seed: int = 0) -> list[str]:
    """One CSV line per pod (the openb pod list columns), phases at the published counts."""
    rng = np.random.default_rng(seed)
    phases = np.array([p for p, n in PHASES.items() for _ in range(n)])
    rng.shuffle(phases)
    n = len(phases)
    kind = rng.choice(4, size=n, p=[0.13, 0.37, 0.45, 0.05])
    wide = rng.choice([2, 4, 8], size=n, p=[0.4, 0.3, 0.3])
    types = list(NODES)
    creation = np.sort(rng.integers(0, SPAN_S, size=n))
    lines = []
    for i in range(n):
        num_gpu, milli = {0: (0, 0), 1: (1, int(rng.integers(1, 20)) * 50), 2: (1, 1000)}.get(
            int(kind[i]), (int(wide[i]), 1000)
        )
        spec = ""
        if num_gpu and rng.random() < 0.10:
            spec = "|".join(sorted(rng.choice(types[:6], size=rng.integers(1, 3), replace=False)))
            if num_gpu > 1:
                spec = "G2"  # multi-GPU pods only where 8-GPU servers exist
        cpu = int(rng.choice([4000, 8000, 12000, 16000, 32000]))
        mem = int(rng.choice([12288, 16384, 30517, 65536]))
        run = int(rng.exponential(86400 * 3)) + 1
        sched = int(creation[i]) + int(rng.integers(0, 10))
        lines.append(
            f"openb-pod-{i:04d},{cpu},{mem},{num_gpu},{milli},{spec},LS,{phases[i]},"
            f"{creation[i]},{sched + run},{sched}"
        )
    return lines


def write(directory: Path) -> tuple[Path, Path]:
    """Write both files into `directory`; their paths (pods, nodes)."""
    directory.mkdir(parents=True, exist_ok=True)
    pods = directory / "openb_pod_list_like.csv"
    nodes = directory / "openb_node_list_gpu_node_like.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n" + "\n".join(pod_rows()) + "\n"
    )
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "\n".join(node_rows()) + "\n")
    return pods, nodes


if __name__ == "__main__":
    print(*write(Path(sys.argv[1])), sep="\n")
