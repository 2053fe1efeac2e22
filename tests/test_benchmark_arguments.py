"""Every benchmark reads its command line the same way (`benchmarks.options`): `--help`
prints its usage and docstring (exit 0); an unknown flag or a bad value is one line on
stderr and exit 2. Only the parsing runs here, never a benchmark's body (it starts after
its options are parsed)."""

from __future__ import annotations

import importlib
from dataclasses import fields

import pytest

from benchmarks.__main__ import main as run_benchmarks
from benchmarks.__main__ import names
from benchmarks.options import parse
from pipelines.system import field_docs

MODULES = names()

BAD_VALUES = {
    "bench_chic": (["--seeds", "a,b"], "invalid comma-separated int value: 'a,b'"),
    "bench_chic_arena": (["--configs", "default,nope"], "unknown configs ['nope']"),
    "bench_dl2": (["experimen"], "invalid choice: 'experimen'"),
    "bench_dl2_arena": (["--set", "finetune.clip=y"], "the value is not JSON"),
    "bench_dl2_finetune": (["--set", "credit_mode=job"], "FIELD a GroupedConfig field"),
    "bench_dl2_headroom": (["--servers", "many"], "invalid int value: 'many'"),
    "bench_dl2_heads": (["--variants", "rows,nope"], "unknown variants ['nope']"),
    "bench_env": (["fast"], "unrecognized arguments: fast"),
    "bench_fidelity": (["fast"], "unrecognized arguments: fast"),
    "bench_golden": (["before.duckdb"], "give two warehouses"),
    "bench_harmony": (["--train-sequences", "0"], "'0': must be at least 1"),
    "bench_ingest": (["many"], "argument rows: invalid int value: 'many'"),
    "bench_production": (["--capacity", "0.5,x"], "expected numbers"),
    "bench_replay": (["many"], "argument jobs: invalid int value: 'many'"),
    "bench_rltaps": (["huge"], "invalid choice: 'huge'"),
    "bench_scoreboard": (["--budget", "huge"], "invalid choice: 'huge'"),
    "bench_serve": (["--rate", "0"], "--rate and --duration must be positive"),
    "bench_sim": (["fast"], "unrecognized arguments: fast"),
    "bench_startup": (["--until", "never"], "invalid choice: 'never'"),
}
"""Per benchmark, a value its options refuse and what the error says."""


def _exits(name: str, argv: list[str], capsys) -> tuple[int, str, str]:
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exited:
        module.main(argv)
    out, err = capsys.readouterr()
    return exited.value.code, out, err


def _one_line_error(err: str, name: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"python -m benchmarks.{name}: error: ")
    return err


def test_every_benchmark_has_a_bad_value_case() -> None:
    assert sorted(BAD_VALUES) == MODULES


@pytest.mark.parametrize("name", MODULES)
def test_help_prints_usage_and_the_docstring(name, capsys) -> None:
    code, out, _ = _exits(name, ["--help"], capsys)
    assert code == 0
    assert out.startswith(f"usage: python -m benchmarks.{name}")
    doc = importlib.import_module(f"benchmarks.{name}").__doc__
    assert doc.strip().splitlines()[0] in out


@pytest.mark.parametrize("name", MODULES)
def test_an_unknown_flag_exits_2_naming_it(name, capsys) -> None:
    code, _, err = _exits(name, ["--no-such-flag"], capsys)
    assert code == 2
    assert "unrecognized arguments: --no-such-flag" in _one_line_error(err, name)


@pytest.mark.parametrize("name", MODULES)
def test_a_bad_value_exits_2_saying_why(name, capsys) -> None:
    argv, says = BAD_VALUES[name]
    code, _, err = _exits(name, argv, capsys)
    assert code == 2
    assert says in _one_line_error(err, name)


@pytest.mark.parametrize("name", MODULES)
def test_every_option_has_its_help(name) -> None:
    options = importlib.import_module(f"benchmarks.{name}").Options
    assert set(field_docs(options)) == {f.name for f in fields(options)}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--set", "rollout_speed=simulator"], "the value is not JSON"),
        (["--set", 'rollout_speed="x"'], "rollout_speed must be one of"),
        (["--systems", "harmony,dl2"], "systems are harmony"),
        (["--updates", "many"], "invalid int value"),
        (["--sequences", "two"], "'two' is not a whole number"),
        (["--seeds"], "argument --seeds: expected one argument"),
    ],
)
def test_harmony_refuses_bad_values(argv, says, capsys) -> None:
    code, _, err = _exits("bench_harmony", argv, capsys)
    assert code == 2
    assert says in _one_line_error(err, "bench_harmony")


def test_harmony_options_reach_the_systems() -> None:
    from benchmarks import bench_harmony

    opts = parse(
        bench_harmony.Options,
        ["--systems", "harmony,harmony-warm-start", "--set", 'rollout_speed="simulator"'],
    )
    assert opts.systems == ("harmony", "harmony-warm-start")
    # sequence counts default to the run's: None for training and validation (the stage's
    # config), the evaluation's held-out count
    assert (opts.train_sequences, opts.val_sequences) == (None, None)
    assert opts.sequences == bench_harmony.HarmonyEvalConfig().n_sequences
    assert parse(bench_harmony.Options, ["--train-sequences", "96"]).train_sequences == 96
    base = bench_harmony.PlacementTrainConfig(**dict(opts.set))
    made = bench_harmony.systems(base)
    assert made["harmony"].rollout_speed == "simulator"
    assert made["harmony-warm-start"].updates == 0
    # as_published undoes the change with every other deviation
    assert made["harmony-as-published"].rollout_speed == "predictor"


def test_dl2_arena_sets_nested_fields_and_names_deviations_by_their_field():
    from benchmarks.bench_dl2_arena import Options, config_named
    from models.dl2.stage_config import DL2StageConfig

    opts = parse(Options, ["--set", "finetune.clip=0.1", "--set", "net.hidden=[32,32]"])
    assert opts.set == (("finetune.clip", 0.1), ("net.hidden", (32, 32)))
    with pytest.raises(SystemExit):
        parse(Options, ["--set", "finetune.clipp=0.1"])
    without = config_named(DL2StageConfig(), "without-clip")
    assert without.finetune.clip is None and without.finetune.kl_init == 1.0


def test_positional_and_flag_arguments_mix() -> None:
    from benchmarks import bench_chic, bench_dl2, bench_rltaps

    opts = parse(bench_rltaps.Options, ["default", "--as-published", "OUT", "0,1,2"])
    assert (opts.budget, opts.out, opts.seeds, opts.as_published) == (
        "default",
        "OUT",
        (0, 1, 2),
        True,
    )
    chic = parse(bench_chic.Options, ["6", "1.8", "--seeds", "0,1", "--without", "smoothing"])
    assert (chic.iterations, chic.rates, chic.seeds) == (6, (1.8,), (0, 1))
    assert chic.deviations()["smoothing"] == 0.7  # the paper's value, undone
    assert parse(bench_chic.Options, ["--as-published", "--smoothing", "0.5"]).deviations()[
        "smoothing"
    ] == pytest.approx(0.5)
    dl2 = parse(bench_dl2.Options, ["generality", "20"])
    assert (dl2.command, dl2.count, dl2.out) == ("generality", 20, None)


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["nope"], 2, "unknown benchmark 'nope'; known: chic,"),
        (["harmony", "nope"], 2, "unrecognized arguments: nope"),
        (["env", "--fast"], 2, "unrecognized arguments: --fast"),
        # the arguments reach the benchmark, not the runner's list of names
        (["harmony", "--train-sequences", "0"], 2, "'0': must be at least 1"),
        (["bench_scoreboard", "--bogus"], 2, "unrecognized arguments: --bogus"),
    ],
)
def test_the_runner_passes_arguments_to_the_benchmark(argv, code, says, capsys) -> None:
    try:
        got = run_benchmarks(argv)
    except SystemExit as exited:
        got = exited.code
    assert got == code
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_runner_passes_help_to_the_benchmark(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        run_benchmarks(["scoreboard", "--help"])
    assert exited.value.code == 0
    assert "usage: python -m benchmarks.bench_scoreboard" in capsys.readouterr().out


def test_write_results_keeps_the_output_and_stamps_it(tmp_path, monkeypatch, capsys):
    """`python -m benchmarks --write-results NAME ARGS` runs the benchmark as usual (its
    output still shown) and writes docs/results/NAME.md: the command, exit status, code
    version, date, machine, load and times, then the output."""
    import sys
    import types

    import benchmarks.__main__ as runner

    stub = types.ModuleType("benchmarks.bench_stub")

    def stub_main(argv):
        print(f"| rule | JCT |\n| fifo | {len(argv)} |")
        return 0

    stub.main = stub_main
    monkeypatch.setitem(sys.modules, "benchmarks.bench_stub", stub)
    monkeypatch.setattr(runner, "names", lambda: ["bench_stub"])
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    assert run_benchmarks(["--write-results", "stub", "--a", "b"]) == 0
    out = capsys.readouterr().out
    assert "| fifo | 2 |" in out  # shown as it ran
    page = (tmp_path / "results" / "stub.md").read_text()
    assert "| command | `python -m benchmarks stub --a b` |" in page
    assert "| exit status | 0 |" in page and "| code | `0.1.0+g" in page
    assert "| load average (1 min) |" in page and "cores, Python 3.11" in page
    assert page.rstrip().endswith("| rule | JCT |\n| fifo | 2 |\n```")
    # Without the flag nothing is written.
    (tmp_path / "results" / "stub.md").unlink()
    assert run_benchmarks(["stub"]) == 0
    assert list((tmp_path / "results").iterdir()) == []


def test_the_production_benchmark_names_its_learned_families(capsys) -> None:
    from benchmarks.bench_production import Options

    assert parse(Options, []).families() == ("dl2", "harmony", "chic", "chic-pair", "rl-taps")
    assert parse(Options, ["--learned", "chic", "--learned", "dl2"]).families() == ("chic", "dl2")
    assert parse(Options, ["--learned", "none"]).families() == ()
    code, _, err = _exits("bench_production", ["--learned", "dl3"], capsys)
    assert code == 2 and "choose from dl2, harmony" in _one_line_error(err, "bench_production")


def test_the_production_benchmark_draws_the_what_if(tmp_path, capsys) -> None:
    from benchmarks.bench_production import main

    argv = ["--jobs", "300", "--learned", "none", "--capacity", "0.5,1", "--scheduler", "fifo"]
    assert main([*argv, "--figures", str(tmp_path)]) == 0
    plot = tmp_path / "production-what-if-rules.png"
    assert f"figure: {plot}" in capsys.readouterr().out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
