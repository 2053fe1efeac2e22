import polars as pl
import pytest

from tests.test_contracts import minimal_job
from tracelib.catalogue import by_name
from tracelib.contracts import WorkloadJobs, Workloads
from tracelib.synthetic import DiurnalConfig, PoissonConfig, synthetic_source
from tracelib.workloads import DeriveConfig, derive_workloads
from warehouse.io import validate


@pytest.fixture(scope="module")
def synthetic():
    return synthetic_source("dl2-diurnal", DiurnalConfig(n_jobs=600, seed=3))


def test_splits_partition_the_jobs(synthetic):
    jobs, source = synthetic
    workloads, wjobs = derive_workloads(jobs, source, DeriveConfig(jobs_per_sequence=60))
    validate(workloads, Workloads)
    validate(wjobs, WorkloadJobs)
    assert workloads.group_by("split").len().sort("split").rows() == [
        ("test", 2),
        ("train", 6),
        ("validation", 2),
    ]
    split_of = dict(workloads.select("workload_id", "split").iter_rows())
    per_split = wjobs.with_columns(pl.col("workload_id").replace_strict(split_of).alias("split"))
    ids = per_split.group_by("split").agg(pl.col("job_id"))
    sets = {s: set(j) for s, j in ids.iter_rows()}
    assert not (sets["train"] & sets["test"]) and not (sets["train"] & sets["validation"])
    assert not (sets["validation"] & sets["test"])
    assert sum(len(s) for s in sets.values()) == jobs.height


def test_derivation_is_deterministic_and_seeded(synthetic):
    jobs, source = synthetic
    drop = ["derived_at"]
    a = derive_workloads(jobs, source, DeriveConfig(seed=1))
    b = derive_workloads(jobs, source, DeriveConfig(seed=1))
    c = derive_workloads(jobs, source, DeriveConfig(seed=2))
    assert a[0].drop(drop).equals(b[0].drop(drop)) and a[1].equals(b[1])
    # another seed sends other sequences to the test split
    assert not a[1].select("job_id", "workload_id").equals(c[1].select("job_id", "workload_id"))


def test_arrivals_are_relative_to_each_sequence_and_slotted(synthetic):
    jobs, source = synthetic
    _, wjobs = derive_workloads(jobs, source, DeriveConfig(slot_s=1200))
    firsts = wjobs.group_by("workload_id").agg(pl.col("arrival_s").min())
    assert (firsts.get_column("arrival_s") == 0).all()
    assert (wjobs.get_column("arrival_slot") == (wjobs.get_column("arrival_s") // 1200)).all()


def test_synthetic_single_worker_durations_become_exact_epochs(synthetic):
    jobs, source = synthetic
    _, wjobs = derive_workloads(jobs, source, DeriveConfig())
    catalogue = by_name()
    for model, epochs, duration in (
        wjobs.select("model", "epochs", "duration_s").head(50).iter_rows()
    ):
        assert epochs == pytest.approx(duration * catalogue[model].epochs_per_second(1, 1))


def test_stated_epochs_are_kept():
    jobs, source = synthetic_source("chic-poisson", PoissonConfig(n_jobs=30))
    _, wjobs = derive_workloads(jobs, source, DeriveConfig(jobs_per_sequence=10))
    assert sorted(wjobs.get_column("epochs").to_list()) == sorted(
        jobs.get_column("epochs").to_list()
    )


def test_production_job_mapping_models_workers_and_basis():
    jobs = pl.concat(
        [
            minimal_job(job_id="named", model="ResNet50", num_gpus=8.0, duration_s=3600.0),
            minimal_job(job_id="cpu", model=None, num_gpus=0.0, duration_s=600.0),
            minimal_job(job_id="huge", model="vgg16", num_gpus=64.0, duration_s=60.0),
            minimal_job(job_id="running", status="running", duration_s=None),
        ]
    )
    source = pl.DataFrame({"source_id": ["s"], "content_hash": ["h" * 64]})
    _, wjobs = derive_workloads(jobs, source, DeriveConfig())
    rows = {r["job_id"]: r for r in wjobs.iter_rows(named=True)}
    assert set(rows) == {"named", "cpu", "huge"}  # the running job has no final run time
    assert rows["named"]["model"] == "resnet-50"
    assert rows["named"]["num_workers"] == 8 and rows["named"]["num_ps"] == 8
    assert rows["cpu"]["model"] in {"cnn-text", "dssm"}
    assert rows["huge"]["num_workers"] == 16  # capped at the catalogue's max_workers
    resnet = by_name()["resnet-50"]
    assert rows["named"]["epochs"] == pytest.approx(3600 * resnet.epochs_per_second(1, 1))
    _, requested = derive_workloads(jobs, source, DeriveConfig(epoch_basis="requested"))
    named = requested.filter(pl.col("job_id") == "named").row(0, named=True)
    assert named["epochs"] == pytest.approx(3600 * resnet.epochs_per_second(8, 8))


def test_nothing_to_derive_is_an_error():
    jobs = minimal_job(status="running", duration_s=None)
    with pytest.raises(ValueError, match="no jobs"):
        derive_workloads(
            jobs, pl.DataFrame({"source_id": ["s"], "content_hash": ["h"]}), DeriveConfig()
        )


def test_a_set_name_says_what_its_sources_are_once():
    from tracelib.workloads import set_name

    assert set_name(["helios:night2"]) == "helios-night2"
    assert set_name(["philly:philly-jan"]) == "philly-jan"
    assert set_name(["generic:generic-philly"]) == "philly"
    assert set_name(["generic:alibaba"]) == "alibaba"
    assert set_name(["helios:a", "pai:pai-b"]) == "helios-a+pai-b"
