"""The DL2 model catalogue: per-model demands, epoch sizes, speed, locality and interference.

This module is the one place per-model coefficients live; the simulator (`tracelib.sim`)
reads them from here and `job_types` rows are written from `JobType`.

Sources (see shared SPEC "Reference figures"):
- local compute time, model size, mini-batches per epoch, and the per-model inter-/intra-
  server bandwidths (`SimFacts`): the DL2 authors' simulator (pengyanghua/DL2 `trace.py`),
  in the order of DL2 Table 1;
- demands: DL2 section 2.2 ("each worker uses 1 GPU, 4 CPU cores, 10GB memory and each PS
  has 4 CPU cores, 10GB memory"), except CNN-text and DSSM whose workers use no GPU in the
  authors' simulator; at most 16 workers (and 16 PSs) per job as in the authors' simulator.

Speed coefficients (`speed_a` .. `speed_e`): the analytical model, not the truth
-------------------------------------------------------------------------------
speed(w, p) = 1 / (a/w + b + c*w/p + d*w + e*p), mini-batches per second summed over workers
(the DL2 authors' unit; epochs per second = speed / iters_per_epoch).

The simulator's truth is the measured surface itself (`tracelib.sim.measured`, the default
`SpeedConfig.truth`). These coefficients are the Optimus-form fit of those measurements: the
analytical model Optimus starts from (its prior before it fits a job's own observations),
OfflineRL trains in (`SpeedConfig(truth="analytical")`), Chic's MDP uses to decide when an
addition stops helping, and workload derivation uses to turn run times into epochs.

The SPEC's starting fit (all 800 measured points) misses the points the
papers quote: it gives ResNet-50 speed(1,1) = 29.3 against the measured 15.8 and a nearly
flat curve (1.09x at 2 workers + 2 PSs against DL2 Fig. 1's 1.7x), and it prefers 2 workers
with 16 PSs for most models. We re-fit by non-negative least squares (relative error) to a
written-down subset of the same measurements, `tracelib.sim.calibration.SPEED_TARGETS`:
the points of DL2's motivating experiments, i.e. equal workers and PSs (1..8, DL2 Fig. 1;
weight 3, and 10 for (1,1)) and splits of 12 tasks between workers and PSs (DL2 Fig. 2;
weight 1). `calibration.fit_speed_coefficients` reproduces the values below (rounded to 3
significant digits); a test checks they agree.

`speed(w, p)` is the speed with the job's workers and PSs on different servers (the
testbed's load-balanced placement, under which the w >= 2 points were measured). The
(1,1) point was measured with worker and PS on one server (DL2 section 2.2), so its target
is first divided by the locality speed-up below (so `JobType.speed(1, 1)` is the measured
speed less that gain, e.g. 15.07 for ResNet-50's measured 15.78). What the fit reproduces (sim speeds, the
(1,1) job on one server, the others spread, relative to that (1,1)):
  ResNet-50 1.00, 1.61, 2.15, 1.90 at 1, 2, 4, 8 workers (DL2 Fig. 1: 1.0, 1.7, 2.1, 2.0);
  best of 1..16 workers with equal PSs: ResNet-50 2.15x, VGG-16 1.50x, Seq2Seq 1.55x (VGG-16
  gains least of DL2 Fig. 1's three models), ResNeXt-110 1.17x (the measurements: it barely
  scales), DSSM 2.36x; every model slows down again past its best (DRF, which keeps adding,
  pays for it). Best PS count for 4 workers: 16 for ResNet-50/VGG-16/WLM, 1 for DSSM (its
  speed ignores PSs), 5-11 for the rest. DL2 Fig. 2's claim that Seq2Seq trains fastest with
  8 workers and 4 PSs is not in the authors' own measurements (4:8 and 3:9 are faster
  there); we follow the measurements. Mean relative error on the targets: 1-11% per model.

Locality (`SimFacts.inter_bw_mbps`, `intra_bw_mbps`, `LOCALITY_SHARE`)
---------------------------------------------------------------------
DL2's analytical model times one iteration as local compute plus 2 * model size / bandwidth,
with a per-model bandwidth across servers (inter) and within one (intra). Taken literally
its iteration times are 10-40x the measured ones, so we keep only its proportions: the
communication share phi = t_comm / (t_comp + t_comm) at (1,1) and the within/across ratio.
A job whose every worker finds a fraction l of its PSs on its own server (and every PS a
fraction l of the workers) runs 1 / (1 - beta * l) times faster than fully spread, with
beta = LOCALITY_SHARE * phi * max(0, 1 - inter/intra). The measurements bound
LOCALITY_SHARE: ResNet-50 with 2 workers + 2 PSs spread runs 1.73x its co-located (1,1),
and the Optimus form cannot more than double from (1,1) to (2,2), so a large co-location
gain makes the fit miss; 0.1 keeps the fit as good as without locality. Co-locating a whole
job then gains ResNet-50 6.2%, WLM 5.5%, VGG-16 4.3%, Inception-BN/CNN-text 3.7%, Seq2Seq
3.1%, ResNeXt-110 0.3%, DSSM nothing (its intra-server bandwidth is not higher).

Interference (`SimFacts`, `tracelib.sim.speed.ContentionModel`)
--------------------------------------------------------------
Co-located jobs slow each other through what a server's tasks share beyond GPUs, cores and
memory (Harmony section I and II.B: CPU caches and cycles, PCIe/QPI buses, NIC, disk; CTC is
CPU-heavy, VGG-16 network-heavy, image models read from disk). The model is physical
contention, not a fitted slowdown law: every server has one unit of each shared channel
(cpu, pcie, net, disk); each task uses a share of each channel by its model and role (a
worker: its CPU, PCIe, NIC and disk; a PS: its CPU and NIC); a channel's time stretches by
the smooth maximum of 1 and its total load, h(U) = (1 + U^n)^(1/n), so there is little
slowdown below saturation and the fair-share slowdown U beyond it; a job's iteration on a
server takes 1 + sum_c f_c (h(U_c) - 1) against the same with only its own tasks there, and a
synchronous job runs at the pace of its slowest server. Sources of each coefficient:
- CPU use per task: measured. The DL2 authors' file records each PS's and worker's CPU
  usage; `SimFacts.cpu_worker_cores` / `cpu_ps_cores` are the 1 PS + 1 worker run's values,
  over the testbed server's 8 physical cores (`SERVER_CORES`, Harmony: one 8-core E5-1660).
- PCIe, NIC and disk use per task (`intf_pcie`, `intf_net`, `intf_disk`, 0..1): our reading
  of the models (image models stage and decode images from disk and copy batches over PCIe;
  VGG-16 exchanges 553 MB of parameters; CTC and DSSM train on the CPU, no PCIe; Seq2Seq and
  WLM read small text), relative to the heaviest user of the channel.
- Sensitivity (`intf_sensitivity`): how much of an iteration waits on the shared channels;
  ResNeXt-110's 2.5 ms iterations (CIFAR-sized inputs, 383 mini-batches/s) feel every stall,
  so it is `RESNEXT_SENSITIVITY` times the others (Harmony: nearly 2x slowdown when packed).
- Five scales, fitted once to Harmony section II.B and Gavel (`tracelib.sim.calibration.
  calibrate_contention`, grid search, never to a scheduler's result): `CPU_LOAD` and
  `CHANNEL_LOAD` (what a unit of profile loads the CPU and the other channels),
  `SENSITIVITY` and `RESNEXT_SENSITIVITY`; targets: case study 1's six 1-worker + 1-PS jobs
  bin-packed two per server slow down by 33% on average with ResNeXt-110 near 2x; case
  study 2's mildest pairs are ResNet + WLM and ResNet + Seq2Seq; case study 3's ResNeXt-110
  + CTC interfere severely; and the spread of the slowdowns of every pair of models on one
  server ((Q3 - Q1) / median) close to that of Gavel's measured co-location throughputs
  (1.11 on V100s). `CONTENTION_SHARPNESS` n, the knee, is fitted with them (n = 8: h(0.8) =
  1.02, h(1) = 1.09, h(2) = 2.0). `models.fidelity` checks the result.
LIF sees only the CPU and NIC parts of each model's profile (what its profiling measures),
not the PCIe and disk channels, the knee or the slowest-server rule.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl


@dataclass(frozen=True)
class JobType:
    """One catalogue model: demands, epoch size and speed-model coefficients (a `job_types` row)."""

    model: str
    type_index: int
    domain: str
    global_batch: int
    iters_per_epoch: int
    local_comp_s: float
    model_size_mb: float
    worker_gpu: float
    worker_cpu: float
    worker_mem_gb: float
    ps_cpu: float
    ps_mem_gb: float
    speed_a: float
    speed_b: float
    speed_c: float
    speed_d: float
    speed_e: float
    max_workers: int = 16

    def speed(self, workers: float, ps: float) -> float:
        """Mini-batches per second (summed over workers) with `workers` workers and `ps` PSs."""
        if workers <= 0 or ps <= 0:
            return 0.0
        denom = (
            self.speed_a / workers
            + self.speed_b
            + self.speed_c * workers / ps
            + self.speed_d * workers
            + self.speed_e * ps
        )
        return 1.0 / denom

    def epochs_per_second(self, workers: float, ps: float) -> float:
        """Epochs per second with `workers` workers and `ps` PSs (spread placement)."""
        return self.speed(workers, ps) / self.iters_per_epoch

    @property
    def coefficients(self) -> tuple[float, float, float, float, float]:
        """(a, b, c, d, e) of the speed model."""
        return (self.speed_a, self.speed_b, self.speed_c, self.speed_d, self.speed_e)

    @property
    def worker_demand(self) -> tuple[float, float, float]:
        """(GPU, CPU cores, memory GB) of one worker."""
        return (self.worker_gpu, self.worker_cpu, self.worker_mem_gb)

    @property
    def ps_demand(self) -> tuple[float, float, float]:
        """(GPU, CPU cores, memory GB) of one PS."""
        return (0.0, self.ps_cpu, self.ps_mem_gb)


def _jt(i, model, domain, batch, iters, comp, size, gpu, a, b, c, d, e) -> JobType:
    return JobType(
        model=model,
        type_index=i,
        domain=domain,
        global_batch=batch,
        iters_per_epoch=iters,
        local_comp_s=comp,
        model_size_mb=size,
        worker_gpu=gpu,
        worker_cpu=4.0,
        worker_mem_gb=10.0,
        ps_cpu=4.0,
        ps_mem_gb=10.0,
        speed_a=a,
        speed_b=b,
        speed_c=c,
        speed_d=d,
        speed_e=e,
    )


# Speed coefficients a..e: NNLS re-fit (see the module docstring and
# tracelib.sim.calibration.fit_speed_coefficients), 3 significant digits.
DL2_CATALOGUE: tuple[JobType, ...] = (
    _jt(0, "resnet-50", "image", 32, 115, 0.449, 102.2, 1, 6.10e-02, 0, 2.51e-03, 2.84e-03, 0),
    _jt(1, "vgg-16", "image", 32, 115, 0.535, 553.4, 1, 6.70e-02, 1.08e-02, 2.83e-02, 3.53e-03, 0),
    _jt(2, "resnext-110", "image", 128, 390, 0.226, 6.92, 1, 1.45e-03, 2.23e-05, 8.00e-04, 2.19e-04, 1.28e-04),
    _jt(3, "inception-bn", "image", 128, 120, 0.815, 42.1, 1, 5.15e-03, 0, 4.72e-04, 4.60e-04, 2.57e-05),
    _jt(4, "seq2seq", "translation", 64, 780, 0.075, 36.5, 1, 2.37e-03, 1.74e-04, 1.05e-03, 6.38e-05, 6.65e-05),
    _jt(5, "cnn-text", "text", 50, 193, 0.585, 24.0, 0, 9.86e-03, 5.74e-03, 8.30e-04, 3.06e-04, 3.01e-05),
    _jt(6, "dssm", "ranking", 256, 349, 0.567, 6.0, 0, 1.94e-03, 1.60e-04, 0, 6.83e-05, 0),
    _jt(7, "wlm", "language", 160, 165, 0.154, 19.2, 1, 5.09e-03, 0, 1.16e-03, 2.61e-04, 0),
)  # fmt: skip


LOCALITY_SHARE = 0.1
"""Share of DL2's analytical communication time that co-location saves (bounded by the fit)."""

SERVER_CORES = 8.0
"""Physical cores of the testbed server (Harmony and DL2: one 8-core Intel E5-1660)."""

CONTENTION_SHARPNESS = 8.0
"""n of h(U) = (1 + U^n)^(1/n): how sharply a channel's time stretches at saturation
(fitted: the sharper knee reproduces Gavel's spread of pairwise slowdowns)."""

CPU_LOAD = 2.0
"""CPU load of one measured core-share: a task's bursts contend for more than its average
core use (fitted to Harmony II.B; case study 3's ResNeXt-110 + CTC is CPU contention)."""

CHANNEL_LOAD = 0.75
"""Load on the PCIe, NIC and disk channels of one unit of usage profile (fitted)."""

SENSITIVITY = 3.0
"""Share of an iteration spent on the shared channels, per unit of profile (fitted)."""

RESNEXT_SENSITIVITY = 4.0
"""ResNeXt-110's sensitivity relative to the other models (fitted)."""


@dataclass(frozen=True)
class SimFacts:
    """Per-model simulator facts beyond `JobType` (not part of the `job_types` table)."""

    model: str
    inter_bw_mbps: float
    """DL2 authors' simulator: bandwidth between servers, MB/s."""
    intra_bw_mbps: float
    """DL2 authors' simulator: bandwidth within one server, MB/s."""
    cpu_worker_cores: float
    """Measured CPU use of the worker of a 1 PS + 1 worker run (cores; DL2 authors' file)."""
    cpu_ps_cores: float
    """Measured CPU use of the PS of that run (cores)."""
    intf_pcie: float
    """PCIe/QPI bus use of a worker (host <-> GPU batches), 0..1."""
    intf_net: float
    """NIC use of a worker or PS (parameter traffic), 0..1."""
    intf_disk: float
    """Disk use of a worker (reading the data set), 0..1."""
    intf_sensitivity: float = 1.0
    """Relative share of an iteration that waits on shared channels (ResNeXt-110: higher)."""

    @property
    def intf_cpu(self) -> float:
        """CPU use of a 1 PS + 1 worker job, as a share of the server's physical cores."""
        return (self.cpu_worker_cores + self.cpu_ps_cores) / SERVER_CORES

    @property
    def profile(self) -> tuple[float, float, float, float]:
        """(CPU, PCIe, NIC, disk) use of a 1 PS + 1 worker job running alone (what profiling
        the model shows)."""
        return (self.intf_cpu, self.intf_pcie, self.intf_net, self.intf_disk)

    def task_usage(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(worker, PS) use of each channel (cpu, pcie, net, disk), in profile units."""
        worker = (
            self.cpu_worker_cores / SERVER_CORES,
            self.intf_pcie,
            self.intf_net,
            self.intf_disk,
        )
        ps = (self.cpu_ps_cores / SERVER_CORES, 0.0, self.intf_net, 0.0)
        return worker, ps


# Bandwidths: pengyanghua/DL2 trace.py (facts). CPU cores: the 1 PS + 1 worker rows of
# tracelib/data/dl2-measured-speeds.csv (facts; a test checks them). PCIe, NIC, disk: our
# reading of the models (catalogue docstring). Sensitivity: 1, ResNeXt-110 RESNEXT_SENSITIVITY.
DL2_SIM_FACTS: tuple[SimFacts, ...] = (
    #        model           inter    intra     cpu w  cpu ps  pcie  net   disk
    SimFacts("resnet-50",    91.875,  306.5,    0.547, 1.908,  0.6,  0.2,  0.7),
    SimFacts("vgg-16",       233.0,   427.75,   0.535, 1.222,  0.6,  1.0,  0.5),
    SimFacts("resnext-110",  59.5,    63.0,     1.392, 1.806,  0.8,  0.2,  0.3, RESNEXT_SENSITIVITY),
    SimFacts("inception-bn", 145.875, 1082.125, 1.512, 1.48,   0.6,  0.3,  0.6),
    SimFacts("seq2seq",      120.125, 181.125,  0.78,  0.665,  0.1,  0.5,  0.0),
    SimFacts("cnn-text",     60.75,   159.625,  1.804, 0.221,  0.0,  0.2,  0.2),
    SimFacts("dssm",         92.125,  65.625,   2.014, 0.873,  0.0,  0.3,  0.2),
    SimFacts("wlm",          10.375,  22.875,   0.341, 1.667,  0.1,  0.6,  0.0),
)  # fmt: skip


def by_name(catalogue: tuple[JobType, ...] = DL2_CATALOGUE) -> dict[str, JobType]:
    """Catalogue entries by model name."""
    return {jt.model: jt for jt in catalogue}


def sim_facts_by_name(facts: tuple[SimFacts, ...] = DL2_SIM_FACTS) -> dict[str, SimFacts]:
    """Simulator facts by model name."""
    return {f.model: f for f in facts}


def locality_gain(jt: JobType, facts: SimFacts, share: float = LOCALITY_SHARE) -> float:
    """beta: the fraction of a spread job's iteration time saved when it is fully co-located."""
    t_comm = 2.0 * jt.model_size_mb / facts.inter_bw_mbps
    phi = t_comm / (jt.local_comp_s + t_comm)
    return share * phi * max(0.0, 1.0 - facts.inter_bw_mbps / facts.intra_bw_mbps)


def catalogue_frame(
    catalogue: tuple[JobType, ...] = DL2_CATALOGUE, name: str = "dl2"
) -> pl.DataFrame:
    """A catalogue as rows of the `job_types` table, under the catalogue name `name`."""
    return pl.DataFrame([{"catalogue": name, **asdict(jt)} for jt in catalogue])


def catalogues_frame() -> pl.DataFrame:
    """Every catalogue the simulator runs (`CATALOGUES`), as `job_types` rows."""
    frames = [catalogue_frame(cat, name) for name, cat in CATALOGUES.items()]
    return pl.concat(frames, how="vertical_relaxed")  # integral demands infer as Int64


# -- RL-TAPS: data-parallel all-reduce CNN jobs ---------------------------------------------
#
# RL-TAPS (section 4.6.2) gives every job a CNN from the convnet-burden table (its ref. [12],
# albanie/convnet-burden README: 35 image-classification architectures, forward FLOPs per
# example and parameter memory, which RL-TAPS takes as the gradient size) and a per-GPU
# mini-batch m drawn from {32, 64, 128, 256, 512}. One GPU computes a mini-batch in
# tt = FLOPs * m / (0.9 * v_P100) seconds (its eq. 10: 0.9 of the advertised FLOPS). Each
# (CNN, m) pair is one catalogue type here, so a uniform draw over the catalogue is RL-TAPS'
# independent draw of architecture and batch. The FLOPs are the README's rounded figures, as
# RL-TAPS' own calibration uses them (vgg-vd-19 = 20e9, its Table 2). Every other RL-TAPS
# coefficient (topology, reduction time, step length) is in `tracelib.sim.topology`.
#
# Field meanings for these types: global_batch is the per-GPU mini-batch m; iters_per_epoch
# is ImageNet-1k's training set over m (mini-batches per epoch summed over GPUs, the
# catalogue's unit); local_comp_s is tt; model_size_mb the gradient size; a worker is one
# GPU with its quarter of a Minsky host (5 of 20 POWER8 cores, 64 of 256 GB), so the GPU is
# the only binding resource, as in the paper; no parameter servers (PS demand zero);
# speed_a = tt and b..e = 0, so `JobType.speed(w, p >= 1) = w / tt`, the speed without
# communication (RL-TAPS' len(j) assumes exactly that), an upper bound of the topology
# model's speed; max_workers = 32, the paper's whole cluster (RL-TAPS may give a job more
# GPUs than it asked for).

P100_FLOPS = 10.6e12
"""NVIDIA Tesla P100 SXM2 (the Minsky's GPU) peak FP32 FLOPS, the paper's v_P100."""

GPU_EFFICIENCY = 0.9
"""RL-TAPS eq. 10: a job sees 0.9 of the advertised FLOPS."""

IMAGENET_TRAIN_IMAGES = 1_281_167
"""ILSVRC-2012 training images: defines an epoch of these (ImageNet-classification) jobs."""

RLTAPS_BATCHES = (32, 64, 128, 256, 512)
"""RL-TAPS section 4.6.2: per-GPU mini-batch sizes, drawn uniformly."""

RLTAPS_CNNS: tuple[tuple[str, float, float], ...] = (
    # (model, forward GFLOPs per example, parameter MB): albanie/convnet-burden README.
    ("alexnet", 0.727, 233.0),
    ("caffenet", 0.724, 233.0),
    ("squeezenet1-0", 0.837, 5.0),
    ("squeezenet1-1", 0.360, 5.0),
    ("vgg-f", 0.727, 232.0),
    ("vgg-m", 2.0, 393.0),
    ("vgg-s", 3.0, 393.0),
    ("vgg-m-2048", 2.0, 353.0),
    ("vgg-m-1024", 2.0, 333.0),
    ("vgg-m-128", 2.0, 315.0),
    ("vgg-vd-16-atrous", 16.0, 82.0),
    ("vgg-vd-16", 16.0, 528.0),
    ("vgg-vd-19", 20.0, 548.0),
    ("googlenet", 2.0, 51.0),
    ("resnet18", 2.0, 45.0),
    ("resnet34", 4.0, 83.0),
    ("resnet-50", 4.0, 98.0),
    ("resnet-101", 8.0, 170.0),
    ("resnet-152", 11.0, 230.0),
    ("resnext-50-32x4d", 4.0, 96.0),
    ("resnext-101-32x4d", 8.0, 169.0),
    ("resnext-101-64x4d", 16.0, 319.0),
    ("inception-v3", 6.0, 91.0),
    ("se-resnet-50", 4.0, 107.0),
    ("se-resnet-101", 8.0, 189.0),
    ("se-resnet-152", 11.0, 255.0),
    ("se-resnext-50-32x4d", 4.0, 105.0),
    ("se-resnext-101-32x4d", 8.0, 187.0),
    ("senet", 21.0, 440.0),
    ("se-bn-inception", 2.0, 46.0),
    ("densenet121", 3.0, 31.0),
    ("densenet161", 8.0, 110.0),
    ("densenet169", 3.0, 55.0),
    ("densenet201", 4.0, 77.0),
    ("mcn-mobilenet", 0.579, 16.0),
)

RLTAPS_WORKER = (1.0, 5.0, 64.0)
"""(GPU, CPU cores, memory GB) of an RL-TAPS worker: one GPU and its quarter of a Minsky
(S822LC for HPC: 2 x 10-core POWER8, 4 P100; 256 GB is our choice of its memory options)."""


def rltaps_type_name(cnn: str, batch: int) -> str:
    """Catalogue name of an RL-TAPS type, e.g. "resnet-50@b64"."""
    return f"{cnn}@b{batch}"


def _rltaps_catalogue() -> tuple[JobType, ...]:
    types = []
    for cnn, gflops, param_mb in RLTAPS_CNNS:
        for batch in RLTAPS_BATCHES:
            tt = gflops * 1e9 * batch / (GPU_EFFICIENCY * P100_FLOPS)
            types.append(
                JobType(
                    model=rltaps_type_name(cnn, batch),
                    type_index=len(types),
                    domain="image",
                    global_batch=batch,
                    iters_per_epoch=-(-IMAGENET_TRAIN_IMAGES // batch),
                    local_comp_s=tt,
                    model_size_mb=param_mb,
                    worker_gpu=RLTAPS_WORKER[0],
                    worker_cpu=RLTAPS_WORKER[1],
                    worker_mem_gb=RLTAPS_WORKER[2],
                    ps_cpu=0.0,
                    ps_mem_gb=0.0,
                    speed_a=tt,
                    speed_b=0.0,
                    speed_c=0.0,
                    speed_d=0.0,
                    speed_e=0.0,
                    max_workers=32,
                )
            )
    return tuple(types)


RLTAPS_CATALOGUE: tuple[JobType, ...] = _rltaps_catalogue()
"""RL-TAPS' job types: 35 convnet-burden CNNs x 5 per-GPU mini-batch sizes (175 types)."""


CATALOGUES: dict[str, tuple[JobType, ...]] = {"dl2": DL2_CATALOGUE, "rl-taps": RLTAPS_CATALOGUE}
"""Every catalogue by the name its `job_types` rows carry."""
