"""The comparison harness: rows, scores, seeds, the result table and its files."""

import json
import sys
import types
import warnings

import numpy as np
import pytest
from sklearn.base import is_classifier
from sklearn.dummy import DummyRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.model_selection import KFold, ShuffleSplit, StratifiedKFold
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernattn import ComparisonResult, KernelClassifier, KernelSmoother, compare
from kernattn.compare import (
    DEFAULT_TASKS,
    QUICK_TASKS,
    default_classifiers,
    default_estimators,
    derive_seeds,
    load_tasks,
)
from kernattn.compare._results import CLASSIFICATION_COLUMNS
from kernattn.datasets import CLASSIFICATION_TASKS, load_task, make_curve


def _tiny_tasks():
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, size=(40, 2))
    return {
        "curve": make_curve(30, random_state=0),
        "plane": (X, 3 * X[:, 0] - X[:, 1] + 0.01 * rng.normal(size=40)),
    }


@pytest.fixture(scope="module")
def tiny_result():
    estimators = {"smoother": KernelSmoother(), "ridge": Ridge(alpha=1e-3)}
    return compare(estimators, _tiny_tasks(), cv=3, random_state=0)


def test_one_row_per_task_and_estimator_in_order(tiny_result):
    pairs = [(row["task"], row["estimator"]) for row in tiny_result.rows]
    assert pairs == [
        ("curve", "smoother"),
        ("curve", "ridge"),
        ("plane", "smoother"),
        ("plane", "ridge"),
    ]
    assert tiny_result.tasks == ["curve", "plane"]
    assert tiny_result.estimators == ["smoother", "ridge"]
    row = tiny_result.get("plane", "ridge")
    assert (row["n_samples"], row["n_features"], row["n_splits"]) == (40, 2, 3)
    # A linear target: ridge is near perfect, and better than the smoother.
    assert row["r2_mean"] > 0.99
    assert row["r2_mean"] > tiny_result.get("plane", "smoother")["r2_mean"]


def test_scores_equal_a_direct_cross_validation_with_the_same_splits():
    X, y, _ = make_curve(45, random_state=3)
    splitter = KFold(3, shuffle=True, random_state=7)
    result = compare({"ridge": Ridge()}, {"curve": (X, y)}, cv=splitter)
    mse, r2 = [], []
    for train, test in splitter.split(X):
        prediction = Ridge().fit(X[train], y[train]).predict(X[test])
        mse.append(np.mean((y[test] - prediction) ** 2))
        sst = np.sum((y[test] - y[test].mean()) ** 2)
        r2.append(1 - np.sum((y[test] - prediction) ** 2) / sst)
    row = result.rows[0]
    np.testing.assert_allclose(result.splits[("curve", "ridge")]["mse"], mse)
    np.testing.assert_allclose(row["mse_mean"], np.mean(mse))
    np.testing.assert_allclose(row["mse_std"], np.std(mse))
    np.testing.assert_allclose(row["r2_mean"], np.mean(r2))
    assert row["fit_time"] > 0 and row["predict_time"] > 0


def test_any_regressor_list_is_named_by_class_and_deduplicated():
    result = compare(
        [
            LinearRegression(),
            make_pipeline(StandardScaler(), KNeighborsRegressor(3)),
            DummyRegressor(),
            DummyRegressor(strategy="median"),
        ],
        {"plane": _tiny_tasks()["plane"]},
        cv=2,
        random_state=0,
    )
    assert result.estimators == [
        "LinearRegression",
        "KNeighborsRegressor",
        "DummyRegressor",
        "DummyRegressor-2",
    ]
    # The mean predictor has held-out R² at most about 0.
    assert result.get("plane", "DummyRegressor")["r2_mean"] < 0.05


def test_single_regressor_and_built_in_task_names():
    result = compare(Ridge(), ["curve"], cv=2, random_state=0)
    assert [(r["task"], r["estimator"]) for r in result.rows] == [("curve", "Ridge")]
    assert result.rows[0]["n_samples"] == 200


def test_float_cv_is_a_test_fraction_repeated():
    result = compare({"ridge": Ridge()}, _tiny_tasks(), cv=0.25, n_repeats=4, random_state=0)
    row = result.get("curve", "ridge")
    assert row["n_splits"] == 4
    assert "ShuffleSplit" in result.settings["cv"]
    result = compare({"ridge": Ridge()}, _tiny_tasks(), cv=2, n_repeats=3, random_state=0)
    assert result.get("plane", "ridge")["n_splits"] == 6


def test_same_seed_same_table_and_estimators_are_seeded():
    tasks = _tiny_tasks()
    estimators = {"split": ShuffleSplitRegressor()}
    a = compare(estimators, tasks, cv=2, random_state=5)
    b = compare(estimators, tasks, cv=2, random_state=5)
    assert [r["mse_mean"] for r in a.rows] == [r["mse_mean"] for r in b.rows]
    # The estimator's random_state was None: the comparison set it, so it was reproducible.
    assert estimators["split"].random_state is None


class ShuffleSplitRegressor(Ridge):
    """A regressor whose fit depends on its random_state (fits a random half of the data)."""

    def __init__(self, random_state=None):
        super().__init__()
        self.random_state = random_state

    def fit(self, X, y):
        assert self.random_state is not None
        train, _ = next(ShuffleSplit(1, test_size=0.5, random_state=self.random_state).split(X))
        return super().fit(X[train], y[train])


def test_table_is_aligned_and_marks_the_best(tiny_result):
    text = str(tiny_result)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["task", "estimator"]
    rows = [line for line in lines[2:] if line.startswith(("curve", "plane"))]
    assert len(rows) == 4
    # Aligned: the R² column ends at the same place on every row.
    ends = {line.index("±") for line in rows}
    assert len(ends) == 1
    starred = [line for line in rows if " * " in line or line.rstrip().endswith("*")]
    assert len(starred) == 2
    assert any(line.startswith("plane") and "ridge" in line for line in starred)


def test_csv_round_trip(tiny_result, tmp_path):
    path = tmp_path / "results.csv"
    tiny_result.to_csv(path)
    loaded = ComparisonResult.from_csv(path)
    assert loaded.rows == tiny_result.rows
    assert ComparisonResult.from_csv(tiny_result.to_csv()).rows == tiny_result.rows
    header = path.read_text().splitlines()[0].split(",")
    assert header[:4] == ["task", "estimator", "n_samples", "n_features"]


def test_json_round_trip_keeps_splits_settings_and_descriptions(tiny_result, tmp_path):
    path = tmp_path / "results.json"
    tiny_result.to_json(path)
    loaded = ComparisonResult.from_json(path)
    assert loaded.rows == tiny_result.rows
    assert loaded.splits == tiny_result.splits
    assert loaded.settings == tiny_result.settings
    assert loaded.descriptions == tiny_result.descriptions
    assert str(loaded) == str(tiny_result)
    document = json.loads(path.read_text())
    assert document["rows"][0]["splits"]["r2"] == tiny_result.splits[("curve", "smoother")]["r2"]


def test_loading_something_else_is_a_clear_error(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing columns"):
        ComparisonResult.from_csv(path)
    with pytest.raises(ValueError, match="no 'rows'"):
        ComparisonResult.from_json('{"x": 1}\n')
    with pytest.raises(FileNotFoundError):
        ComparisonResult.from_json(tmp_path / "missing.json")


def test_verbose_prints_a_line_per_pair(capsys):
    compare({"ridge": Ridge(), "knn": KNeighborsRegressor(3)}, _tiny_tasks(), cv=2, verbose=True)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("[1/4] curve") and "ridge" in lines[0]
    assert lines[3].startswith("[4/4] plane") and "knn" in lines[3]


class _Warns(Ridge):
    def fit(self, X, y):
        warnings.warn("first line of the warning\nsecond line", UserWarning, stacklevel=2)
        warnings.warn("another warning", UserWarning, stacklevel=2)
        return super().fit(X, y)


def test_warnings_are_counted_and_kept_not_printed(recwarn):
    result = compare({"warns": _Warns()}, {"plane": _tiny_tasks()["plane"]}, cv=3)
    assert result.rows[0]["n_warnings"] == 2
    assert result.warnings[("plane", "warns")] == ["another warning", "first line of the warning"]
    assert not [w for w in recwarn if "warning" in str(w.message)]


class _Broken(Ridge):
    def fit(self, X, y):
        raise ValueError("cannot fit this")


class _NaNPredictor(Ridge):
    def predict(self, X):
        return np.full(len(X), np.nan)


def test_a_failing_estimator_names_itself_and_the_task():
    with pytest.raises(RuntimeError, match=r"broken failed on task 'plane': ValueError: cannot"):
        compare({"broken": _Broken()}, {"plane": _tiny_tasks()["plane"]}, cv=2)
    with pytest.raises(RuntimeError, match="NaN or infinite"):
        compare({"nan": _NaNPredictor()}, {"plane": _tiny_tasks()["plane"]}, cv=2)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"estimators": {}}, ValueError, "estimators is empty"),
        ({"estimators": 3}, TypeError, "estimators must be"),
        ({"estimators": {"x": object()}}, TypeError, "estimator 'x' must be"),
        ({"tasks": ["nope"]}, ValueError, "unknown task 'nope'"),
        ({"tasks": []}, ValueError, "tasks is empty"),
        ({"tasks": {"t": np.zeros(3)}}, TypeError, "task 't' must be a pair"),
        ({"tasks": 5}, TypeError, "tasks must be"),
        ({"cv": 1}, ValueError, "at least 2 folds"),
        ({"cv": 1.5}, ValueError, r"test fraction, in \(0, 1\)"),
        ({"cv": "five"}, TypeError, "cv must be"),
        ({"n_repeats": 0}, ValueError, "n_repeats must be a positive int"),
        ({"cv": KFold(2), "n_repeats": 2}, ValueError, "n_repeats applies"),
        ({"cv": 50}, ValueError, "only 40 samples"),
        ({"n_jobs": 0}, ValueError, "n_jobs must be None, a positive int or -1"),
        ({"n_jobs": -10_000}, ValueError, "n_jobs must be None, a positive int or -1"),
        ({"n_jobs": 1.5}, TypeError, "n_jobs must be None or a non-zero int"),
        ({"n_jobs": True}, TypeError, "n_jobs must be None or a non-zero int"),
        ({"random_state": "seed"}, ValueError, "cannot be used to seed"),
        ({"error_score": "ignore"}, ValueError, "error_score must be 'raise' or a number"),
        ({"cv": 1, "tasks": ["large"]}, ValueError, "at least 2 folds"),
    ],
)
def test_bad_arguments_fail_before_fitting(kwargs, error, match):
    _MustNotFit.fitted = False
    arguments = {
        "estimators": {"ridge": _MustNotFit()},
        "tasks": {"plane": _tiny_tasks()["plane"]},
    }
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        compare(**arguments)
    assert not _MustNotFit.fitted


class _MustNotFit(Ridge):
    fitted = False

    def fit(self, X, y):
        _MustNotFit.fitted = True
        return super().fit(X, y)


def test_failing_estimators_are_recorded_with_a_numeric_error_score(tmp_path, capsys):
    estimators = {"broken": _Broken(), "ridge": Ridge(), "nan": _NaNPredictor()}
    result = compare(
        estimators, {"plane": _tiny_tasks()["plane"]}, cv=2, error_score=np.nan, verbose=True
    )
    assert result.estimators == ["broken", "ridge", "nan"]
    for name in ("broken", "nan"):
        row = result.get("plane", name)
        assert all(np.isnan(row[key]) for key in ("mse_mean", "r2_mean", "fit_time"))
    assert result.errors[("plane", "broken")] == ["ValueError: cannot fit this"]
    assert "NaN or infinite" in result.errors[("plane", "nan")][0]
    assert ("plane", "ridge") not in result.errors
    assert result.get("plane", "ridge")["r2_mean"] > 0.9
    # The table still marks the best working estimator; the progress line says what failed.
    assert [line for line in str(result).splitlines() if " * " in line][0].startswith(
        "plane  ridge"
    )
    assert "failed: ValueError: cannot fit this" in capsys.readouterr().out
    result.to_json(tmp_path / "results.json")
    assert ComparisonResult.from_json(tmp_path / "results.json").errors == result.errors
    result = compare({"zero": _Broken()}, {"plane": _tiny_tasks()["plane"]}, cv=2, error_score=0)
    assert result.rows[0]["r2_mean"] == 0.0


def test_huge_n_jobs_starts_no_more_workers_than_splits():
    tasks = {"plane": _tiny_tasks()["plane"]}
    result = compare({"ridge": Ridge()}, tasks, cv=2, n_jobs=100_000, random_state=0)
    serial = compare({"ridge": Ridge()}, tasks, cv=2, random_state=0)
    assert result.splits[("plane", "ridge")]["mse"] == serial.splits[("plane", "ridge")]["mse"]


def test_to_frame_returns_a_pandas_frame_or_explains_that_pandas_is_needed(
    tiny_result, monkeypatch
):
    fake = types.ModuleType("pandas")
    fake.DataFrame = lambda rows, columns: ("frame", rows, columns)
    monkeypatch.setitem(sys.modules, "pandas", fake)
    kind, rows, columns = tiny_result.to_frame()
    assert rows == tiny_result.rows and columns[:2] == ["task", "estimator"]
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="to_frame needs pandas"):
        tiny_result.to_frame()


def test_default_estimators_are_fresh_regressors_and_tasks_are_built_in():
    first, second = default_estimators(), default_estimators()
    assert first.keys() == second.keys()
    assert {"KernelSmoother", "KNeighborsRegressor", "KernelRidge"} <= set(first)
    assert all(first[name] is not second[name] for name in first)
    quick = load_tasks(quick=True, random_state=0)
    assert tuple(quick) == QUICK_TASKS
    full = load_tasks(random_state=0)
    assert tuple(full) == DEFAULT_TASKS
    assert all(len(quick[n].X) <= len(full[n].X) for n in QUICK_TASKS)


def test_default_kernel_ridge_search_adapts_its_width_grid_to_the_dimension():
    search = default_estimators(quick=True)["KernelRidge"]
    X = np.random.RandomState(0).normal(size=(30, 4))
    search.fit(X, X[:, 0])
    gammas = search[-1].param_grid["gamma"]
    np.testing.assert_allclose(gammas, np.array([0.3, 1.0, 3.0]) / 4)


class _CountsThreads(Ridge):
    seen = []

    def fit(self, X, y):
        from threadpoolctl import threadpool_info

        _CountsThreads.seen.extend(pool["num_threads"] for pool in threadpool_info())
        return super().fit(X, y)


def test_each_fit_runs_on_one_thread():
    _CountsThreads.seen.clear()
    compare({"t": _CountsThreads()}, {"plane": _tiny_tasks()["plane"]}, cv=2)
    assert _CountsThreads.seen and set(_CountsThreads.seen) == {1}


def test_parallel_splits_give_the_same_scores():
    tasks = {"plane": _tiny_tasks()["plane"]}
    estimators = {"smoother": KernelSmoother(), "ridge": Ridge()}
    serial = compare(estimators, tasks, cv=3, random_state=0)
    parallel = compare(estimators, tasks, cv=3, random_state=0, n_jobs=2)
    for key in serial.splits:
        assert serial.splits[key]["mse"] == parallel.splits[key]["mse"]


def test_the_seed_given_and_the_seeds_drawn_from_it_are_reported_alike():
    estimators = {"split": ShuffleSplitRegressor()}
    result = compare(estimators, _tiny_tasks(), cv=2, random_state=7)
    seeds = derive_seeds(7)
    assert result.settings["random_state"] == 7
    # Data given as arrays: no task seed was used.
    assert result.settings["seeds"] == {
        "tasks": None,
        "splits": seeds["splits"],
        "estimators": seeds["estimators"],
    }
    assert f"random_state={seeds['splits']}" in result.settings["cv"]
    footer = str(result).splitlines()[-1]
    assert footer.startswith("seed 7; drawn from it: ")
    assert f"splitter random_state={seeds['splits']}" in footer
    assert f"estimators random_state={seeds['estimators']}" in footer
    # The footer and the settings survive a JSON round trip.
    loaded = ComparisonResult.from_json(result.to_json())
    assert loaded.settings == result.settings
    assert loaded.seed_line() == footer
    # Built-in tasks are drawn from the task seed.
    built_in = compare({"ridge": Ridge()}, ["curve"], cv=2, random_state=7)
    assert built_in.settings["seeds"]["tasks"] == seeds["tasks"]
    given = compare(
        {"ridge": Ridge()},
        load_tasks(["curve"], random_state=seeds["tasks"]),
        cv=2,
        random_state=7,
    )
    assert [r["mse_mean"] for r in given.rows] == [r["mse_mean"] for r in built_in.rows]


def test_a_splitter_object_keeps_its_own_seed():
    result = compare({"ridge": Ridge()}, _tiny_tasks(), cv=KFold(2), random_state=1)
    assert result.settings["seeds"]["splits"] is None
    assert "splitter" not in result.seed_line()


def test_verbose_2_adds_a_plain_line_per_fold_in_a_log(capsys):
    compare({"ridge": Ridge(), "knn": KNeighborsRegressor(3)}, _tiny_tasks(), cv=2, verbose=2)
    lines = capsys.readouterr().out.strip().splitlines()
    folds = [line for line in lines if line.lstrip().startswith("fold ")]
    pairs = [line for line in lines if line.startswith("[")]
    assert len(folds) == 8 and len(pairs) == 4 and len(lines) == 12
    assert all("elapsed" in line and "remaining" in line for line in folds)
    assert "\r" not in "".join(lines)
    assert "fold 2/2 curve ridge" in folds[1] and "[8/8 folds]" in folds[-1]
    assert "remaining ~0.0 s" in folds[-1]
    assert lines[2].startswith("[1/4] curve")


class _Terminal:
    """A stand-in for standard output on a terminal."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return True


def test_on_a_terminal_the_fold_progress_is_one_line_updated_in_place(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    compare({"ridge": Ridge()}, _tiny_tasks(), cv=3, verbose=2)
    lines = terminal.text.split("\n")
    # Only the per-pair lines end with a newline; the fold progress is rewritten with \r.
    assert [line.rpartition("\r")[2].replace("\033[K", "")[:5] for line in lines[:-1]] == [
        "[1/2]",
        "[2/2]",
    ]
    assert terminal.text.count("\r\033[K  fold ") == 6
    assert "remaining" in terminal.text


def test_warnings_report_lists_each_pairs_distinct_messages():
    result = compare(
        {"warns": _Warns(), "ridge": Ridge()}, {"plane": _tiny_tasks()["plane"]}, cv=3
    )
    report = result.warnings_report()
    assert report.splitlines() == [
        "plane / warns:",
        "  warning: another warning",
        "  warning: first line of the warning",
    ]
    assert ComparisonResult.from_json(result.to_json()).warnings_report() == report
    quiet = compare({"ridge": Ridge()}, {"plane": _tiny_tasks()["plane"]}, cv=3)
    assert quiet.warnings_report() == "No estimator warned or failed on any task."


# ------------------------------------------------------------------ classification


@pytest.fixture(scope="module")
def classification_result():
    estimators = [KernelClassifier(), LogisticRegression()]
    return compare(estimators, ["moons", "iris"], cv=3, random_state=0)


def test_classifiers_get_log_loss_and_accuracy_columns(classification_result):
    result = classification_result
    assert result.task_type == "classification"
    assert list(result.rows[0]) == list(CLASSIFICATION_COLUMNS)
    assert [row["task"] for row in result.rows] == ["moons", "moons", "iris", "iris"]
    assert all(0.8 < row["accuracy_mean"] <= 1 for row in result.rows)
    assert all(0 < row["log_loss_mean"] < 0.5 for row in result.rows)
    assert "StratifiedKFold" in result.settings["cv"]
    table = str(result)
    assert "log-loss (held out)" in table and "accuracy (held out)" in table
    assert "R²" not in table and "* best log-loss on the task" in table
    for task in result.tasks:
        rows = [row for row in result.rows if row["task"] == task]
        best = min(rows, key=lambda row: row["log_loss_mean"])
        marked = [line for line in table.splitlines() if line.startswith(task) and " *" in line]
        assert len(marked) == 1 and best["estimator"] in marked[0]


def test_classification_scores_equal_a_direct_cross_validation():
    X, y, _ = load_task("iris")
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    splitter = StratifiedKFold(3, shuffle=True, random_state=7)
    result = compare(
        {"logistic": LogisticRegression(max_iter=1000)}, {"iris": (X, labels)}, cv=splitter
    )
    losses, accuracies = [], []
    for train, test in splitter.split(X, labels):
        model = LogisticRegression(max_iter=1000).fit(X[train], labels[train])
        proba = model.predict_proba(X[test])
        truth = np.searchsorted(model.classes_, labels[test])
        losses.append(-np.mean(np.log(proba[np.arange(len(test)), truth])))
        accuracies.append(np.mean(model.predict(X[test]) == labels[test]))
    np.testing.assert_allclose(result.splits[("iris", "logistic")]["log_loss"], losses)
    np.testing.assert_allclose(result.rows[0]["accuracy_mean"], np.mean(accuracies))


def test_classification_result_round_trips_and_plots(classification_result, tmp_path):
    result = classification_result
    result.to_csv(tmp_path / "r.csv")
    result.to_json(tmp_path / "r.json")
    assert ComparisonResult.from_csv(tmp_path / "r.csv").rows == result.rows
    loaded = ComparisonResult.from_json(tmp_path / "r.json")
    assert loaded.rows == result.rows and loaded.task_type == "classification"
    from matplotlib.figure import Figure

    top, bottom = Figure().subplots(2, 1)
    assert result.plot(ax=top).get_ylabel() == "held-out log-loss (lower is better)"
    assert result.plot("accuracy", ax=bottom).get_ylabel() == (
        "held-out accuracy (higher is better)"
    )


@pytest.mark.parametrize(
    "estimators, tasks, match",
    [
        ([KernelClassifier(), Ridge()], ["moons"], "mix classifiers .KernelClassifier."),
        ([KernelClassifier()], ["curve"], "unknown classification task 'curve'"),
    ],
)
def test_classifiers_and_regressors_do_not_mix(estimators, tasks, match):
    with pytest.raises(ValueError, match=match):
        compare(estimators, tasks, cv=3)


def test_default_classifiers_are_fresh_classifiers():
    first, second = default_classifiers(), default_classifiers()
    assert list(first) == [
        "KernelClassifier",
        "AttentionClassifier",
        "KNeighborsClassifier",
        "LogisticRegression",
    ]
    assert all(is_classifier(first[name]) for name in first)
    assert all(first[name] is not second[name] for name in first)
    assert list(load_tasks(list(CLASSIFICATION_TASKS), random_state=0)) == ["moons", "iris"]
