"""Compare regressors on regression tasks, or classifiers on classification tasks, side by
side: ``kernattn.compare(...)``.

This module is callable: ``kernattn.compare(estimators, tasks, ...)`` calls the function
:func:`compare` of the same name, and ``import kernattn.compare`` gives that same object, so
``kernattn.compare.load_tasks`` and ``kernattn.compare(...)`` both work.

Every (task, estimator) pair is cross-validated with the same splits; the result holds the
held-out mean squared error and R² (mean ± standard deviation over the splits), the fit time
and the predict time. Any scikit-learn regressor can take part. The defaults,
:func:`default_estimators` and :data:`DEFAULT_TASKS`, are what ``kernattn compare`` runs.

When every estimator is a classifier, the tasks are classification tasks, the folds are
stratified and the scores are the held-out log-loss and accuracy;
:func:`default_classifiers` and :data:`CLASSIFICATION_TASKS` are what ``kernattn compare
--tasks moons,iris`` runs.
"""

import inspect
import numbers
import sys
import time
import types
import warnings

import numpy as np
from joblib import cpu_count
from sklearn.base import clone, is_classifier
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, log_loss, mean_squared_error, r2_score
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    RepeatedKFold,
    RepeatedStratifiedKFold,
    ShuffleSplit,
    StratifiedKFold,
    StratifiedShuffleSplit,
)
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.parallel import Parallel, delayed
from sklearn.utils.validation import check_X_y
from threadpoolctl import threadpool_limits

from kernattn._core.docstrings import fill_doc
from kernattn.compare._results import ComparisonResult
from kernattn.datasets import CLASSIFICATION_TASKS, TASKS, Task, load_task
from kernattn.learned import AttentionClassifier, AttentionRegressor
from kernattn.linear import LinearAttentionRegressor
from kernattn.smoother import KernelClassifier, KernelSmoother

__all__ = [
    "CLASSIFICATION_TASKS",
    "DEFAULT_TASKS",
    "QUICK_TASKS",
    "ComparisonResult",
    "compare",
    "default_classifiers",
    "default_estimators",
    "derive_seeds",
    "load_tasks",
]

#: The tasks of the default comparison (``kernattn compare``). ``large`` is left out: its point
#: is a sample size at which the exact estimators take minutes; ask for it by name.
DEFAULT_TASKS = ("curve", "friedman1", "diabetes", "projection", "irrelevant")

#: The tasks of ``kernattn compare --quick``.
QUICK_TASKS = ("curve", "friedman1", "irrelevant")

# Sample sizes of the quick comparison (diabetes is small already).
_QUICK_SAMPLES = {
    "curve": 120,
    "friedman1": 200,
    "friedman2": 200,
    "friedman3": 200,
    "diabetes": None,
    "projection": 300,
    "irrelevant": 200,
    "large": 2_000,
    "moons": 150,
    "iris": None,
}

#: The parameters and result of the functions that make a comparison's estimators.
_DEFAULT_PARAMETERS = """
Parameters
----------
quick : bool
    Smaller tuning grids, for ``kernattn compare --quick``.

Returns
-------
estimators : dict of str to estimator
    Fresh (unfitted) estimators; the dictionary is new on every call.
"""


@fill_doc(default_parameters=_DEFAULT_PARAMETERS)
def default_estimators(quick=False):
    """The estimators of the default comparison, by name.

    The kernattn estimators with the settings the documentation recommends, and two
    scikit-learn baselines on standardized inputs, each tuned by 3-fold grid search (the
    kernattn estimators tune themselves: leave-one-out bandwidth, learned kernel):

    - ``KernelSmoother``: Gaussian Nadaraya–Watson, one leave-one-out bandwidth per feature;
    - ``AttentionRegressor``: its defaults, one head of learned Gaussian attention (a learned
      metric, tied projections), trained on the leave-one-out loss;
    - ``LinearAttentionRegressor``: its defaults (each query's near keys exactly, the rest
      through 256 Nyström features; linear in n) at the leave-one-out bandwidths;
    - ``KNeighborsRegressor``: the hard, k-nearest version of the average, k tuned;
    - ``KernelRidge``: Gaussian kernel ridge regression, the penalty and width tuned.

    %(default_parameters)s

    Examples
    --------
    >>> for name in sorted(default_estimators()):
    ...     print(name)
    AttentionRegressor
    KNeighborsRegressor
    KernelRidge
    KernelSmoother
    LinearAttentionRegressor
    """
    neighbors = [5, 10, 20] if quick else [3, 5, 10, 20, 40]
    alphas = [1e-2, 1e-1, 1.0]
    # Relative to the dimension: on standardized inputs ‖x − x'‖² is about 2d.
    widths = [0.3, 1.0, 3.0]
    return {
        "KernelSmoother": KernelSmoother(bandwidth="loo"),
        "AttentionRegressor": AttentionRegressor(),
        "LinearAttentionRegressor": LinearAttentionRegressor(bandwidth="loo"),
        "KNeighborsRegressor": make_pipeline(
            StandardScaler(),
            GridSearchCV(
                KNeighborsRegressor(weights="distance"), {"n_neighbors": neighbors}, cv=3
            ),
        ),
        "KernelRidge": make_pipeline(
            StandardScaler(),
            _ScaledGammaSearch(KernelRidge(kernel="rbf"), alphas=alphas, widths=widths),
        ),
    }


@fill_doc(default_parameters=_DEFAULT_PARAMETERS)
def default_classifiers(quick=False):
    """The classifiers of a classification comparison, by name.

    The two Nadaraya–Watson classifiers at their defaults and two scikit-learn baselines on
    standardized inputs:

    - ``KernelClassifier``: Gaussian kernel weights' class sums, bandwidths by likelihood
      cross-validation (fixed, or nearest-neighbour where they lower it clearly);
    - ``AttentionClassifier``: one head of learned attention over the labelled keys;
    - ``KNeighborsClassifier``: the distance-weighted k-nearest vote, k tuned by 3-fold grid
      search on the log-loss;
    - ``LogisticRegression``: a linear boundary, the penalty at its default.

    %(default_parameters)s

    Examples
    --------
    >>> list(default_classifiers())
    ['KernelClassifier', 'AttentionClassifier', 'KNeighborsClassifier', 'LogisticRegression']
    """
    neighbors = [5, 10, 20] if quick else [3, 5, 10, 20, 40]
    return {
        "KernelClassifier": KernelClassifier(),
        "AttentionClassifier": AttentionClassifier(),
        "KNeighborsClassifier": make_pipeline(
            StandardScaler(),
            GridSearchCV(
                KNeighborsClassifier(weights="distance"),
                {"n_neighbors": neighbors},
                cv=3,
                scoring="neg_log_loss",
            ),
        ),
        "LogisticRegression": make_pipeline(StandardScaler(), LogisticRegression()),
    }


class _ScaledGammaSearch(GridSearchCV):
    """Grid search for an RBF kernel ridge whose gamma grid is ``widths / n_features``.

    The gamma that suits standardized data scales like 1/d; the grid follows d at fit time
    so the same default works for 1 and 20 features.
    """

    def __init__(self, estimator, *, alphas=(1e-2, 1e-1, 1.0), widths=(0.3, 1.0, 3.0), cv=3):
        self.alphas = alphas
        self.widths = widths
        super().__init__(estimator, param_grid={}, cv=cv)

    def fit(self, X, y=None, **params):
        d = np.shape(X)[1]
        self.param_grid = {
            "alpha": list(self.alphas),
            "gamma": [w / d for w in self.widths],
        }
        return super().fit(X, y, **params)


def load_tasks(names=None, *, quick=False, random_state=None):
    """Make built-in tasks by name.

    Parameters
    ----------
    names : sequence of str or None
        Names from :data:`kernattn.datasets.TASKS`; ``None`` means :data:`DEFAULT_TASKS`
        (:data:`QUICK_TASKS` when ``quick``).
    quick : bool
        Smaller sample sizes.
    random_state : int, RandomState instance or None

    Returns
    -------
    tasks : dict of str to Task
    """
    if names is None:
        names = QUICK_TASKS if quick else DEFAULT_TASKS
    if isinstance(names, str):
        names = [names]
    rng = check_random_state(random_state)
    tasks = {}
    for name in names:
        n_samples = _QUICK_SAMPLES.get(name) if quick else None
        tasks[name] = load_task(name, n_samples=n_samples, random_state=_draw_seed(rng))
    return tasks


def derive_seeds(random_state=None):
    """The three seeds :func:`compare` draws from ``random_state``, in the order it draws them.

    ``{"tasks": ..., "splits": ..., "estimators": ...}``: the seed of the built-in tasks (for
    :func:`load_tasks`), the splitter's ``random_state`` and the ``random_state`` given to
    every estimator that has one left at ``None``. The same integer always gives the same
    three seeds.

    Examples
    --------
    >>> derive_seeds(0) == derive_seeds(0)
    True
    >>> sorted(derive_seeds(0))
    ['estimators', 'splits', 'tasks']
    """
    rng = check_random_state(random_state)
    return {key: _draw_seed(rng) for key in ("tasks", "splits", "estimators")}


def _draw_seed(rng):
    return int(rng.randint(np.iinfo(np.int32).max))


def _estimator_name(estimator):
    if isinstance(estimator, Pipeline):
        return _estimator_name(estimator.steps[-1][1])
    if isinstance(estimator, GridSearchCV):
        return _estimator_name(estimator.estimator)
    return type(estimator).__name__


def _task_type(named):
    """``"classification"`` when every estimator is a classifier, ``"regression"`` when none
    is; a mix is an error (their scores would not share a column)."""
    classifiers = [name for name, estimator in named.items() if is_classifier(estimator)]
    if not classifiers:
        return "regression"
    if len(classifiers) == len(named):
        return "classification"
    others = [name for name in named if name not in classifiers]
    raise ValueError(
        f"estimators mix classifiers ({', '.join(classifiers)}) and regressors "
        f"({', '.join(others)}); compare them in separate runs"
    )


def _check_estimators(estimators):
    if estimators is None:
        return default_estimators()
    if hasattr(estimators, "fit"):
        estimators = [estimators]
    if isinstance(estimators, dict):
        named = dict(estimators)
    elif isinstance(estimators, (list, tuple)):
        named = {}
        for estimator in estimators:
            name = base = _estimator_name(estimator)
            count = 1
            while name in named:
                count += 1
                name = f"{base}-{count}"
            named[name] = estimator
    else:
        raise TypeError(
            "estimators must be a regressor, a list of regressors or a dict of name -> "
            f"regressor; got {type(estimators).__name__}"
        )
    if not named:
        raise ValueError("estimators is empty: give at least one regressor")
    for name, estimator in named.items():
        if not (hasattr(estimator, "fit") and hasattr(estimator, "predict")):
            raise TypeError(
                f"estimator {name!r} must be a scikit-learn regressor with fit and predict; "
                f"got {type(estimator).__name__}"
            )
    return named


def _check_tasks(tasks, random_state, task_type="regression"):
    classification = task_type == "classification"
    if tasks is None and classification:
        tasks = list(CLASSIFICATION_TASKS)
    if tasks is None or isinstance(tasks, str):
        tasks = None if tasks is None else [tasks]
    if isinstance(tasks, dict):
        checked = {}
        for name, data in tasks.items():
            description = ""
            if isinstance(data, Task):
                X, y, description = data
            elif isinstance(data, (tuple, list)) and len(data) in (2, 3):
                X, y = data[0], data[1]
            else:
                raise TypeError(
                    f"task {name!r} must be a pair (X, y) or a kernattn.datasets.Task; "
                    f"got {type(data).__name__}"
                )
            X, y = check_X_y(X, y, multi_output=not classification, y_numeric=not classification)
            checked[name] = Task(X, y, description or f"{X.shape[1]} features, n={len(X)}")
        if not checked:
            raise ValueError("tasks is empty: give at least one task")
        return checked
    if tasks is None or isinstance(tasks, (list, tuple)):
        if tasks is not None and not tasks:
            raise ValueError("tasks is empty: give at least one task")
        known = CLASSIFICATION_TASKS if classification else TASKS
        unknown = [t for t in tasks or () if not isinstance(t, str) or t not in known]
        if unknown:
            kind = "classification task" if classification else "task"
            raise ValueError(f"unknown {kind} {unknown[0]!r}; choose from {', '.join(known)}")
        return load_tasks(tasks, random_state=random_state)
    raise TypeError(
        "tasks must be a list of built-in task names or a dict of name -> (X, y); "
        f"got {type(tasks).__name__}"
    )


def _check_cv(cv, n_repeats, seed, stratified=False):
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, numbers.Integral):
        raise TypeError(f"n_repeats must be a positive int; got {n_repeats!r}")
    if n_repeats < 1:
        raise ValueError(f"n_repeats must be a positive int; got {n_repeats}")
    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"cv must be at least 2 folds; got {cv}")
        # Classes keep their shares in every fold: a rare class is not missing from one.
        folds, repeated = (
            (StratifiedKFold, RepeatedStratifiedKFold) if stratified else (KFold, RepeatedKFold)
        )
        if n_repeats == 1:
            return folds(n_splits=int(cv), shuffle=True, random_state=seed)
        return repeated(n_splits=int(cv), n_repeats=int(n_repeats), random_state=seed)
    if isinstance(cv, numbers.Real) and not isinstance(cv, bool):
        if not 0.0 < cv < 1.0:
            raise ValueError(f"a float cv is the test fraction, in (0, 1); got {cv}")
        shuffle = StratifiedShuffleSplit if stratified else ShuffleSplit
        return shuffle(n_splits=int(n_repeats), test_size=float(cv), random_state=seed)
    if hasattr(cv, "split") and hasattr(cv, "get_n_splits"):
        if n_repeats != 1:
            raise ValueError(
                "n_repeats applies to an int or float cv; a splitter object sets its own repeats"
            )
        return cv
    raise TypeError(
        "cv must be a number of folds (int >= 2), a test fraction (float in (0, 1)) or a "
        f"scikit-learn splitter; got {cv!r}"
    )


def _seed_estimator(estimator, seed):
    """Give every unset ``random_state`` (also of nested steps) the comparison's seed."""
    params = estimator.get_params(deep=True)
    unset = {
        key: seed
        for key, value in params.items()
        if key.split("__")[-1] == "random_state" and value is None
    }
    if unset:
        estimator.set_params(**unset)
    return estimator


def _makes_tasks(tasks):
    """Whether :func:`compare` draws the tasks itself (built-in names, not given data)."""
    return tasks is None or isinstance(tasks, (str, list, tuple))


def _is_splitter(cv):
    return hasattr(cv, "split") and hasattr(cv, "get_n_splits")


def _duration(seconds):
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class _FoldProgress:
    """Per-fold progress of a comparison, on standard output.

    On a terminal, one line rewritten in place; otherwise (a log file, a pipe), one plain line
    per fold. The time remaining assumes the folds left take as long, on average, as the
    folds done: a rough guide, since tasks and estimators differ in cost.
    """

    def __init__(self, total, *, enabled=True):
        self.total = total
        self.enabled = enabled
        self.done = 0
        self.start = time.perf_counter()
        self._live = False

    def _tty(self):
        isatty = getattr(sys.stdout, "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:  # a closed stream
            return False

    def fold_done(self, task, estimator, fold, n_folds):
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        remaining = elapsed / self.done * (self.total - self.done)
        width = len(str(self.total))
        text = (
            f"  fold {fold}/{n_folds} {task} {estimator}   "
            f"[{self.done:>{width}}/{self.total} folds]   elapsed {_duration(elapsed)}, "
            f"remaining ~{_duration(remaining)}"
        )
        if self._tty():
            sys.stdout.write("\r\033[K" + text)
            sys.stdout.flush()
            self._live = True
        else:
            print(text, flush=True)

    def clear(self):
        """Erase the live line on a terminal, before a permanent line is printed."""
        if self._live:
            sys.stdout.write("\r\033[K")
            sys.stdout.flush()
            self._live = False


def _check_n_jobs(n_jobs):
    """``n_jobs`` as joblib reads it (None, a positive int, or -k for all cores but k − 1)."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral):
        raise TypeError(f"n_jobs must be None or a non-zero int; got {n_jobs!r}")
    n_jobs = int(n_jobs)
    cores = cpu_count()
    if n_jobs == 0 or cores + 1 + n_jobs < 1:
        raise ValueError(
            f"n_jobs must be None, a positive int or -1 (all {cores} cores) down to -{cores}; "
            f"got {n_jobs}"
        )
    return n_jobs


def _workers(n_jobs, n_splits):
    """Processes worth starting: never more than the splits fitted at a time (joblib would
    try to start every worker asked for, and 100 000 processes hang the machine)."""
    if n_jobs is None:
        return None
    if n_jobs < 0:
        n_jobs = cpu_count() + 1 + n_jobs
    return max(1, min(n_jobs, n_splits))


def _check_error_score(error_score):
    if isinstance(error_score, str) and error_score == "raise":
        return error_score
    if isinstance(error_score, numbers.Real) and not isinstance(error_score, bool):
        return float(error_score)
    raise ValueError(
        f"error_score must be 'raise' or a number such as np.nan; got {error_score!r}"
    )


def _class_probabilities(estimator, X, classes):
    """``predict_proba`` with a column for each of the task's ``classes``: a class missing
    from the training part has probability 0."""
    proba = np.asarray(estimator.predict_proba(X), dtype=float)
    full = np.zeros((len(X), len(classes)))
    full[:, np.searchsorted(classes, estimator.classes_)] = proba
    return full


def _fit_and_score(estimator, X, y, train, test, error_score="raise", classes=None):
    # One BLAS/OpenMP thread per fit: every estimator is timed on one core (comparable), the
    # cores are used through n_jobs, and a BLAS thread pool on a busy machine does not spin
    # (which can make a small fit ten times slower).
    with threadpool_limits(limits=1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            start = time.perf_counter()
            estimator.fit(X[train], y[train])
            fit_time = time.perf_counter() - start
            start = time.perf_counter()
            if classes is None:
                prediction = estimator.predict(X[test])
            else:
                prediction = _class_probabilities(estimator, X[test], classes)
            predict_time = time.perf_counter() - start
            prediction = np.asarray(prediction, dtype=float)
            if not np.all(np.isfinite(prediction)):
                raise ValueError("the prediction contains NaN or infinite values")
        except Exception as exc:
            if isinstance(error_score, str):
                raise
            failure = f"{type(exc).__name__}: {str(exc).partition(chr(10))[0]}"
        else:
            failure = None
    messages = sorted({str(w.message).split("\n")[0] for w in caught})
    metrics = ("mse", "r2") if classes is None else ("log_loss", "accuracy")
    if failure is not None:
        return {
            **dict.fromkeys(metrics, error_score),
            "fit_time": float("nan"),
            "predict_time": float("nan"),
            "warnings": messages,
            "error": failure,
        }
    if classes is None:
        scores = {
            "mse": float(mean_squared_error(y[test], prediction)),
            "r2": float(r2_score(y[test], prediction)),
        }
    else:
        scores = {
            "log_loss": float(log_loss(y[test], prediction, labels=classes)),
            "accuracy": float(accuracy_score(y[test], classes[np.argmax(prediction, axis=1)])),
        }
    return {
        **scores,
        "fit_time": fit_time,
        "predict_time": predict_time,
        "warnings": messages,
    }


def _task_splits(task_data, splitter, cv):
    """Every task's splits (a list of (train, test) per task name), checked."""
    splits = {}
    for name, (X, y, _) in task_data.items():
        n_splits = splitter.get_n_splits(X, y)
        if isinstance(cv, numbers.Integral) and cv > len(X):
            raise ValueError(f"cv={cv} folds but task {name!r} has only {len(X)} samples")
        splits[name] = list(splitter.split(X, y))
        if not splits[name] or n_splits < 1:
            raise ValueError(f"the splitter gave no splits for task {name!r}")
    return splits


def _settings(splitter, n_repeats, random_state, seeds, n_jobs):
    """The settings a comparison records: the splitter, the repeats, the ``random_state``
    given (an integer, or None) and what every random choice was seeded with, all drawn
    from it (``seeds``: the built-in tasks, None when the data were given; the splitter,
    None for a splitter object, used as given; every estimator ``random_state`` left at
    None)."""
    given_seed = random_state if isinstance(random_state, numbers.Integral) else None
    return {
        "cv": repr(splitter),
        "n_repeats": int(n_repeats),
        "random_state": None if given_seed is None else int(given_seed),
        "seeds": seeds,
        "n_jobs": n_jobs,
    }


def _runners(splits, n_estimators, n_jobs, verbose):
    """The joblib runner of the folds (no more workers than a task has splits) and the
    fold progress report (shown for ``verbose >= 2``)."""
    progress = _FoldProgress(
        sum(len(s) for s in splits.values()) * n_estimators, enabled=int(verbose or 0) >= 2
    )
    parallel = Parallel(
        n_jobs=_workers(n_jobs, max(len(s) for s in splits.values())), return_as="generator"
    )
    return parallel, progress


def _scores(parallel, fits, task_name, estimator_name, splits, progress):
    """The scores of ``fits`` (a fresh estimator, X, y, the error score and the classes,
    as :func:`_fit_and_score` takes them) on every split, in order, each fold on a clone of
    the estimator; a failure raised as a ``RuntimeError`` naming the task and the
    estimator."""
    template, X, y, error_score, classes = fits
    scores = []
    try:
        for score in parallel(
            delayed(_fit_and_score)(clone(template), X, y, train, test, error_score, classes)
            for train, test in splits
        ):
            scores.append(score)
            progress.fold_done(task_name, estimator_name, len(scores), len(splits))
    except Exception as exc:
        progress.clear()
        raise RuntimeError(
            f"{estimator_name} failed on task {task_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    return scores


def compare(
    estimators=None,
    tasks=None,
    *,
    cv=5,
    n_repeats=1,
    random_state=None,
    n_jobs=None,
    error_score="raise",
    verbose=False,
):
    """Cross-validate every estimator on every task, with the same splits.

    For each task and estimator, each split fits a fresh clone on the training part and
    scores it on the held-out part: mean squared error, :math:`R^2 = 1 - \\mathrm{SSE} /
    \\mathrm{SST}`, the fit time and the predict time (wall clock, seconds). Classifiers
    (every estimator one) are scored on the log-loss of their ``predict_proba``,
    :math:`-\\frac{1}{n}\\sum_i \\log p_{y_i}(x_i)`, and the accuracy of its most probable
    class, with stratified folds.

    Parameters
    ----------
    estimators : regressor, list of regressors, dict of str to regressor, or None
        Any scikit-learn regressors, or any classifiers with ``predict_proba`` (all of one
        kind). A list names each by its class (a pipeline or grid search by its final
        estimator; repeats get a suffix). ``None``: :func:`default_estimators`.
    tasks : list of str, dict of str to (X, y), or None
        Built-in task names (:data:`kernattn.datasets.TASKS`, or
        :data:`kernattn.datasets.CLASSIFICATION_TASKS` for classifiers), or your own data: a
        dict of name to a pair ``(X, y)`` or a :class:`kernattn.datasets.Task`. ``None``:
        :data:`DEFAULT_TASKS` (for classifiers, every classification task).
    cv : int, float or scikit-learn splitter
        An int is the number of shuffled folds (``KFold``; ``RepeatedKFold`` with
        ``n_repeats``; their stratified versions for classifiers); a float in (0, 1) is the
        test fraction of ``n_repeats`` random splits (``ShuffleSplit``); a splitter object is
        used as given.
    n_repeats : int
        Repeats of the folds, or number of random test splits.
    random_state : int, RandomState instance or None
        Draws three seeds: one for the built-in tasks, one for the splitter (its
        ``random_state``) and one for every estimator whose ``random_state`` is left at
        ``None``, so one integer reproduces the whole table. ``result.settings`` records the
        integer (``"random_state"``) and the three seeds drawn from it (``"seeds"``).
    n_jobs : int or None
        Splits fitted in parallel (joblib): a positive int, ``-1`` for all cores (``-k``:
        all but ``k - 1``), ``None`` for joblib's default (one, unless set by
        ``joblib.parallel_config``). No more processes are started than there are splits.
        Each fit runs with one BLAS/OpenMP thread, so its time is per core and comparable
        across estimators; parallel fits still share memory bandwidth: compare times
        measured with the same ``n_jobs``.
    error_score : 'raise' or float
        What a failing fit or prediction (an exception, or NaN or infinite predictions)
        does. ``'raise'`` stops the comparison with a ``RuntimeError``; a number, typically
        ``np.nan``, becomes that split's MSE and R² (its times are NaN), so the row's means
        are NaN, and the comparison goes on; the error messages are kept in
        ``result.errors``.
    verbose : bool or int
        ``True`` (or 1): print a line as each (task, estimator) finishes. 2: also report
        each fold as it finishes, with the time elapsed and a rough estimate of the time
        remaining (one line updated in place on a terminal, a line per fold otherwise).

    Returns
    -------
    result : ComparisonResult
        One row per (task, estimator); prints as a table, ``to_csv``, ``to_json``, ``plot``.

    Raises
    ------
    ValueError, TypeError
        Bad arguments, before anything is fitted.
    RuntimeError
        An estimator failed on a task, with ``error_score='raise'`` (the message names both;
        the original error is chained).

    Examples
    --------
    >>> from sklearn.linear_model import Ridge
    >>> from kernattn import KernelSmoother
    >>> from kernattn.datasets import make_curve
    >>> result = compare([KernelSmoother(), Ridge()], {"curve": make_curve(60, random_state=0)},
    ...                  cv=3, random_state=0)
    >>> [(row["task"], row["estimator"]) for row in result.rows]
    [('curve', 'KernelSmoother'), ('curve', 'Ridge')]
    """
    # Every argument is checked before the tasks are made, and all before anything is fitted.
    n_jobs = _check_n_jobs(n_jobs)
    error_score = _check_error_score(error_score)
    named = _check_estimators(estimators)
    task_type = _task_type(named)
    classification = task_type == "classification"
    task_seed, split_seed, estimator_seed = derive_seeds(random_state).values()
    splitter = _check_cv(cv, n_repeats, split_seed, stratified=classification)
    task_data = _check_tasks(tasks, task_seed, task_type)
    splits = _task_splits(task_data, splitter, cv)
    seeds = {
        "tasks": task_seed if _makes_tasks(tasks) else None,
        "splits": None if _is_splitter(cv) else split_seed,
        "estimators": estimator_seed,
    }
    result = ComparisonResult(
        settings=_settings(splitter, n_repeats, random_state, seeds, n_jobs),
        descriptions={name: task.description for name, task in task_data.items()},
    )
    parallel, progress = _runners(splits, len(named), n_jobs, verbose)
    for task_name, (X, y, _) in task_data.items():
        classes = np.unique(y) if classification else None
        for estimator_name, estimator in named.items():
            template = _seed_estimator(clone(estimator), estimator_seed)
            fits = (template, X, y, error_score, classes)
            scores = _scores(
                parallel, fits, task_name, estimator_name, splits[task_name], progress
            )
            row = result.add(task_name, estimator_name, X.shape, scores)
            if verbose:
                progress.clear()
                total = len(task_data) * len(named)
                print(result.progress_line(row, len(result.rows), total), flush=True)
    return result


class _CallableModule(types.ModuleType):
    """The module ``kernattn.compare``: calling it calls :func:`compare`."""

    def __call__(self, *args, **kwargs):
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
sys.modules[__name__].__signature__ = inspect.signature(compare)
