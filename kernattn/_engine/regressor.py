r"""The Nadaraya–Watson engine shared by every kernattn regressor.

All three estimators predict

.. math::

    \hat y(x) = \sum_h a_h \sum_i w^h_i(x)\, y_i + b, \qquad
    w^h_i(x) = \frac{s_i\, \kappa_h(x, x_i)}{\sum_j s_j\, \kappa_h(x, x_j)}

(:math:`s_i` the sample weights, :math:`a_h, b` the mixture of the heads; one head with
:math:`a = 1, b = 0` is the plain Nadaraya–Watson estimate) and differ only in the kernel
:math:`\kappa_h`. An estimator's ``fit`` learns its kernel and hands this base a fitted kernel
object, ``kernel_``; everything else is done here, once, for all of them:

- validation of the parameters (scikit-learn's ``_parameter_constraints``) and of the data;
- the fit transaction: a fit that fails leaves an earlier fit intact;
- the exact prediction path: queries in blocks bounded by ``working_memory``, keys in tiles,
  logits turned into weights with the log-sum-exp shift (or, for never-positive logits, only
  the rows that underflow recomputed from :meth:`SoftmaxHeads.unit_logits`), on threads;
- the mixture of the heads and ``predict(X, return_std=True)`` (a head's moments and their
  mixture are functions of :mod:`kernattn._engine.moments`), ``attention_weights(X,
  head=)``, ``attention_entropy`` and ``effective_neighbors``;
- the conditional distribution from the same weights: ``predict_cdf``,
  ``predict_quantiles`` (the kernel sums over the keys in target order) and
  ``conformal_interval`` (the leave-one-out residuals of the kernel average, with the
  reduction's left-out pairs), the methods of
  :class:`~kernattn._engine.conditional.ConditionalDistributionMixin` over the mathematics
  of :mod:`kernattn._engine.distribution`.

The exact sums, weights and centered moments of a head are the kernel's own
(:meth:`SoftmaxHeads.sums`, :meth:`~SoftmaxHeads.weights`, :meth:`~SoftmaxHeads.centered`,
all through the one reduction of :mod:`kernattn._core.sums`). An estimator with a kernel that is
not exact (linear attention) overrides the per-head hooks :meth:`_head_moments` and
:meth:`_head_weights`, and sends what it cannot approximate through the exact kernel it
approximates.
"""

import warnings
from contextlib import contextmanager
from functools import cached_property
from numbers import Integral

import numpy as np
from scipy.special import entr
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from kernattn._core.blocks import KEY_TILE, map_query_blocks
from kernattn._core.docstrings import fill_doc
from kernattn._core.namespaces import from_caller, in_caller_library
from kernattn._core.numerics import normalized_weights, power_of_two_scale, weighted_mean
from kernattn._core.rows import Rows, out_of_core_predict, out_of_core_rows
from kernattn._core.warning_types import LocalDesignWarning
from kernattn._engine.conditional import ConditionalDistributionMixin
from kernattn._engine.heads import head_indices
from kernattn._engine.moments import (
    HELD_BACK_ROWS,
    accurate_spread,
    blend,
    held_back_share,
    kernel_moments,
    mixture,
    polynomial_fit,
    spread_about,
    weighted_moments,
)
from kernattn._local.fits import BlendedLine, LocalPolynomials, TiltedWeights
from kernattn._local.polynomial import anchor_order, held_back_message

__all__ = [
    "FIT_RETURNS_AND_NOTES",
    "HELD_BACK_ROWS",
    "KEY_TILE",
    "NadarayaWatsonRegressor",
    "canonical_order",
    "fit_transaction",
    "validated_queries",
]

#: The end of the docstring of a ``fit`` on the engine's canonical order of rows: what it
#: returns, and that the order the rows come in does not matter.
FIT_RETURNS_AND_NOTES = """
Returns
-------
self : object
    The fitted estimator.

Notes
-----
The rows are fitted in an order set by their contents (sorted by inputs, targets
and weights): any permutation of them gives the same fit and the same predictions,
to the last bit.
"""


@contextmanager
def fit_transaction(estimator):
    """Restore ``estimator``'s state if the body raises: a failed fit leaves the last fit."""
    previous = dict(estimator.__dict__)
    try:
        yield
    except BaseException:
        estimator.__dict__.clear()
        estimator.__dict__.update(previous)
        raise


def validated_queries(estimator, X):
    """The queries of a fitted ``estimator``, checked by scikit-learn (its messages for
    NaN, shapes and feature counts), in float64."""
    check_is_fitted(estimator)
    X = validate_data(estimator, X, reset=False, dtype=[np.float64, np.float32])
    return np.asarray(X, dtype=np.float64)


def canonical_order(X, Y, sample_weight):
    """An order of the training rows that depends only on their contents: sorted by the
    inputs, then the targets, then the weights (rows equal in all three are
    interchangeable). A fit that works in this order takes every sum in the same order
    whatever order the rows came in, and is the same to the last bit for any permutation
    of them: a leave-one-out optimization on degenerate data amplifies a rounding
    difference in its first sums into a different end point."""
    # Without ties in the first input its order alone is the lexicographic one (and an
    # argsort is several times faster than the lexsort of every column at 10⁶ rows).
    if X.shape[1] and len(X):
        order = np.argsort(X[:, 0])
        first = X[order, 0]
        if np.all(first[1:] > first[:-1]):
            return order
    return np.lexsort(np.column_stack([X, Y, sample_weight])[:, ::-1].T)


class DeferredValueColumns:
    """The value columns ``[v, v², 1]`` of the values ``v`` (centered, divided by
    ``scale``), built on first use and kept: a fit whose predictions never meet the exact
    kernel (the binned tier) does not build them, and the estimator's state is the same
    object before and after they are built (two threads that both build them build the
    same array)."""

    def __init__(self, values, scale, dtype):
        self._arguments = (values, scale, dtype)

    @cached_property
    def columns(self):
        values, scale, dtype = self._arguments
        scaled = values / scale
        columns = np.hstack([scaled, scaled**2, np.ones((len(scaled), 1))])
        return columns.astype(dtype, copy=False)


class Deferred:
    """A value of a fit computed on first use and kept: the leave-one-out residuals of
    conformal intervals, the fold models of CV+ intervals, a bandwidth in y chosen by
    cross-validation (a fit that never asks for them does not pay for them). The estimator
    holds the same object before and after."""

    def __init__(self):
        self._value = None

    def get(self, compute):
        if self._value is None:
            self._value = compute()
        return self._value


class NadarayaWatsonRegressor(ConditionalDistributionMixin, RegressorMixin, BaseEstimator):
    """Base class: a Nadaraya–Watson regressor defined by a fitted kernel object.

    Subclasses set ``_parameter_constraints`` (every constructor parameter) and implement

    - ``_fit_kernel(X, Y, sample_weight)`` → the fitted kernel object (a
      :class:`~kernattn._engine.heads.SoftmaxHeads`, or an object with ``n_heads``,
      ``head_weights`` and ``head_bias`` whose hooks the subclass overrides). ``X`` (float64,
      (n, d)), ``Y`` (float64, (n, n_outputs)) and ``sample_weight`` hold the rows with
      positive weight, in :func:`canonical_order` unless the subclass sets
      ``_canonical_rows = False`` (then in the order given); ``self._values`` (centered
      targets) and ``self._log_sample_weight`` are set before it is called, in the same
      order;
    - optionally ``_check_params()`` for checks across parameters (before any work).

    The hooks are called from several threads at once: they must not write to ``self``.

    After ``fit`` the base holds ``kernel_``, ``X_fit_``, ``y_fit_`` and ``sample_weight_``
    (copies of the training data as given, so that ``attention_weights`` has one column per
    training row and later changes to the caller's arrays change nothing).
    """

    _parameter_constraints: dict = {"n_jobs": [Integral, None]}
    # Fit the rows in an order set by their contents: predictions then do not depend on
    # the order of the training rows, to the last bit.
    _canonical_rows = True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    # ------------------------------------------------------------------ fitting

    @_fit_context(prefer_skip_nested_validation=True)
    @fill_doc(fit_returns_and_notes=FIT_RETURNS_AND_NOTES)
    def fit(self, X, y, sample_weight=None):
        """Fit the kernel and store the training set.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training inputs (the keys). float32 input is kept in float32.
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
            Training targets (the values).
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative. An integer weight is the same as repeating the row.

        %(fit_returns_and_notes)s
        """
        rows = X if isinstance(X, Rows) else out_of_core_rows(X, y, sample_weight)
        if rows is None:
            # Arrays of another library (torch, cupy, …) are fitted in numpy.
            (X, y, sample_weight), _ = from_caller(X, y, sample_weight)
        with fit_transaction(self):
            self._check_params()
            if rows is None:
                self._fit_arrays(X, y, sample_weight)
            else:
                self._fit_rows(rows)
        return self

    def _fit_arrays(self, X, y, sample_weight, **options):
        """The fit on arrays in memory (``options`` go to ``_fit_kernel``)."""
        X, y, sample_weight = self._validate_training_data(X, y, sample_weight)
        Y = y.reshape(len(y), -1)
        positive = sample_weight > 0
        if np.all(positive):
            active = canonical_order(X, Y, sample_weight) if self._canonical_rows else None
        else:
            active = np.flatnonzero(positive)
            if self._canonical_rows:
                active = active[canonical_order(X[active], Y[active], sample_weight[active])]
        if active is None:
            active = np.arange(len(X))
            kept = X, Y, sample_weight
        else:
            kept = X[active], Y[active], sample_weight[active]
        self._set_training_set(X, y, sample_weight, active, *kept[1:])
        self.kernel_ = self._fit_kernel(*kept, **options)

    def _fit_rows(self, rows):
        """The fit on training rows in parts (:class:`~kernattn._core.rows.Rows`, e.g. the
        partitions of an out-of-core source): here brought into memory and fitted there; an
        estimator that can fit part by part overrides it."""
        self._fit_arrays(*rows.collect())

    def _check_params(self):
        """Checks beyond each parameter's constraints (subclasses add checks across
        parameters); raise before anything on ``self`` changes."""
        for name, constraints in self._parameter_constraints.items():
            value = getattr(self, name)
            # bool is an int to Python, never a number of anything to a user.
            if isinstance(value, bool | np.bool_) and not {"boolean", "verbose"} & set(
                c for c in constraints if isinstance(c, str)
            ):
                raise InvalidParameterError(
                    f"The {name!r} parameter of {type(self).__name__} must not be a bool; "
                    f"got {value!r}."
                )
        if self.n_jobs == 0:
            raise InvalidParameterError(
                "The 'n_jobs' parameter must be None, a positive integer or a negative one "
                "(-1 for all cores); got 0."
            )

    def _validate_training_data(self, X, y, sample_weight, reset=True):
        """scikit-learn's checks (and messages) for X, y and sample_weight; float64 out.

        Sets ``_dtype`` (the precision of predictions: float32 for float32 inputs).
        """
        X, y = validate_data(
            self,
            X,
            y,
            reset=reset,
            multi_output=True,
            y_numeric=True,
            dtype=[np.float64, np.float32],
        )
        if reset:
            self._dtype = X.dtype
        X = np.array(X, dtype=np.float64)
        y = np.array(y, dtype=np.float64)
        sample_weight = _check_sample_weight(
            sample_weight, X, dtype=np.float64, ensure_non_negative=True, copy=True
        )
        if not np.any(sample_weight > 0):
            raise ValueError("sample_weight must have at least one positive entry")
        return X, y, sample_weight

    def _set_training_set(self, X, y, sample_weight, active, Y, kept_weight):
        """Store the training set (``X``, ``y``, ``sample_weight`` as given) and what the
        kept rows ``active`` (their targets ``Y``, 2-D, and weights ``kept_weight``) give
        the engine: centered values, their scale, the log weights."""
        self.X_fit_ = X
        self.y_fit_ = y
        self.sample_weight_ = sample_weight
        # Divided by the largest weight: the sums of weights of 1e308 each stay finite, and
        # equal weights of any unit are exactly 1.
        sw = normalized_weights(kept_weight)
        self._active = active
        if np.all(sw == sw[0]):
            self._log_sample_weight = np.zeros(len(sw))
        else:
            self._log_sample_weight = np.log(sw / sw.max())
        # Targets are stored centered: the weighted second moment used by return_std then
        # does not cancel catastrophically for targets far from zero. The mean is taken of
        # the targets divided by a power of two, which cannot overflow.
        self._y_offset = weighted_mean(Y, sw)
        self._values = Y - self._y_offset
        self._target_shape = y.shape[1:]
        # The kernel sums are of the value columns [v, v², 1], the values divided by one
        # power of two per output (exact): v² of targets near 1e200 would overflow, of
        # targets near 1e-200 underflow. Estimates and spreads are computed in these units,
        # and multiplied back only at the end (a variance of 1e400 has no float, its square
        # root has).
        self._value_scale = power_of_two_scale(self._values, axis=0)
        # Built on first use (a fit on the binned tier may never need them).
        self._value_columns_built = DeferredValueColumns(
            self._values, self._value_scale, self._dtype
        )
        # The kept rows in increasing order of each output's target, once: the conditional
        # CDF and its quantiles are cumulative sums of the weights in this order.
        self._target_order = np.argsort(Y, axis=0, kind="stable")
        self._sorted_targets = np.take_along_axis(Y, self._target_order, axis=0)
        # The leave-one-out residuals of conformal intervals and the cross-validated
        # bandwidth in y of a smoothed CDF, computed on first use.
        self._residuals_built = Deferred()
        self._y_bandwidth_built = Deferred()
        # The K-fold refits of CV+ conformal intervals, fitted on first use.
        self._fold_models_built = Deferred()
        # The held-out residuals of split conformal intervals measured an earlier fit.
        self.__dict__.pop("_calibration", None)

    @property
    def _value_columns(self):
        """The value columns ``[v, v², 1]`` of the kept keys in the engine's units, in the
        precision of predictions (:class:`DeferredValueColumns`). No attribute when no
        keys are kept."""
        try:
            return self.__dict__["_value_columns_built"].columns
        except KeyError:
            raise AttributeError("_value_columns") from None

    # ------------------------------------------------------------------- hooks

    def _head_moments(self, X, h, return_std, exact=None):
        """Head ``h``'s estimate ``E_w[v]``, with ``return_std`` the spread of the values
        around it, ``E_w[(v − E_w[v])²]`` (else ``None``), and a mask of the rows that an
        approximate kernel could not serve and sent through the exact path (``None``: every
        row is exact). In the engine's units: centered values divided by ``_value_scale``
        (:mod:`kernattn._engine.moments`).

        ``exact``: what gives the exact kernel's moments of a row, an object with
        ``moments(X, h, columns)`` and ``centered(X, h, values)``
        (:meth:`SoftmaxHeads.moments`, :meth:`SoftmaxHeads.centered`); default the fitted
        kernel (a prediction in stages passes the states of rows computed elsewhere).

        A head with a local fit (``kernel_.local[h]``) gives that fit's estimate instead:
        local polynomials (the mask then holds the queries held back), tilted weights or a
        blend of the local constant and a line (the mask holds the queries whose line is
        held back)."""
        local = self._local_fit(h)
        if isinstance(local, LocalPolynomials):
            fit = polynomial_fit(self.kernel_, X, h, local, self._values.shape[1])
            if not return_std:
                return fit.mean, None, fit.held_back
            return fit.mean, self._spread_about(X, h, fit, fit.mean, exact), fit.held_back
        if isinstance(local, TiltedWeights):
            return weighted_moments(self._head_weights(X, h), self._centered_values(), return_std)
        if isinstance(local, BlendedLine):
            return self._blended_moments(X, h, return_std, local)
        return self._kernel_moments(X, h, return_std, exact)

    def _local_fit(self, h):
        """Head ``h``'s local fit (``None``: the kernel average)."""
        local = getattr(self.kernel_, "local", None)
        return None if local is None else local[h]

    def _kernel_moments(self, X, h, return_std, exact=None):
        """The kernel average's :meth:`_head_moments`."""
        sums = self.kernel_.sums(X, h, self._value_columns)
        first, second = kernel_moments(sums, self._values.shape[1], return_std)
        if not return_std:
            return first, None, None
        return first, self._accurate_spread(X, h, first, second - first**2, second, exact), None

    def _spread_about(self, X, h, fit, center, exact=None):
        """``E_w[(v − center)²]`` under head ``h``'s kernel weights from a local fit's
        kernel averages (:func:`~kernattn._engine.moments.spread_about`), redone where it
        cancels (``exact``: the kernel, as in :meth:`_accurate_spread`)."""
        spread, second = spread_about(fit, center)
        return np.maximum(self._accurate_spread(X, h, center, spread, second, exact), 0.0)

    def _blended_moments(self, X, h, return_std, local):
        """:meth:`_head_moments` for a head that blends its local constant (tilted or not)
        and a line on the blend's own kernel (:class:`~kernattn._local.fits.BlendedLine`,
        :func:`~kernattn._engine.moments.blend`)."""
        if local.constant is None:
            first, spread, _ = self._kernel_moments(X, h, return_std)
        else:
            weights = local.constant_weights(self.kernel_.weights(X, h), self.kernel_, X, h)
            first, spread, _ = weighted_moments(weights, self._centered_values(), return_std)
        line = polynomial_fit(local.kernel, X, 0, local.line, self._values.shape[1])
        line_spread = None
        if return_std:

            def line_spread(mean):
                return self._spread_about(X, 0, line, mean, local.kernel)

        mean, spread = blend(local.share, (first, spread), line.mean, line_spread)
        return mean, spread, line.held_back

    def _accurate_spread(self, X, h, first, spread, second, exact=None):
        """:func:`~kernattn._engine.moments.accurate_spread` with ``exact`` the kernel
        (default ``kernel_``; an approximate estimator passes the exact kernel it
        approximates, or the states of its rows computed elsewhere)."""
        exact = self.kernel_ if exact is None else exact
        return accurate_spread(exact, X, h, first, spread, second, self._centered_values)

    def _centered_values(self):
        """The centered values in the engine's units (divided by ``_value_scale``), one row
        per kept key, float64: what the exact kernel's moments are taken of (none when no
        keys are kept)."""
        t = len(self._y_offset)
        columns = getattr(self, "_value_columns", None)
        if columns is None:
            return np.zeros((0, t))
        return columns[:, :t].astype(np.float64)

    def _head_weights(self, X, h):
        """Head ``h``'s weights of a block of queries against the positive-weight rows (a
        local fit's equivalent weights, if the head has one)."""
        local = self._local_fit(h)
        if local is None:
            return self.kernel_.weights(X, h)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # A distant query's kernel weights come from its unit-path logits.
            weights = self.kernel_.weights(X, h)
        return local.weights(weights, self.kernel_, X, h)[0]

    def _block_width(self):
        """Keys a query meets (for the work estimate and block size) and the key tile."""
        local = getattr(self.kernel_, "local", ())
        if any(isinstance(getattr(f, "constant", f), TiltedWeights) for f in local):
            # A tilted block holds its weights against every key, several times over.
            return 8 * self.kernel_.n_keys, None
        return self.kernel_.n_keys, KEY_TILE

    # ------------------------------------------------------------- predicting

    def _validate_queries(self, X):
        return validated_queries(self, X)

    def _check_heads(self, heads):
        """Head indices: all for ``None``; distinct integers in range otherwise."""
        return head_indices(heads, self.kernel_.n_heads)

    def _mixture(self, X, return_std, heads, exact=None):
        """Mixed estimate (centered units), its spread and the rows held back for a block
        (:func:`~kernattn._engine.moments.mixture` of the ``heads``' moments)."""
        kernel = self.kernel_
        per_head = [self._head_moments(X, h, return_std, exact) for h in heads]
        bias = kernel.head_bias / self._value_scale
        return mixture(per_head, kernel.head_weights[heads], bias, return_std)

    def _predict_centered(self, X, return_std, heads=None, exact=None):
        """Estimates and variances of validated queries in the engine's units (centered
        targets divided by ``_value_scale``), over query blocks (on threads for large
        problems); ``exact`` as for :meth:`_head_moments`."""
        heads = np.arange(self.kernel_.n_heads) if heads is None else heads
        t = len(self._y_offset)
        mean = np.empty((len(X), t), dtype=self._dtype)
        variance = np.empty((len(X), t), dtype=self._dtype) if return_std else None
        order = self._query_order(X)

        def predict_rows(rows):
            if order is not None:
                rows = order[rows]
            block_mean, block_var, fallback = self._mixture(X[rows], return_std, heads, exact)
            mean[rows] = block_mean
            if return_std:
                variance[rows] = block_var
            return int(fallback.sum())

        width, tile = self._block_width()
        n_fallback = map_query_blocks(
            predict_rows,
            len(X),
            width,
            n_jobs=self.n_jobs,
            key_tile=tile,
            itemsize=np.dtype(self._dtype).itemsize,
        )
        self._report_fallback(sum(n_fallback), len(X))
        return mean, variance

    def _query_order(self, X):
        """An order of the queries ``X`` that puts together those whose local polynomial
        takes its monomials about the same point
        (:func:`~kernattn._local.polynomial.anchor_order`), so that a block of queries meets
        few of them; ``None`` where the order does not matter."""
        for h, local in enumerate(getattr(self.kernel_, "local", ())):
            if isinstance(local, LocalPolynomials) and local.degree >= 1:
                return anchor_order(local.queries(self.kernel_, X, h), local.degree)
        return None

    def _report_fallback(self, n_fallback, n_queries):
        """Say that ``n_fallback`` of ``n_queries`` were held back by their local
        polynomials (a :class:`~kernattn.LocalDesignWarning`; an approximate kernel says
        instead which rows it computed exactly)."""
        if n_fallback:
            warnings.warn(
                held_back_message(n_fallback, n_queries, self._local_degree()),
                LocalDesignWarning,
                stacklevel=4,
            )

    def _local_degree(self):
        """The highest degree of the heads' local polynomials (0 without any)."""
        local = getattr(self.kernel_, "local", ())
        return max(
            (f.degree for f in local if isinstance(f, LocalPolynomials | BlendedLine)), default=0
        )

    def _held_back_share(self, kernel, inputs):
        """``held_back_``: :func:`~kernattn._engine.moments.held_back_share` of ``kernel``
        on ``inputs``, the positive-weight rows as the kernel compares them."""
        return held_back_share(kernel, inputs, self._values.shape[1])

    def _finish_prediction(self, mean, variance):
        """Back to target units and shape; the standard deviation from the variance."""
        value_scale = self._value_scale.astype(mean.dtype)
        mean *= value_scale
        mean += self._y_offset.astype(mean.dtype)
        shape = (len(mean),) + self._target_shape
        if variance is None:
            return mean.reshape(shape)
        # The square root before the scale: the variance of targets near 1e200 overflows.
        return mean.reshape(shape), (np.sqrt(variance) * value_scale).reshape(shape)

    @in_caller_library
    def predict(self, X, return_std=False):
        """Nadaraya–Watson estimate at each query.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries. A dask array or dataframe gives a dask array, computed lazily
            per block of rows on the workers (needs the ``dask`` extra).
        return_std : bool, default=False
            Also return the weighted spread of the training targets around the estimate,
            ``sqrt(Σ_i w_i(x) (y_i − ŷ(x))²)``: how much the neighbors the query attends to
            disagree (not a confidence interval of the estimate).

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) or (n_queries, n_outputs)
            In the precision of the training inputs (float32 stays float32); a dask array
            for a dask ``X``.
        y_std : ndarray of the same shape
            Only when ``return_std=True``.
        """
        backend = out_of_core_predict(X, getattr(self, "X_fit_", None))
        if backend is not None:
            # Queries from an out-of-core source, or a model whose training set is one:
            # computed where the data are.
            return backend(self, X, return_std=return_std)
        X = self._validate_queries(X)
        return self._finish_prediction(*self._predict_centered(X, return_std))

    def _map_heads(self, X, heads, compute, width=None):
        """``compute(X_block, h)`` for every block and head, on threads; a list per head of
        row blocks, concatenated."""
        results = []

        def run(rows):
            return [compute(X[rows], h) for h in heads]

        width = 2 * len(self._values) if width is None else width
        blocks = map_query_blocks(run, len(X), width, n_jobs=self.n_jobs, cache=False)
        for i in range(len(heads)):
            results.append(np.concatenate([block[i] for block in blocks]) if blocks else None)
        return results

    @in_caller_library
    def attention_weights(self, X, head=None):
        """The weight every query gives every training row, per head or mixed.

        Row ``i`` is the distribution :math:`w(x_i)` the estimate averages the training
        targets with: ``predict(X) == attention_weights(X) @ y_fit_`` for one head (and for
        any number of heads under the default convex mixture). Rows with zero sample
        weight get weight 0.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        head : int, optional
            That head's weights (rows sum to 1). ``None``: the mixed weights
            ``Σ_h a_h w^h`` over the heads.

        Returns
        -------
        weights : ndarray of shape (n_queries, n_train)
            In the precision of the training inputs (float32 stays float32).
        """
        X = self._validate_queries(X)
        if head is None:
            heads = np.arange(self.kernel_.n_heads)
        else:
            if not isinstance(head, Integral) or isinstance(head, bool):
                raise ValueError(f"head must be None or one head index (an int); got {head!r}")
            heads = self._check_heads([head])
        # In the precision of the training inputs, as predict (float32 stays float32).
        weights = np.zeros((len(X), len(self.X_fit_)), dtype=self._dtype)
        a = self.kernel_.head_weights

        def weigh_rows(rows):
            block = None
            for h in heads:
                w = self._head_weights(X[rows], h)
                if head is None and a[h] != 1.0:
                    w = w * a[h]
                block = w if block is None else block + w
            weights[rows, self._active] = block

        map_query_blocks(weigh_rows, len(X), 2 * len(self._values), n_jobs=self.n_jobs)
        return weights

    @in_caller_library
    def attention_entropy(self, X):
        """Entropy (nats) of every head's weights at each query, ``H = −Σ_i w_i log w_i``.

        0 for a query that attends to one training row, ``log n`` for uniform weights.
        Signed weights (local-linear, Nyström) are taken in absolute value, normalized.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries; a torch or cupy array gives the entropies back in its library and
            on its device.

        Returns
        -------
        entropy : ndarray of shape (n_queries, n_heads)
            In the precision of the training inputs (float32 stays float32).
        """
        X = self._validate_queries(X)
        heads = np.arange(self.kernel_.n_heads)

        def entropy(X_block, h):
            w = np.abs(self._head_weights(X_block, h))
            w /= w.sum(axis=1, keepdims=True)
            return np.maximum(entr(w).sum(axis=1), 0.0)

        columns = self._map_heads(X, heads, entropy)
        if not len(X):
            return np.zeros((0, len(heads)), dtype=self._dtype)
        return np.stack(columns, axis=1).astype(self._dtype, copy=False)

    @in_caller_library
    def effective_neighbors(self, X):
        """Effective number of training rows each head averages at each query, ``exp(H)``
        of :meth:`attention_entropy`, of the same shape: between 1 (one row gets all the
        weight) and the number of training rows."""
        return np.exp(self.attention_entropy(X))


def prediction_layout(model):
    """The shape of one query's prediction (``()`` for one output) and its dtype, for a
    backend that assembles a fitted model's predictions block by block."""
    return model._target_shape, model._dtype
