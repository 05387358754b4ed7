r"""Regression and classification tasks that need no download.

Each function returns a :class:`Task`: a named tuple ``(X, y, description)`` that unpacks as
``X, y, description = make_curve()``. Sizes and noise levels are parameters; the defaults keep
every task small enough for a cross-validated comparison on a laptop, except
:func:`make_large`, whose point is its size.

==============  =========================================================  ===============
name            what it is                                                 who should win
==============  =========================================================  ===============
``curve``       1-D noisy curve :math:`y = 2\sin x + x^{0.8} + \epsilon`    all smoothers
``friedman1``   Friedman #1: 5 relevant and 5 irrelevant features          per-feature
                                                                           bandwidths
``friedman2``   Friedman #2: impedance of an AC circuit, 4 features         --
``friedman3``   Friedman #3: phase of the same circuit                     --
``diabetes``    scikit-learn's bundled diabetes data (442 × 10)            linear-ish models
``projection``  10-D inputs, target depends on a 2-D projection            a learned kernel
``irrelevant``  3 relevant features among many irrelevant ones             per-feature
                                                                           bandwidths
``large``       a smooth 4-D target with many samples                      linear attention
                                                                           (on time)
==============  =========================================================  ===============

Two classification tasks (integer labels) compare classifiers on held-out log-loss and
accuracy:

==============  =========================================================  ===============
name            what it is                                                 who should win
==============  =========================================================  ===============
``moons``       two interleaved half circles with noise, 2 features        a local vote
``iris``        scikit-learn's bundled iris data (150 × 4, 3 classes)      all classifiers
==============  =========================================================  ===============

:func:`load_task` makes any of them by name; :data:`TASKS` lists the regression tasks and
:data:`CLASSIFICATION_TASKS` the classification tasks.
"""

from typing import NamedTuple

import numpy as np
from sklearn import datasets as _sk_datasets
from sklearn.utils import check_random_state

from kernattn._core.docstrings import fill_doc

__all__ = [
    "Task",
    "TASKS",
    "CLASSIFICATION_TASKS",
    "curve_function",
    "load_task",
    "make_curve",
    "make_friedman1",
    "make_friedman2",
    "make_friedman3",
    "load_diabetes",
    "make_projection",
    "make_irrelevant",
    "make_large",
    "make_moons",
    "load_iris",
]


class Task(NamedTuple):
    """A task: inputs, targets (or labels) and a one-line description."""

    X: np.ndarray
    y: np.ndarray
    description: str


def _check_n_samples(n_samples, minimum=2):
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)):
        raise TypeError(f"n_samples must be an int; got {n_samples!r}")
    if n_samples < minimum:
        raise ValueError(f"n_samples must be at least {minimum}; got {n_samples}")
    return int(n_samples)


def _check_noise(noise):
    if isinstance(noise, bool) or not np.isscalar(noise) or not noise >= 0:
        raise ValueError(f"noise must be a non-negative float; got {noise!r}")
    return float(noise)


def _check_size_and_noise(n_samples, noise):
    """A generated task's ``n_samples`` and ``noise``, checked."""
    return _check_n_samples(n_samples), _check_noise(noise)


#: The end of the docstring of a generated regression task with Gaussian noise.
_NOISE_PARAMETERS = """
noise : float
    Standard deviation of the Gaussian noise added to the target.
random_state : int, RandomState instance or None

Returns
-------
task : Task
"""

#: The parameters and result of a Friedman task.
_FRIEDMAN_PARAMETERS = (
    """
Parameters
----------
n_samples : int"""
    + _NOISE_PARAMETERS
)

#: The parameters and result of a bundled scikit-learn data set.
_BUNDLED_PARAMETERS = """
Parameters
----------
n_samples : int or None
    Draw this many rows without replacement (``None``: all of them).
random_state : int, RandomState instance or None
    Only used to draw the rows.

Returns
-------
task : Task
"""


def curve_function(x):
    r"""The noiseless 1-D curve :math:`f(x) = 2 \sin x + x^{0.8}` (for ``x >= 0``).

    Examples
    --------
    >>> curve_function(np.array([0.0, 1.0])).round(4)
    array([0.    , 2.6829])
    """
    x = np.asarray(x, dtype=float)
    return 2.0 * np.sin(x) + np.abs(x) ** 0.8


def make_curve(n_samples=200, *, noise=0.5, random_state=None):
    r"""The classic attention-pooling demonstration: a noisy 1-D curve.

    :math:`x \sim U(0, 5)`, :math:`y = 2\sin x + x^{0.8} + \epsilon`,
    :math:`\epsilon \sim N(0, \mathrm{noise}^2)`. :func:`curve_function` is the truth.

    The rows come in random order (like the other tasks), so that folds taken in order, as
    ``cross_val_score(..., cv=5)`` takes them, each cover the whole range of ``x``; sorted
    rows would make every fold an extrapolation. To draw ``attention_weights`` as a band
    along the diagonal, sort by ``X[:, 0]`` (:func:`kernattn.plotting.plot_attention` sorts
    by default).

    Parameters
    ----------
    n_samples : int
    noise : float
        Standard deviation of the Gaussian noise.
    random_state : int, RandomState instance or None

    Returns
    -------
    task : Task
        ``X`` of shape (n_samples, 1), ``y`` of shape (n_samples,).

    Examples
    --------
    >>> X, y, description = make_curve(50, random_state=0)
    >>> X.shape, y.shape
    ((50, 1), (50,))
    """
    n, noise = _check_size_and_noise(n_samples, noise)
    rng = check_random_state(random_state)
    x = rng.uniform(0.0, 5.0, size=n)
    y = curve_function(x) + noise * rng.normal(size=n)
    return Task(x[:, None], y, f"1-D curve y = 2 sin x + x^0.8 + N(0, {noise:g}^2), n={n}")


def _friedman(number, features, n_samples, noise, random_state):
    """scikit-learn's Friedman problem ``number`` (#1 with its 10 features), checked and
    described."""
    n, noise = _check_size_and_noise(n_samples, noise)
    make = getattr(_sk_datasets, f"make_friedman{number}")
    options = {"n_features": 10} if number == 1 else {}
    X, y = make(n, noise=noise, random_state=random_state, **options)
    return Task(X, y, f"Friedman #{number}: {features}, noise {noise:g}, n={n}")


@fill_doc(friedman_parameters=_FRIEDMAN_PARAMETERS)
def make_friedman1(n_samples=400, *, noise=1.0, random_state=None):
    r"""Friedman #1: :math:`y = 10 \sin(\pi x_1 x_2) + 20 (x_3 - 0.5)^2 + 10 x_4 + 5 x_5 +
    \epsilon` on :math:`U(0, 1)^{10}`; features 6-10 are irrelevant.

    See :func:`sklearn.datasets.make_friedman1`. Reference: J. Friedman, "Multivariate
    adaptive regression splines", Ann. Statist. 19 (1991).

    %(friedman_parameters)s
    """
    return _friedman(1, "10 features (5 irrelevant)", n_samples, noise, random_state)


@fill_doc(friedman_parameters=_FRIEDMAN_PARAMETERS)
def make_friedman2(n_samples=400, *, noise=125.0, random_state=None):
    r"""Friedman #2, the impedance of an AC circuit:
    :math:`y = \sqrt{x_1^2 + (x_2 x_3 - 1/(x_2 x_4))^2} + \epsilon`.

    The default noise (125) gives the 3:1 signal-to-noise ratio of Friedman (1991). See
    :func:`sklearn.datasets.make_friedman2`.

    %(friedman_parameters)s
    """
    return _friedman(2, "4 features on very different scales", n_samples, noise, random_state)


@fill_doc(friedman_parameters=_FRIEDMAN_PARAMETERS)
def make_friedman3(n_samples=400, *, noise=0.1, random_state=None):
    r"""Friedman #3, the phase of the same circuit:
    :math:`y = \arctan((x_2 x_3 - 1/(x_2 x_4)) / x_1) + \epsilon`.

    Its default noise (0.1), like :func:`make_friedman2`'s, gives the 3:1 signal-to-noise
    ratio of Friedman (1991); see :func:`sklearn.datasets.make_friedman3`.

    %(friedman_parameters)s
    """
    return _friedman(3, "4 features on very different scales", n_samples, noise, random_state)


def _rows_of(loader, name, n_samples, random_state):
    """A bundled scikit-learn data set's inputs and targets, or ``n_samples`` of its rows
    drawn without replacement."""
    X, y = loader(return_X_y=True)
    if n_samples is not None:
        n = _check_n_samples(n_samples)
        if n > len(X):
            raise ValueError(f"n_samples must be at most {len(X)} for {name}; got {n}")
        rows = check_random_state(random_state).choice(len(X), size=n, replace=False)
        X, y = X[rows], y[rows]
    return X, y


@fill_doc(bundled_parameters=_BUNDLED_PARAMETERS)
def load_diabetes(n_samples=None, *, random_state=None):
    """scikit-learn's bundled diabetes data: 442 patients, 10 baseline measurements, target a
    measure of disease progression one year later.

    %(bundled_parameters)s

    Examples
    --------
    >>> X, y, _ = load_diabetes()
    >>> X.shape
    (442, 10)
    """
    X, y = _rows_of(_sk_datasets.load_diabetes, "diabetes", n_samples, random_state)
    return Task(X, y, f"diabetes (scikit-learn): 10 features, n={len(X)}")


@fill_doc(noise_parameters=_NOISE_PARAMETERS)
def make_projection(n_samples=600, *, n_features=10, n_components=2, noise=0.1, random_state=None):
    r"""A high-dimensional task whose target depends on a low-dimensional projection.

    :math:`x \sim N(0, I_d)`, :math:`z = U^\top x` with :math:`U \in R^{d \times k}` a random
    orthonormal basis, and :math:`y = \sin(2 z_1) + \tfrac12 z_2^2 + \dots + \epsilon` (the
    first component through a sine, the others squared). A fixed isotropic kernel sees d
    dimensions of mostly irrelevant distance, and no single input feature is irrelevant, so
    per-feature bandwidths do not help either; a kernel that learns the projection
    (``AttentionRegressor``) should win.

    Parameters
    ----------
    n_samples : int
    n_features : int
        d, the input dimension.
    n_components : int
        k, the dimension of the projection the target depends on (at most d).
    %(noise_parameters)s
    """
    n, noise = _check_size_and_noise(n_samples, noise)
    if not 1 <= n_components <= n_features:
        raise ValueError(
            f"n_components must be between 1 and n_features={n_features}; got {n_components}"
        )
    rng = check_random_state(random_state)
    basis, _ = np.linalg.qr(rng.normal(size=(n_features, n_components)))
    X = rng.normal(size=(n, n_features))
    Z = X @ basis
    y = np.sin(2.0 * Z[:, 0]) + 0.5 * np.sum(Z[:, 1:] ** 2, axis=1)
    y = y + noise * rng.normal(size=n)
    return Task(
        X,
        y,
        f"{n_features}-D Gaussian inputs, target on a random {n_components}-D projection, "
        f"noise {noise:g}, n={n}",
    )


@fill_doc(noise_parameters=_NOISE_PARAMETERS)
def make_irrelevant(n_samples=400, *, n_irrelevant=7, noise=0.1, random_state=None):
    r"""Three relevant features among ``n_irrelevant`` irrelevant ones.

    :math:`x \sim U(-1, 1)^{3 + m}`, :math:`y = \sin(\pi x_1) + x_2^2 + x_1 x_3 + \epsilon`;
    the irrelevant features are on a larger scale (``U(-3, 3)``), so an isotropic kernel on the
    raw inputs mostly measures noise, and a standardized one still gives them most of the
    distance. Per-feature bandwidths (leave-one-out) or a learned projection should ignore
    them.

    Parameters
    ----------
    n_samples : int
    n_irrelevant : int
        Number of irrelevant features (after the three relevant ones).
    %(noise_parameters)s
    """
    n, noise = _check_size_and_noise(n_samples, noise)
    if isinstance(n_irrelevant, bool) or not isinstance(n_irrelevant, (int, np.integer)):
        raise TypeError(f"n_irrelevant must be an int; got {n_irrelevant!r}")
    if n_irrelevant < 0:
        raise ValueError(f"n_irrelevant must be non-negative; got {n_irrelevant}")
    rng = check_random_state(random_state)
    relevant = rng.uniform(-1.0, 1.0, size=(n, 3))
    irrelevant = rng.uniform(-3.0, 3.0, size=(n, n_irrelevant))
    X = np.hstack([relevant, irrelevant])
    y = np.sin(np.pi * X[:, 0]) + X[:, 1] ** 2 + X[:, 0] * X[:, 2]
    y = y + noise * rng.normal(size=n)
    return Task(X, y, f"3 relevant + {n_irrelevant} irrelevant features, noise {noise:g}, n={n}")


@fill_doc(noise_parameters=_NOISE_PARAMETERS)
def make_large(n_samples=10_000, *, n_features=4, noise=0.1, random_state=None):
    r"""A large-n task: a smooth target of a few features with many samples.

    :math:`x \sim U(-2, 2)^d`, :math:`y = \sum_j \sin(x_j) + \tfrac12 \cos(x_1 x_2) +
    \epsilon`. Exact attention costs O(m·n) per prediction of m queries; linear attention
    costs O((m + n)·r) and should win on time here. The default size keeps an n × n kernel
    matrix (kernel ridge regression) under a gigabyte; raise it to see the gap grow.

    Parameters
    ----------
    n_samples : int
    n_features : int
        At least 2.
    %(noise_parameters)s
    """
    n, noise = _check_size_and_noise(n_samples, noise)
    if n_features < 2:
        raise ValueError(f"n_features must be at least 2; got {n_features}")
    rng = check_random_state(random_state)
    X = rng.uniform(-2.0, 2.0, size=(n, n_features))
    y = np.sin(X).sum(axis=1) + 0.5 * np.cos(X[:, 0] * X[:, 1])
    y = y + noise * rng.normal(size=n)
    return Task(X, y, f"large: {n_features} smooth features, noise {noise:g}, n={n}")


def make_moons(n_samples=300, *, noise=0.3, random_state=None):
    """Two interleaved half circles (scikit-learn's ``make_moons``), labels 0 and 1.

    The class boundary is curved: a linear model misses it, a local vote follows it.

    Parameters
    ----------
    n_samples : int
    noise : float
        Standard deviation of the Gaussian noise added to each point's two coordinates.
    random_state : int, RandomState instance or None

    Returns
    -------
    task : Task

    Examples
    --------
    >>> X, y, _ = make_moons(100, random_state=0)
    >>> X.shape, sorted(set(y.tolist()))
    ((100, 2), [0, 1])
    """
    n, noise = _check_size_and_noise(n_samples, noise)
    X, y = _sk_datasets.make_moons(n, noise=noise, random_state=check_random_state(random_state))
    return Task(X, y, f"moons: 2 features, 2 classes, noise {noise:g}, n={n}")


@fill_doc(bundled_parameters=_BUNDLED_PARAMETERS)
def load_iris(n_samples=None, *, random_state=None):
    """scikit-learn's bundled iris data: 150 flowers, 4 measurements, 3 species.

    %(bundled_parameters)s

    Examples
    --------
    >>> X, y, _ = load_iris()
    >>> X.shape, sorted(set(y.tolist()))
    ((150, 4), [0, 1, 2])
    """
    X, y = _rows_of(_sk_datasets.load_iris, "iris", n_samples, random_state)
    return Task(X, y, f"iris (scikit-learn): 4 features, 3 classes, n={len(X)}")


#: The built-in regression tasks by name: the function that makes each.
TASKS = {
    "curve": make_curve,
    "friedman1": make_friedman1,
    "friedman2": make_friedman2,
    "friedman3": make_friedman3,
    "diabetes": load_diabetes,
    "projection": make_projection,
    "irrelevant": make_irrelevant,
    "large": make_large,
}

#: The built-in classification tasks by name: the function that makes each.
CLASSIFICATION_TASKS = {
    "moons": make_moons,
    "iris": load_iris,
}


def load_task(name, *, n_samples=None, random_state=None):
    """Make a built-in task by name.

    Parameters
    ----------
    name : str
        One of :data:`TASKS` or :data:`CLASSIFICATION_TASKS`.
    n_samples : int or None
        ``None`` uses the task's default size.
    random_state : int, RandomState instance or None
        Passed to the task's function.

    Returns
    -------
    task : Task

    Examples
    --------
    >>> X, y, description = load_task("friedman1", n_samples=100, random_state=0)
    >>> X.shape
    (100, 10)
    >>> load_task("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown task 'nope'; choose from curve, friedman1, friedman2, ...
    """
    makers = {**TASKS, **CLASSIFICATION_TASKS}
    if not isinstance(name, str) or name not in makers:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(makers)}")
    kwargs = {"random_state": random_state}
    if n_samples is not None:
        kwargs["n_samples"] = n_samples
    return makers[name](**kwargs)
