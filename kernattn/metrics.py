r"""Scorers for the conditional distribution, for ``cross_val_score`` and ``GridSearchCV``.

scikit-learn's scorers call ``predict``; these call the regressors' distribution methods
and follow the same convention, ``scorer(estimator, X, y)`` with greater is better:

- :func:`pinball_scorer` — minus the mean pinball loss of
  :meth:`~kernattn.KernelSmoother.predict_quantiles` at one level :math:`\tau`,
  :math:`-\frac1n \sum_i \rho_\tau(y_i - \hat Q(\tau \mid x_i))` with
  :math:`\rho_\tau(u) = \max(\tau u, (\tau - 1) u)` (Koenker and Bassett 1978 [1]_), the loss
  whose minimizer is the :math:`\tau`-quantile;
- :func:`coverage_scorer` — the fraction of the targets inside
  :meth:`~kernattn.KernelSmoother.conformal_interval`,
  :math:`\frac1n \sum_i 1\{l(x_i) \le y_i \le u(x_i)\}`, to compare with :math:`1 - \alpha`;
- :func:`interval_width_scorer` — minus the intervals' mean width,
  :math:`-\frac1n \sum_i (u(x_i) - l(x_i))`.

Coverage is a check, not a score to maximize (an interval that holds every value covers
them all): score both, ``scoring={"coverage": coverage_scorer(), "width":
interval_width_scorer()}``, and choose on the width (``refit="width"``), the coverage
reported beside it.

Each scorer also takes a scikit-learn :class:`~sklearn.pipeline.Pipeline` that ends in a
kernattn regressor: the queries go through the steps before it and the final step's method
is called (:func:`pipeline_method`, which is also the way to reach
``predict_quantiles``, ``predict_cdf`` or ``conformal_interval`` through a pipeline
directly).

References
----------
.. [1] R. Koenker, G. Bassett, "Regression quantiles", Econometrica 46 (1978).
"""

import numpy as np
from sklearn.metrics import mean_pinball_loss
from sklearn.pipeline import Pipeline

from kernattn._core.docstrings import fill_doc
from kernattn._engine.distribution import (
    check_alpha,
    check_confidence,
    check_conformal_method,
    check_quantiles,
)

__all__ = [
    "pinball_scorer",
    "coverage_scorer",
    "interval_width_scorer",
    "pipeline_method",
]


def pipeline_method(estimator, name):
    """The method ``name`` of a fitted regressor, reached through a ``Pipeline``.

    A :class:`~sklearn.pipeline.Pipeline` exposes its final step's ``predict`` but not the
    methods scikit-learn does not know, such as ``predict_quantiles``. For a pipeline this
    returns a function that transforms the queries with the steps before the last (as
    ``Pipeline.predict`` does; a nested pipeline in the last place is entered in turn) and
    then calls the final step's method with the other arguments unchanged. For any other
    estimator it returns ``getattr(estimator, name)``.

    Parameters
    ----------
    estimator : estimator or Pipeline
        Fitted.
    name : str
        The method, e.g. ``"predict_quantiles"``, ``"predict_cdf"`` or
        ``"conformal_interval"``.

    Returns
    -------
    method : callable
        Called as the final step's method, ``method(X, *args, **kwargs)``, with ``X`` the
        pipeline's input.

    Raises
    ------
    AttributeError
        If the estimator (the final step, for a pipeline) has no method ``name``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from kernattn import KernelSmoother
    >>> X = np.linspace(0, 10, 200)[:, None]
    >>> y = X[:, 0] / 10 + 0.1 * np.random.default_rng(0).normal(size=200)
    >>> pipe = make_pipeline(StandardScaler(), KernelSmoother(bandwidth=0.17)).fit(X, y)
    >>> predict_quantiles = pipeline_method(pipe, "predict_quantiles")
    >>> predict_quantiles([[5.0]], [0.1, 0.5, 0.9]).round(2)
    array([[0.36, 0.5 , 0.61]])
    """
    if isinstance(estimator, Pipeline):
        before = [step for _, step in estimator.steps[:-1]]
        method = pipeline_method(estimator.steps[-1][1], name)

        def through(X, *args, **kwargs):
            for step in before:
                # A step set to None or "passthrough" leaves the queries as they are.
                if step is not None and not isinstance(step, str):
                    X = step.transform(X)
            return method(X, *args, **kwargs)

        return through
    method = getattr(estimator, name, None)
    if not callable(method):
        raise AttributeError(
            f"{type(estimator).__name__} has no method {name!r}: kernattn.metrics needs a "
            "kernattn regressor (KernelSmoother, AttentionRegressor, "
            "LinearAttentionRegressor) or a Pipeline ending in one"
        )
    return method


class _Scorer:
    """``scorer(estimator, X, y, sample_weight=None)``: ``score(estimator, X, y,
    sample_weight, **params)``, shown as the function that made it."""

    def __init__(self, name, score, **params):
        self._name = name
        self._score = score
        self._params = params

    def __call__(self, estimator, X, y, sample_weight=None):
        return self._score(estimator, X, y, sample_weight, **self._params)

    def __repr__(self):
        arguments = ", ".join(f"{key}={value!r}" for key, value in self._params.items())
        return f"{self._name}({arguments})"


def _outputs_last(result, y):
    """A distribution method's result with the queries first, shaped like ``y``: the
    leading output axis of a 2-D target moved last."""
    result = np.asarray(result)
    return np.moveaxis(result, 0, -1) if np.ndim(y) == 2 else result


def _negative_pinball(estimator, X, y, sample_weight, *, quantile):
    y = np.asarray(y, dtype=np.float64)
    predicted = pipeline_method(estimator, "predict_quantiles")(X, [quantile])
    predicted = _outputs_last(np.asarray(predicted)[..., 0], y)
    return -float(mean_pinball_loss(y, predicted, sample_weight=sample_weight, alpha=quantile))


def _interval(estimator, X, y, alpha, method, confidence):
    interval = pipeline_method(estimator, "conformal_interval")
    lower, upper = interval(X, alpha=alpha, method=method, confidence=confidence)
    return np.asarray(y, dtype=np.float64), np.asarray(lower), np.asarray(upper)


def _coverage(estimator, X, y, sample_weight, *, alpha, method, confidence=None):
    y, lower, upper = _interval(estimator, X, y, alpha, method, confidence)
    inside = (lower <= y) & (y <= upper)
    return float(np.mean(np.average(inside, axis=0, weights=sample_weight)))


def _negative_width(estimator, X, y, sample_weight, *, alpha, method, confidence=None):
    _, lower, upper = _interval(estimator, X, y, alpha, method, confidence)
    return -float(np.mean(np.average(upper - lower, axis=0, weights=sample_weight)))


#: The parameters and result of the scorers of ``conformal_interval``.
_INTERVAL_SCORER_PARAMETERS = r"""
Parameters
----------
alpha : float in (0, 1), default=0.1
    One minus the nominal coverage.
method : {"jackknife+", "cv+", "split", "local", "auto"}, default="jackknife+"
    As in ``conformal_interval``; ``"split"`` reads the estimator's calibration
    (``calibrate`` on held-out rows, then score on others).
confidence : float in (0, 1) or None, default=None
    As in ``conformal_interval``: ``None`` for coverage on average over training sets,
    :math:`1 - \delta` for coverage given the training rows with that probability.

Returns
-------
scorer : callable
    ``scorer(estimator, X, y, sample_weight=None)``, the estimator a fitted kernattn
    regressor or a ``Pipeline`` ending in one (see :func:`pipeline_method`).
"""


def _interval_scorer(name, score, alpha, method, confidence):
    """A scorer of ``conformal_interval`` at level ``alpha`` with ``method`` and
    ``confidence``, all checked before any fit."""
    params = {"alpha": check_alpha(alpha), "method": check_conformal_method(method)}
    confidence = check_confidence(confidence)
    if confidence is not None:
        params["confidence"] = confidence
    return _Scorer(name, score, **params)


def pinball_scorer(quantile):
    r"""A scorer of ``predict_quantiles`` at one level: minus the mean pinball loss.

    The pinball loss of the estimate :math:`\hat q_i = \hat Q(\tau \mid x_i)` is
    :math:`\rho_\tau(y_i - \hat q_i)`, :math:`\rho_\tau(u) = \max(\tau u, (\tau - 1)u)`: an
    observation above the estimate costs :math:`\tau` per unit, one below
    :math:`1 - \tau`, so its expectation is least at the true :math:`\tau`-quantile
    (Koenker and Bassett 1978; scikit-learn's
    :func:`~sklearn.metrics.mean_pinball_loss`, averaged over the outputs of a 2-D
    target). The score is minus its (sample-weighted) mean, so that greater is better, as
    for scikit-learn's ``"neg_mean_pinball_loss"``-style scorers; at :math:`\tau = 0.5` it
    is half the mean absolute error of the conditional median.

    Parameters
    ----------
    quantile : float in [0, 1]
        The level :math:`\tau`.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y, sample_weight=None)``, for ``scoring=`` in
        ``cross_val_score``, ``cross_validate`` or ``GridSearchCV``; the estimator a fitted
        kernattn regressor or a ``Pipeline`` ending in one (see :func:`pipeline_method`).

    See Also
    --------
    kernattn.KernelSmoother.predict_quantiles : the estimates it scores.

    References
    ----------
    .. [1] R. Koenker, G. Bassett, "Regression quantiles", Econometrica 46 (1978).

    Examples
    --------
    >>> from sklearn.model_selection import cross_val_score
    >>> from kernattn import KernelSmoother
    >>> from kernattn.datasets import make_curve
    >>> X, y, _ = make_curve(300, noise=0.1, random_state=0)
    >>> model = KernelSmoother(bandwidth=0.05)
    >>> scores = cross_val_score(model, X, y, scoring=pinball_scorer(0.9))
    >>> bool(-0.04 < scores.mean() < 0)  # the loss of a 90 % quantile of N(0, 0.1²): 0.018
    True
    """
    levels = check_quantiles(quantile)
    if levels.shape != (1,):
        raise ValueError(
            f"pinball_scorer takes one quantile level; got {quantile!r} (score several "
            "levels with a dict of scorers, one per level)"
        )
    return _Scorer("pinball_scorer", _negative_pinball, quantile=float(levels[0]))


@fill_doc(interval_scorer_parameters=_INTERVAL_SCORER_PARAMETERS)
def coverage_scorer(alpha=0.1, method="jackknife+", confidence=None):
    r"""A scorer of ``conformal_interval``: the fraction of the targets it covers.

    :math:`\frac1n \sum_i 1\{l(x_i) \le y_i \le u(x_i)\}` (sample-weighted; averaged over
    the outputs of a 2-D target), with :math:`[l, u]` the prediction interval of
    :meth:`~kernattn.KernelSmoother.conformal_interval` at level ``alpha``: on held-out
    rows, an estimate of the interval's coverage, to compare with :math:`1 - \alpha`.

    It is a check, not a score to maximize: the widest interval covers the most. Score it
    beside :func:`interval_width_scorer` (``scoring={"coverage": coverage_scorer(),
    "width": interval_width_scorer()}``) and select on the width.

    %(interval_scorer_parameters)s

    See Also
    --------
    interval_width_scorer : the intervals' mean width, and an example that scores both.
    """
    return _interval_scorer("coverage_scorer", _coverage, alpha, method, confidence)


@fill_doc(interval_scorer_parameters=_INTERVAL_SCORER_PARAMETERS)
def interval_width_scorer(alpha=0.1, method="jackknife+", confidence=None):
    r"""A scorer of ``conformal_interval``: minus the intervals' mean width.

    :math:`-\frac1n \sum_i (u(x_i) - l(x_i))` (sample-weighted; averaged over the outputs
    of a 2-D target), in the targets' units, so that greater (narrower) is better; it is
    :math:`-\infty` where some interval is unbounded (too few residuals, or for
    ``"local"`` too few effective neighbours, support the level). A conformal interval
    keeps its coverage at any bandwidth, so the narrowest is the most informative: choose
    on this score and check the coverage with :func:`coverage_scorer`.

    %(interval_scorer_parameters)s

    See Also
    --------
    coverage_scorer : the fraction of the targets the intervals hold.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from kernattn import KernelSmoother
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 1, size=(300, 1))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=300)
    >>> search = GridSearchCV(
    ...     KernelSmoother(),
    ...     {"bandwidth": [0.02, 0.05, 0.5]},
    ...     scoring={"coverage": coverage_scorer(0.1), "width": interval_width_scorer(0.1)},
    ...     refit="width",
    ... ).fit(X, y)
    >>> search.best_params_
    {'bandwidth': 0.02}
    >>> coverage = search.cv_results_["mean_test_coverage"][search.best_index_]
    >>> bool(0.85 < coverage < 0.95)  # the nominal coverage is 0.9
    True
    """
    return _interval_scorer("interval_width_scorer", _negative_width, alpha, method, confidence)
