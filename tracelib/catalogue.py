"""The DL2 model catalogue: per-model demands, epoch sizes and speed-model coefficients.

Sources (see shared SPEC "Reference figures"):
- local compute time, model size and mini-batches per epoch: the DL2 authors' simulator
  (pengyanghua/DL2 `trace.py`), in the order of DL2 Table 1;
- speed coefficients: the Optimus form fitted to the DL2 authors' 800 measured
  (PS, worker, speed) points, speed(w, p) = 1 / (a/w + b + c*w/p + d*w + e*p) in
  mini-batches per second summed over workers, for the global batch given here;
- demands: DL2 section 2.2 ("each worker uses 1 GPU, 4 CPU cores, 10GB memory and each PS
  has 4 CPU cores, 10GB memory"), except CNN-text and DSSM whose workers use no GPU in the
  authors' simulator; at most 16 workers per job as in the authors' simulator.

The simulator issue re-calibrates these against the papers' figures; whatever it settles
on lives here and nowhere else, and is written to the `job_types` table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl


@dataclass(frozen=True)
class JobType:
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
        return self.speed(workers, ps) / self.iters_per_epoch


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


DL2_CATALOGUE: tuple[JobType, ...] = (
    _jt(0, "resnet-50", "image", 32, 115, 0.449, 102.2, 1, 5.92e-3, 1.25e-2, 1.56e-2, 1.17e-4, 0),
    _jt(1, "vgg-16", "image", 32, 115, 0.535, 553.4, 1, 2.07e-2, 7.67e-3, 5.72e-2, 1.70e-3, 6.08e-4),
    _jt(2, "resnext-110", "image", 128, 390, 0.226, 6.92, 1, 4.74e-4, 1.38e-3, 8.52e-4, 1.53e-4, 3.84e-6),
    _jt(3, "inception-bn", "image", 128, 120, 0.815, 42.1, 1, 3.06e-3, 1.31e-3, 1.31e-3, 1.50e-4, 1.82e-5),
    _jt(4, "seq2seq", "translation", 64, 780, 0.075, 36.5, 1, 1.20e-3, 7.76e-4, 4.36e-4, 2.18e-4, 0),
    _jt(5, "cnn-text", "text", 50, 193, 0.585, 24.0, 0, 7.57e-3, 6.85e-3, 4.90e-4, 3.45e-4, 0),
    _jt(6, "dssm", "ranking", 256, 349, 0.567, 6.0, 0, 1.56e-3, 4.68e-4, 0, 2.85e-5, 8.20e-7),
    _jt(7, "wlm", "language", 160, 165, 0.154, 19.2, 1, 9.70e-4, 1.32e-3, 1.23e-3, 1.93e-4, 0),
)  # fmt: skip


def by_name(catalogue: tuple[JobType, ...] = DL2_CATALOGUE) -> dict[str, JobType]:
    return {jt.model: jt for jt in catalogue}


def catalogue_frame(catalogue: tuple[JobType, ...] = DL2_CATALOGUE) -> pl.DataFrame:
    """The catalogue as rows of the `job_types` table."""
    return pl.DataFrame([asdict(jt) for jt in catalogue])
