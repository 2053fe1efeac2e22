"""A bad benchmark argument is a usage error (exit 2, one line on stderr), not a traceback."""

from __future__ import annotations

import pytest

from benchmarks import bench_chic_arena, bench_dl2_finetune, bench_harmony, bench_scoreboard


@pytest.mark.parametrize(
    ("run", "argv", "says"),
    [
        (bench_scoreboard.main, ["--seeds"], "--seeds needs a value"),
        (bench_scoreboard.main, ["--seeds", "a,b"], "invalid literal for int()"),
        (bench_scoreboard.main, ["--bogus"], "unknown argument '--bogus'"),
        (bench_dl2_finetune.run, ["--set", "credit_mode=job"], "not a GroupedConfig field"),
        (bench_dl2_finetune.run, ["--set", "job_noise=one"], "not JSON"),
        (bench_chic_arena.run, ["--configs", "default,nope"], "unknown configs ['nope']"),
        (bench_harmony.main, ["--set", "rollout_speed=simulator"], "the value is not JSON"),
        (bench_harmony.main, ["--set", 'rollout_speed="x"'], "rollout_speed must be one of"),
        (bench_harmony.main, ["--systems", "harmony,dl2"], "systems are harmony"),
        (bench_harmony.main, ["--updates", "many"], "invalid int value"),
        (bench_harmony.main, ["--train-sequences", "0"], "'0': must be at least 1"),
        (bench_harmony.main, ["--sequences", "two"], "'two' is not a whole number"),
    ],
)
def test_bad_argument_exits_2(run, argv, says, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        run(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_harmony_options_reach_the_systems() -> None:
    opts = bench_harmony.parse(
        ["--systems", "harmony,harmony-warm-start", "--set", 'rollout_speed="simulator"']
    )
    assert opts.systems == ("harmony", "harmony-warm-start")
    # sequence counts default to the run's: None for training and validation (the stage's
    # config), the evaluation's held-out count
    assert (opts.train_sequences, opts.val_sequences) == (None, None)
    assert opts.sequences == bench_harmony.HarmonyEvalConfig().n_sequences
    assert bench_harmony.parse(["--train-sequences", "96"]).train_sequences == 96
    base = bench_harmony.PlacementTrainConfig(**dict(opts.set))
    made = bench_harmony.systems(base)
    assert made["harmony"].rollout_speed == "simulator"
    assert made["harmony-warm-start"].updates == 0
    # as_published undoes the change with every other deviation
    assert made["harmony-as-published"].rollout_speed == "predictor"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["nope"], "unknown benchmark 'nope'; known: chic,"),
        (["harmony", "nope"], "unrecognized arguments: nope"),
        (["env", "--fast"], "env takes no arguments (given: --fast)"),
        # The arguments reach the benchmark (before, it ran at its defaults, then died on
        # "--train-sequences" as a benchmark's name).
        (["harmony", "--train-sequences", "0"], "'0': must be at least 1"),
        (["bench_scoreboard", "--bogus"], "unknown argument '--bogus'"),
    ],
)
def test_the_benchmark_runner_passes_arguments_or_refuses(argv, says, capsys) -> None:
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_help_prints_the_benchmarks_usage(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        bench_scoreboard.main(["--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == bench_scoreboard.__doc__.strip()
