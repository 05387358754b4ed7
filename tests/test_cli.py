"""The ``kernattn`` command line."""

import os
import subprocess
import sys

import pytest

from kernattn import ComparisonResult
from kernattn.cli import main
from kernattn.compare import QUICK_TASKS, default_estimators

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_compare_prints_progress_and_table_and_writes_three_files(tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["compare", "--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    n_pairs = len(QUICK_TASKS) * len(default_estimators())
    width = len(str(n_pairs))
    assert f"[{1:>{width}}/{n_pairs}] {QUICK_TASKS[0]}" in text
    assert f"[{n_pairs}/{n_pairs}] {QUICK_TASKS[-1]}" in text
    assert "R² (held out)" in text and "wrote " in text
    assert sorted(os.listdir(out)) == ["comparison.png", "results.csv", "results.json"]
    assert (out / "comparison.png").stat().st_size > 10_000
    loaded = ComparisonResult.from_json(out / "results.json")
    assert loaded.tasks == list(QUICK_TASKS)
    assert loaded.estimators == list(default_estimators())
    assert all(row["n_splits"] == 3 for row in loaded.rows)
    assert ComparisonResult.from_csv(out / "results.csv").rows == loaded.rows


def test_options_choose_tasks_estimators_folds_repeats_and_seed(tmp_path, capsys):
    argv = ["compare", "--quick", "--tasks", "curve,irrelevant", "--estimators"]
    argv += ["KernelSmoother,KNeighborsRegressor", "--folds", "2", "--repeats", "2"]
    argv += ["--seed", "3", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "[4/4] irrelevant   KNeighborsRegressor" in capsys.readouterr().out
    loaded = ComparisonResult.from_json(tmp_path / "results.json")
    assert loaded.tasks == ["curve", "irrelevant"]
    assert loaded.estimators == ["KernelSmoother", "KNeighborsRegressor"]
    assert all(row["n_splits"] == 4 for row in loaded.rows)
    assert loaded.settings["random_state"] == 3
    # The same seed gives the same table.
    assert main(argv) == 0
    again = ComparisonResult.from_json(tmp_path / "results.json")
    assert [r["r2_mean"] for r in again.rows] == [r["r2_mean"] for r in loaded.rows]


@pytest.mark.parametrize("where", ["file", "file/inside"])
def test_out_that_cannot_be_written_is_refused_before_any_fit(tmp_path, capsys, where):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    argv = ["compare", "--quick", "--tasks", "curve", "--estimators", "KernelSmoother"]
    assert main(argv + ["--folds", "2", "--out", str(tmp_path / where)]) == 2
    captured = capsys.readouterr()
    # Nothing was run: the header line printed before the first fit is not there.
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernattn compare: error: cannot write")
    assert "is a file, not a folder" in err[0]
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_n_jobs_minus_one_means_all_cores(tmp_path, capsys):
    argv = ["compare", "--quick", "--tasks", "curve", "--estimators", "KernelSmoother"]
    assert main(argv + ["--folds", "2", "--n-jobs", "-1", "--out", str(tmp_path)]) == 0
    loaded = ComparisonResult.from_json(tmp_path / "results.json")
    assert loaded.settings["n_jobs"] == -1
    assert loaded.rows[0]["n_splits"] == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "--tasks", "nope"], "unknown task 'nope'; choose from curve"),
        (["compare", "--estimators", "Foo"], "unknown estimator 'Foo'"),
        (["compare", "--folds", "1"], "argument --folds: must be at least 2; got 1"),
        (["compare", "--folds", "three"], "argument --folds: must be an integer; got 'three'"),
        (["compare", "--seed", "-1"], "argument --seed: must be at least 0"),
        (["compare", "--repeats", "0"], "argument --repeats: must be at least 1"),
        (["compare", "--n-jobs", "100000"], "argument --n-jobs: must be -1 (all"),
        (["compare", "--n-jobs", "0"], "argument --n-jobs: must be -1 (all"),
        (["compare", "--n-jobs", "-2"], "argument --n-jobs: must be -1 (all"),
        (["compare", "--n-jobs", "many"], "argument --n-jobs: must be an integer"),
        (["compare", "--color"], "unrecognized arguments: --color"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_options_exit_2_with_a_one_line_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert message in lines[0]
    assert "Traceback" not in captured.err


def test_more_folds_than_samples_exits_2(tmp_path, capsys):
    code = main(
        ["compare", "--quick", "--tasks", "curve", "--folds", "500", "--out", str(tmp_path)]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--folds 500 is more than the 120 samples of curve" in err[0]


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--tasks", "--estimators", "--folds", "--repeats", "--seed", "--n-jobs"):
        assert option in text
    for option in ("--out", "--quick", "friedman1", "KernelRidge", "kernattn-results"):
        assert option in text


def test_no_sub_command_prints_the_help_and_exits_2(capsys):
    # argparse's convention for a command line that says nothing to do.
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: kernattn") and "compare" in captured.err


def test_python_dash_m_runs_the_command_line():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "kernattn", "compare", "--tasks", "bad"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "kernattn compare: error: argument --tasks: unknown task 'bad'; choose from curve, "
        "friedman1, friedman2, friedman3, diabetes, projection, irrelevant, large, moons, iris "
        "(comma-separated) or all (see kernattn compare --help)"
    )
    version = subprocess.run(
        [sys.executable, "-m", "kernattn", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert version.returncode == 0 and version.stdout.startswith("kernattn ")


def test_the_one_seed_is_reported_alike_in_header_footer_and_json(tmp_path, capsys):
    from kernattn.compare import derive_seeds

    argv = ["compare", "--quick", "--tasks", "curve", "--estimators", "KNeighborsRegressor"]
    assert main(argv + ["--seed", "11", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    seeds = derive_seeds(11)
    drawn = (
        f"tasks {seeds['tasks']}, splitter random_state={seeds['splits']}, "
        f"estimators random_state={seeds['estimators']}"
    )
    assert lines[0].endswith(f"seed 11 (drawn from it: {drawn})")
    assert f"seed 11; drawn from it: {drawn}" in lines
    assert f"KFold(n_splits=3, random_state={seeds['splits']}, shuffle=True)" in "\n".join(lines)
    settings = ComparisonResult.from_json(tmp_path / "results.json").settings
    assert settings["random_state"] == 11
    assert settings["seeds"] == seeds


def test_show_warnings_prints_each_pairs_messages_after_the_table(tmp_path, capsys):
    argv = ["compare", "--quick", "--tasks", "irrelevant", "--estimators"]
    argv += ["KernelSmoother,KNeighborsRegressor", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "\nwarnings:\n" not in capsys.readouterr().out
    assert main(argv + ["--show-warnings"]) == 0
    text = capsys.readouterr().out
    table, _, report = text.partition("\nwarnings:\n")
    assert "R² (held out)" in table and report
    loaded = ComparisonResult.from_json(tmp_path / "results.json")
    assert report.strip().startswith(loaded.warnings_report())
    for row in loaded.rows:
        header = f"irrelevant / {row['estimator']}:"
        assert (header in report) == (row["n_warnings"] > 0)
        for message in loaded.warnings[("irrelevant", row["estimator"])]:
            assert message.split()[0] in report


def test_the_log_has_a_line_per_fold_with_elapsed_and_remaining(tmp_path, capsys):
    argv = ["compare", "--quick", "--tasks", "curve", "--estimators", "KernelSmoother"]
    assert main(argv + ["--folds", "4", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    folds = [line for line in lines if "fold " in line and "elapsed" in line]
    assert len(folds) == 4 and all("remaining ~" in line for line in folds)
    assert "[1/1] curve" in "\n".join(lines)


def test_classification_tasks_compare_the_classifiers(tmp_path, capsys):
    argv = ["compare", "--quick", "--tasks", "moons", "--estimators"]
    argv += ["KernelClassifier,LogisticRegression", "--out", str(tmp_path)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "[2/2] moons        LogisticRegression" in text
    assert "log-loss (held out)" in text and "accuracy (held out)" in text
    assert "R² (held out)" not in text
    assert (tmp_path / "comparison.png").stat().st_size > 10_000
    loaded = ComparisonResult.from_csv(tmp_path / "results.csv")
    assert loaded.estimators == ["KernelClassifier", "LogisticRegression"]
    assert list(loaded.rows[0])[5:9] == [
        "log_loss_mean",
        "log_loss_std",
        "accuracy_mean",
        "accuracy_std",
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tasks", "moons", "--estimators", "KernelSmoother"], "does not fit classification"),
        (["--tasks", "curve", "--estimators", "KernelClassifier"], "does not fit regression"),
        (["--tasks", "moons,curve"], "--tasks mixes classification tasks (moons) and regression"),
    ],
)
def test_classifiers_and_regressors_do_not_mix_exit_2(argv, message, tmp_path, capsys):
    assert main(["compare", "--quick", *argv, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not os.listdir(tmp_path)


def test_all_tasks_are_the_regression_tasks():
    from kernattn.cli import build_parser
    from kernattn.datasets import TASKS

    args = build_parser().parse_args(["compare", "--tasks", "all"])
    assert args.tasks == list(TASKS)
