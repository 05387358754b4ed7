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
  the rows that underflow recomputed from :meth:`SoftmaxHeads.far_logits`), on threads;
- the mixture of the heads, ``predict(X, return_std=True)``, ``attention_weights(X, head=)``,
  ``attention_entropy`` and ``effective_neighbors``;
- the conditional distribution from the same weights (:mod:`kernattn._engine.distribution`):
  ``predict_cdf``, ``predict_quantiles`` (the kernel sums over the keys in target order) and
  ``conformal_interval`` (the leave-one-out residuals of the kernel average, with the
  reduction's left-out pairs).

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

from kernattn._core.blocks import KEY_TILE, iter_query_blocks, map_query_blocks, query_block_size
from kernattn._core.loo import DuplicateGroups
from kernattn._core.namespaces import from_caller, in_caller_library
from kernattn._core.numerics import (
    normalized_weights,
    power_of_two_scale,
    weighted_mean,
)
from kernattn._core.rows import Rows, collection_predict, collection_rows
from kernattn._core.warning_types import LocalDesignWarning
from kernattn._engine.distribution import (
    DenseWeights,
    TargetTiles,
    cdf_at_counts,
    check_alpha,
    check_conformal_method,
    check_quantiles,
    check_thresholds,
    check_y_bandwidth,
    jackknife_plus,
    kernel_cdf_columns,
    local_residual_quantiles,
    quantile_ranks,
    threshold_ranks,
    y_bandwidth_candidates,
)
from kernattn._local.fits import BlendedLine, LocalPolynomials, TiltedWeights
from kernattn._local.polynomial import held_back_message

# A spread below this fraction of the second moment lost digits to cancellation (a relative
# error of about 1e-16 / this) and is recomputed around the row's estimate.
WELL_CONDITIONED = 1e-4
#: The training rows (at most) whose leave-one-out CDF chooses ``y_bandwidth="cv"``.
Y_BANDWIDTH_ROWS = 400
#: The training rows whose leave-one-out local polynomial ``held_back_`` is measured on, at
#: most (evenly spread over the rows in the order of their inputs).
HELD_BACK_ROWS = 512


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


def _with_total(weights, keys):
    """Columns of the reduction that return a tile's weights themselves and their sum."""
    return np.concatenate([weights, weights.sum(axis=1, keepdims=True)], axis=1)


class Deferred:
    """A value of a fit computed on first use and kept: the leave-one-out residuals of
    conformal intervals, a bandwidth in y chosen by cross-validation (a fit that never asks
    for them does not pay their pass of the training set against itself). The estimator
    holds the same object before and after."""

    def __init__(self):
        self._value = None

    def get(self, compute):
        if self._value is None:
            self._value = compute()
        return self._value


class NadarayaWatsonRegressor(RegressorMixin, BaseEstimator):
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
        tags.target_tags.single_output = True
        return tags

    # ------------------------------------------------------------------ fitting

    @_fit_context(prefer_skip_nested_validation=True)
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
        rows = X if isinstance(X, Rows) else collection_rows(X, y, sample_weight)
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
        partitions of a dask collection): here brought into memory and fitted there; an
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
        # Divided by a power of two near the largest weight: the sums of weights of 1e308
        # each stay finite, and the ratios of sums do not change by a bit.
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
        row is exact). In the engine's units: centered values divided by ``_value_scale``.

        ``exact``: what gives the exact kernel's moments of a row, an object with
        ``moments(X, h, columns)`` and ``centered(X, h, values)``
        (:meth:`SoftmaxHeads.moments`, :meth:`SoftmaxHeads.centered`); default the fitted
        kernel (a prediction in stages passes the states of rows computed elsewhere).

        A head with a local fit (``kernel_.local[h]``) gives that fit's estimate instead:
        local polynomials (:meth:`_polynomial_moments`, the mask then holds the queries held
        back), tilted weights (:meth:`_tilted_moments`) or a blend of the local constant and
        a line (:meth:`_blended_moments`)."""
        local = self._local_fit(h)
        if isinstance(local, LocalPolynomials):
            return self._polynomial_moments(X, h, return_std, local, exact)
        if isinstance(local, TiltedWeights):
            return self._tilted_moments(X, h, return_std)
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
        t = self._values.shape[1]
        denominator = sums[:, -1:]
        first = sums[:, :t] / denominator
        if not return_std:
            return first, None, None
        second = sums[:, t : 2 * t] / denominator
        spread = self._accurate_spread(X, h, first, second - first**2, second, exact)
        return first, spread, None

    def _polynomial_moments(self, X, h, return_std, local, exact=None):
        """:meth:`_head_moments` for a head with local polynomials
        (:class:`~kernattn._local.fits.LocalPolynomials`): the weighted least-squares
        polynomial at each query, held back toward the kernel average where its local
        design cannot support it (see :mod:`kernattn._local.polynomial`).

        One pass over the keys (in tiles, as for the kernel average) gives every sum the
        polynomial needs, those of the squared weights included. The returned mask holds
        the queries held back; the spread is that of the values under the non-negative
        kernel weights around the estimate.
        """
        fit = self._polynomial_fit(X, h, local)
        if not return_std:
            return fit.mean, None, fit.held_back
        return fit.mean, self._spread_about(X, h, fit, fit.mean, exact), fit.held_back

    def _polynomial_fit(self, X, h, local, kernel=None):
        """Head ``h``'s local polynomial ``local`` at a block of queries, on ``kernel``
        (default ``kernel_``): its :class:`~kernattn._local.polynomial.LocalPolynomialFit`."""
        kernel = self.kernel_ if kernel is None else kernel
        Q = local.queries(kernel, X, h)
        return local.estimate(local.sums(kernel, X, h), Q, self._values.shape[1])

    def _spread_about(self, X, h, fit, center, exact=None):
        """``E_w[(v − center)²]`` under head ``h``'s kernel weights from a local fit's
        kernel averages: ``Var_w(v) + (v̄ − center)²``, redone from the deviations where the
        difference cancels (``exact``: the kernel, as in :meth:`_accurate_spread`)."""
        ybar, second = fit.ybar, fit.second_values
        spread = second - ybar**2 + (ybar - center) ** 2
        return np.maximum(self._accurate_spread(X, h, center, spread, second, exact), 0.0)

    def _blended_moments(self, X, h, return_std, local):
        r""":meth:`_head_moments` for a head that blends its local constant and a line
        (:class:`~kernattn._local.fits.BlendedLine`): :math:`\hat y = (1 - s)\,\hat y_0 + s\,
        \hat y_1`, the constant on the head, the line on the blend's own kernel (the line's
        width); the spread is that of the values around :math:`\hat y` under the mixture
        :math:`(1 - s)\,w_0 + s\,w_1` of the two non-negative weights (the constant's,
        tilted or not, and the line's kernel weights). The mask holds the queries whose line
        is held back."""
        s = local.share
        if local.constant is None:
            first, spread, _ = self._kernel_moments(X, h, return_std)
        else:
            weights = local.constant_weights(self.kernel_.weights(X, h), self.kernel_, X, h)
            first, spread, _ = self._weighted_moments(weights, return_std)
        line = self._polynomial_fit(X, 0, local.line, local.kernel)
        mean = (1.0 - s) * first + s * line.mean
        if not return_std:
            return mean, None, line.held_back
        spread = (1.0 - s) * (spread + (first - mean) ** 2) + s * self._spread_about(
            X, 0, line, mean, local.kernel
        )
        return mean, spread, line.held_back

    def _accurate_spread(self, X, h, first, spread, second, exact=None):
        """The spread ``E_w[v²] − E_w[v]²``, redone around each row's own estimate where
        the difference cancels.

        The values are centered on the global mean; where a query's weights sit on values far
        from it (compared with their spread), ``E_w[v²]`` and ``E_w[v]²`` agree in most of
        their digits. Those rows (rare: they need a spread below ``1e-4 E_w[v²]``) are redone
        from the exact kernel's moments about their own mean (``exact.centered``, the one
        reduction with Chan's update: no cancellation),
        ``Σ_i w_i (v_i − ŷ)² = M₂/W + (m − ŷ)²`` around the row's estimate ``ŷ``, with
        ``exact`` the kernel (default ``kernel_``; an approximate estimator passes the exact
        kernel it approximates, or the states of its rows computed elsewhere).
        """
        exact = self.kernel_ if exact is None else exact
        with np.errstate(invalid="ignore"):
            cancelled = ~(spread > WELL_CONDITIONED * second)
        redo = np.flatnonzero(np.any(cancelled, axis=1))
        if not len(redo):
            return spread
        spread = spread.astype(np.float64)
        total, mean, m2 = exact.centered(X[redo], h, self._centered_values())
        redone = m2 / total[:, None] + (mean - first[redo]) ** 2
        # Only the outputs that cancelled: the others keep their moments' spread.
        rows, outputs = np.nonzero(cancelled[redo])
        spread[redo[rows], outputs] = redone[rows, outputs]
        return spread

    def _centered_values(self):
        """The centered values in the engine's units (divided by ``_value_scale``), one row
        per kept key, float64: what the exact kernel's moments are taken of (none when no
        keys are kept)."""
        t = len(self._y_offset)
        columns = getattr(self, "_value_columns", None)
        if columns is None:
            return np.zeros((0, t))
        return columns[:, :t].astype(np.float64)

    def _tilted_moments(self, X, h, return_std):
        """The estimate of head ``h``'s tilted weights and the spread of the values under
        them (a pass per Newton step over the block's weights)."""
        return self._weighted_moments(self._head_weights(X, h), return_std)

    def _weighted_moments(self, weights, return_std):
        """The estimate of a block's weights against the kept keys (rows summing to 1) and,
        with ``return_std``, the spread of the values around it under them."""
        values = self._centered_values()
        first = weights @ values
        if not return_std:
            return first, None, None
        spread = np.stack(
            [
                np.einsum("ij,ij->i", weights, (values[:, o][None, :] - first[:, o][:, None]) ** 2)
                for o in range(values.shape[1])
            ],
            axis=1,
        )
        return first, spread, None

    def _head_weights(self, X, h):
        """Head ``h``'s weights of a block of queries against the positive-weight rows (a
        local fit's equivalent weights, if the head has one)."""
        local = self._local_fit(h)
        if local is None:
            return self.kernel_.weights(X, h)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # A far query's kernel weights come from its far-field logits.
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
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return np.asarray(X, dtype=np.float64)

    def _check_heads(self, heads):
        """Head indices: all for ``None``; distinct integers in range otherwise."""
        H = self.kernel_.n_heads
        if heads is None:
            return np.arange(H)
        keep = np.atleast_1d(np.asarray(heads))
        if (
            keep.ndim != 1
            or len(keep) == 0
            or not np.issubdtype(keep.dtype, np.integer)
            or np.any((keep < 0) | (keep >= H))
            or len(np.unique(keep)) != len(keep)
        ):
            raise ValueError(
                f"heads must be distinct integers in [0, {H - 1}] (the model has {H} "
                f"head(s)); got {heads!r}"
            )
        return keep

    def _mixture(self, X, return_std, heads, exact=None):
        r"""Mixed estimate (centered units) and its spread for a block.

        The estimate is :math:`\sum_h a_h m^h_1 + b`. The spread is that of the mixture of
        the heads' weights with proportions :math:`\pi_h = |a_h| / \sum_g |a_g|` around the
        estimate, :math:`\sum_h \pi_h (\mathrm{Var}_h + (m^h_1 - \hat y)^2)`: never negative,
        and the weighted variance of the targets for one head.
        """
        kernel = self.kernel_
        a = kernel.head_weights
        per_head = [self._head_moments(X, h, return_std, exact) for h in heads]
        fallback = np.zeros(len(X), dtype=bool)
        for _, _, rows in per_head:
            if rows is not None:
                fallback |= rows
        if len(heads) == 1 and a[heads[0]] == 1.0 and not np.any(kernel.head_bias):
            mean = per_head[0][0]
        else:
            mean = np.zeros_like(per_head[0][0]) + kernel.head_bias / self._value_scale
            for h, (first, _, _) in zip(heads, per_head, strict=True):
                mean += a[h] * first
        if not return_std:
            return mean, None, fallback
        proportions = np.abs(a[heads])
        total = proportions.sum()
        proportions = proportions / total if total > 0 else np.full(len(heads), 1 / len(heads))
        variance = np.zeros_like(mean)
        for p, (first, spread, _) in zip(proportions, per_head, strict=True):
            variance += p * (spread + (first - mean) ** 2)
        return mean, np.maximum(variance, 0.0), fallback

    def _predict_centered(self, X, return_std, heads=None, exact=None):
        """Estimates and variances of validated queries in the engine's units (centered
        targets divided by ``_value_scale``), over query blocks (on threads for large
        problems); ``exact`` as for :meth:`_head_moments`."""
        heads = np.arange(self.kernel_.n_heads) if heads is None else heads
        t = len(self._y_offset)
        mean = np.empty((len(X), t), dtype=self._dtype)
        variance = np.empty((len(X), t), dtype=self._dtype) if return_std else None

        def predict_rows(rows):
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
        """The share of the training rows whose leave-one-out local polynomial is held back
        in some head of ``kernel`` (``held_back_``), measured on at most ``HELD_BACK_ROWS``
        of them, evenly spread over the rows in the order of their inputs (deterministic);
        ``inputs`` are the positive-weight rows as the kernel compares them (its keys, in
        their order).
        Each row is fitted from the others, its exact duplicates left out with it, as the
        bandwidth criteria do; a row with no other input is not counted."""
        # Each line with the kernel it is fitted on and its head there (a blend's line is
        # head 0 of its own kernel).
        lines = []
        for h, local in enumerate(kernel.local):
            if isinstance(local, LocalPolynomials):
                lines.append((kernel, h, local))
            elif isinstance(local, BlendedLine):
                lines.append((local.kernel, 0, local.line))
        n = len(inputs)
        if not lines or n < 2:
            return 0.0
        rows = np.unique(np.linspace(0, n - 1, min(n, HELD_BACK_ROWS)).round().astype(int))
        ids = DuplicateGroups(inputs).ids
        order = np.argsort(ids, kind="stable")
        starts = np.searchsorted(ids[order], np.arange(ids.max() + 2))
        t = self._values.shape[1]
        held_back = np.zeros(len(rows), dtype=bool)
        counted = np.ones(len(rows), dtype=bool)
        for block in iter_query_blocks(len(rows), min(n, KEY_TILE)):
            queries = rows[block]
            members = [order[starts[ids[q]] : starts[ids[q] + 1]] for q in queries]
            left_out = (
                np.repeat(np.arange(len(queries)), [len(m) for m in members]),
                np.concatenate(members),
            )
            for line_kernel, h, local in lines:
                sums = local.sums(line_kernel, inputs[queries], h, left_out=left_out)
                alone = ~(sums[:, local.total] > 0)
                fit = local.estimate(sums, local.queries(line_kernel, inputs[queries], h), t)
                held_back[block] |= fit.held_back & ~alone
                counted[block] &= ~alone
        return float(held_back[counted].mean()) if np.any(counted) else 0.0

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
        backend = collection_predict(X, getattr(self, "X_fit_", None))
        if backend is not None:
            # A partitioned collection of queries, or a model whose training set is one:
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

        Returns
        -------
        entropy : ndarray of shape (n_queries, n_heads)
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
        """Effective number of training rows each head averages at each query, ``exp(H)``.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)

        Returns
        -------
        n_eff : ndarray of shape (n_queries, n_heads)
            Between 1 (one row gets all the weight) and the number of training rows.
        """
        return np.exp(self.attention_entropy(X))

    # ------------------------------------------------- the conditional distribution

    def _check_targets_kept(self):
        """The distribution's methods read the kept training targets (and weights against
        them): a fit that keeps none (``partial_fit``) cannot serve them."""
        check_is_fitted(self)
        if "_target_order" not in self.__dict__ or "X_fit_" not in self.__dict__:
            raise RuntimeError(
                "the conditional distribution needs the training targets and the weights "
                "against them, and this fit keeps only sums (partial_fit, or a fit in "
                "chunks); fit on the whole training set to use predict_cdf, "
                "predict_quantiles and conformal_interval"
            )

    def _training_inputs(self):
        """The positive-weight training inputs as the kernel sees them (an estimator that
        encodes its inputs overrides this)."""
        return self.X_fit_[self._active]

    def _exact_kernel(self):
        """The kernel whose reduction serves the distribution: its ``sums`` take an order
        of keys (the CDF and quantiles) and left-out pairs (the leave-one-out residuals).
        ``None`` where the weights are approximate: they are then held in memory, and a
        row's own weight is removed from its weights."""
        return self.kernel_

    def _head_proportions(self):
        r"""The heads' shares :math:`\pi_h = |a_h| / \sum_g |a_g|` of the mixture whose
        weights are the distribution (as for ``return_std``)."""
        a = np.abs(self.kernel_.head_weights)
        total = a.sum()
        return a / total if total > 0 else np.full(len(a), 1.0 / len(a))

    def _distribution_weights(self, X):
        """The weights of a block of queries that the conditional distribution is taken
        under: the heads' weights (a local fit's equivalent weights where a head has one)
        mixed with the shares :meth:`_head_proportions`; rows sum to 1."""
        proportions = self._head_proportions()
        weights = None
        for h, p in enumerate(proportions):
            if p == 0:
                continue
            w = np.asarray(self._head_weights(X, h), dtype=np.float64)
            weights = p * w if weights is None else weights + p * w
        return weights

    def _kernel_weights(self, X, h):
        """Head ``h``'s kernel weights (the local constant's, whatever the head's local
        fit) of a block of queries: what the leave-one-out estimates of conformal intervals
        are formed from."""
        if self._local_fit(h) is None:
            return np.asarray(self._head_weights(X, h), dtype=np.float64)
        return self.kernel_.weights(X, h)

    def _report_rearranged(self, n_rearranged, n_queries):
        if n_rearranged:
            warnings.warn(
                f"{n_rearranged} of {n_queries} queries have signed weights whose conditional "
                "CDF decreases or leaves [0, 1]; it was replaced by its monotone "
                "rearrangement (Chernozhukov, Fernández-Val and Galichon 2010) and clipped "
                "to [0, 1]",
                UserWarning,
                stacklevel=4,
            )

    def _target_tiles(self):
        """The kept rows in target order, cut into the reduction's key tiles, per output."""
        return [TargetTiles(order) for order in self._target_order.T]

    def _tile_weights(self, X, tiles):
        r"""For each output, a block's weight on every tile of sorted targets (masses, (b,
        n_tiles)), ``fractions(rows, j)`` (the weights of those rows on the keys of tile
        ``j``) and the rows whose weights were rearranged.

        Kernel averages of an exact kernel come from the one reduction over the keys in
        target order (one pass for the masses, one tile for each fraction); weights of a
        local fit or of an approximate kernel from the block's weights in memory
        (:class:`~kernattn._engine.distribution.DenseWeights`, which rearranges signed rows).
        """
        kernel = self._exact_kernel()
        proportions = self._head_proportions()
        heads = np.flatnonzero(proportions > 0)
        if not self._distribution_by_reduction():
            weights = self._distribution_weights(X)
            for tile in tiles:
                dense = DenseWeights(weights, tile)
                yield dense.masses, dense.fractions, dense.rearranged
            return
        for tile in tiles:
            n_tiles = tile.n_tiles

            def tile_masses(weights, keys, n_tiles=n_tiles, size=tile.tile):
                # One key tile of the reduction is one tile of ranks: its weight goes to
                # its own column (and to the total, last).
                part = np.zeros((len(weights), n_tiles + 1))
                part[:, keys.start // size] = part[:, n_tiles] = weights.sum(axis=1)
                return part

            shares = []
            for h in heads:
                sums = kernel.sums(X, h, tile_masses, keys=tile.order).astype(np.float64)
                shares.append(proportions[h] * sums[:, :n_tiles] / sums[:, n_tiles:])
            masses = np.sum(shares, axis=0)

            def fractions(rows, j, tile=tile, shares=shares):
                mixed = 0.0
                for h, share in zip(heads, shares, strict=True):
                    sums = kernel.sums(X[rows], h, _with_total, keys=tile.keys(j))
                    inside = sums[:, :-1] / np.where(sums[:, -1:] > 0, sums[:, -1:], 1.0)
                    mixed = mixed + share[rows, j][:, None] * inside
                return mixed

            yield masses, fractions, np.zeros(len(X), dtype=bool)

    def _distribution_by_reduction(self):
        """Whether the distribution's weights are kernel averages of an exact kernel (the
        reduction serves them) rather than weights held in memory."""
        heads = np.flatnonzero(self._head_proportions() > 0)
        return self._exact_kernel() is not None and all(self._local_fit(h) is None for h in heads)

    def _map_distribution(self, X, compute):
        """``compute(rows, sources)`` for every query block, ``sources`` its
        :meth:`_tile_weights` per output; the number of rows rearranged, summed."""
        tiles = self._target_tiles()

        def run(rows):
            rearranged = np.zeros(rows.stop - rows.start, dtype=bool)
            for o, (masses, fractions, bad) in enumerate(self._tile_weights(X[rows], tiles)):
                compute(rows, o, masses, fractions, tiles[o].tile)
                rearranged |= bad
            return int(rearranged.sum())

        if self._distribution_by_reduction():
            sizes = {"key_tile": KEY_TILE}
        else:
            # The weights, their copy in target order and the rearranged rows' work.
            sizes = {"n_arrays": 4, "cache": False}
        counts = map_query_blocks(run, len(X), len(self._values), n_jobs=self.n_jobs, **sizes)
        return sum(counts)

    def _per_output(self, result):
        """Drop the leading output axis for a 1-D target."""
        return result[0] if self._target_shape == () else result

    @in_caller_library
    def predict_cdf(self, X, thresholds, *, y_bandwidth=None):
        r"""The conditional CDF :math:`\hat F(t \mid x) = \sum_i w_i(x)\, 1\{y_i \le t\}`.

        The Nadaraya–Watson estimate of the indicator targets :math:`1\{y_i \le t\}` with the
        weights of :meth:`attention_weights` (Hall, Wolff and Yao 1999 [1]_). With the targets
        sorted once at fit and cut into tiles of consecutive ranks, one pass of the kernel
        sums over the keys in that order gives each query's weight on every tile, and a
        threshold then needs the weights of its own tile only: about the cost of one
        ``predict``, whatever the number of thresholds. Non-decreasing in :math:`t`, in
        :math:`[0, 1]`. Where the weights can be negative (local lines, signed feature
        maps) a query whose sums decrease or leave :math:`[0, 1]` gets their monotone
        rearrangement (Chernozhukov, Fernández-Val and Galichon 2010 [2]_), clipped; a
        ``UserWarning`` says how many. With several heads, the mixture of their weights
        in the shares :math:`|a_h| / \sum_g |a_g|` (as ``return_std``).

        With ``y_bandwidth`` the CDF is smoothed in :math:`y` as well (R np's ``npcdist``;
        Li, Lin and Racine [3]_):
        :math:`\tilde F(t \mid x) = \sum_i w_i(x)\, \Phi((t - y_i)/h_y)`, one kernel sum
        of the columns :math:`\Phi((t_k - y_i)/h_y)` (its cost grows with the number of
        thresholds). ``"cv"`` chooses :math:`h_y` per output by leave-one-out: at most 400
        training rows, evenly spread, each with its own row and exact duplicates removed
        from its weights, minimize the integrated squared distance between their CDF and
        their own target's step, :math:`\int (\tilde F_{-i}(t \mid x_i) - 1\{y_i \le
        t\})^2 dt` (the CRPS, over 50 quantiles of the targets) among :math:`2^{-5}` to
        :math:`2^2` times Silverman's rule for the targets; the choice is kept for later
        calls on this fit.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        thresholds : array_like of shape (n_thresholds,) or (n_outputs, n_thresholds)
            Sorted increasingly, no NaN; one row per output, or one list for all.
        y_bandwidth : None, "cv", float or array_like of shape (n_outputs,), default=None
            ``None``: the step CDF of the training targets; otherwise the bandwidth of the
            Gaussian kernel CDF in :math:`y`, in the targets' units.

        Returns
        -------
        cdf : ndarray of shape (n_queries, n_thresholds)
            With a leading ``n_outputs`` axis for 2-D targets.

        References
        ----------
        .. [1] P. Hall, R. C. L. Wolff, Q. Yao, "Methods for estimating a conditional
           distribution function", J. Amer. Statist. Assoc. 94 (1999).
        .. [2] V. Chernozhukov, I. Fernández-Val, A. Galichon, "Quantile and probability
           curves without crossing", Econometrica 78 (2010).
        .. [3] Q. Li, J. Lin, J. S. Racine, "Optimal bandwidth selection for nonparametric
           conditional distribution and quantile functions", J. Bus. Econ. Statist. 31
           (2013).

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> X = np.linspace(0, 1, 200)[:, None]
        >>> y = X[:, 0] + 0.1 * np.random.default_rng(0).normal(size=200)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> model.predict_cdf([[0.5]], [0.3, 0.5, 0.7]).round(2)
        array([[0.01, 0.59, 0.98]])
        >>> model.predict_cdf([[0.5]], [0.3, 0.5, 0.7], y_bandwidth=0.05).round(2)
        array([[0.04, 0.51, 0.97]])
        """
        X = self._validate_queries(X)
        self._check_targets_kept()
        n_outputs = self._sorted_targets.shape[1]
        thresholds = check_thresholds(thresholds, n_outputs)
        y_bandwidth = check_y_bandwidth(y_bandwidth, n_outputs)
        if y_bandwidth is not None:
            if isinstance(y_bandwidth, str):
                y_bandwidth = self._cross_validated_y_bandwidth()
            return self._per_output(self._smoothed_cdf(X, thresholds, y_bandwidth))
        ranks = [
            threshold_ranks(self._sorted_targets[:, o], thresholds[o]) for o in range(n_outputs)
        ]
        out = np.zeros((n_outputs, len(X), thresholds.shape[1]))

        def compute(rows, o, masses, fractions, tile):
            out[o, rows] = cdf_at_counts(masses, ranks[o], fractions, tile)

        self._report_rearranged(self._map_distribution(X, compute), len(X))
        return self._per_output(out)

    def _weighted_columns(self, X, columns):
        """A block's weighted averages of ``columns`` (one row per kept key, a column of
        ones last) under :meth:`_distribution_weights`, and the rows whose weights are
        signed: through the kernel sums where the reduction serves the weights."""
        if self._distribution_by_reduction():
            kernel = self._exact_kernel()
            averages = 0.0
            for h, share in enumerate(self._head_proportions()):
                if share > 0:
                    sums = kernel.sums(X, h, columns).astype(np.float64)
                    averages = averages + share * sums[:, :-1] / sums[:, -1:]
            return averages, np.zeros(len(X), dtype=bool)
        weights = self._distribution_weights(X)
        return weights @ columns[:, :-1], np.any(weights < 0, axis=1)

    def _smoothed_cdf(self, X, thresholds, bandwidths):
        """The CDF smoothed in y (see :meth:`predict_cdf`), (n_outputs, n_queries,
        n_thresholds); signed rows rearranged (sorted along the thresholds) and clipped."""
        targets = self._values + self._y_offset
        n_outputs, T = thresholds.shape
        columns = np.concatenate(
            [
                kernel_cdf_columns(targets[:, o], thresholds[o], bandwidths[o])
                for o in range(n_outputs)
            ]
            + [np.ones((len(targets), 1))],
            axis=1,
        )
        out = np.zeros((n_outputs, len(X), T))

        def run(rows):
            block, signed = self._weighted_columns(X[rows], columns)
            block = block.reshape(len(block), n_outputs, T).transpose(1, 0, 2)
            rearranged = np.zeros(len(signed), dtype=bool)
            if np.any(signed):
                part = block[:, signed]
                bad = np.any(np.diff(part, axis=2) < 0, axis=(0, 2)) | np.any(
                    (part < 0) | (part > 1), axis=(0, 2)
                )
                rearranged[np.flatnonzero(signed)[bad]] = True
                block[:, signed] = np.clip(np.sort(part, axis=2), 0.0, 1.0)
            out[:, rows] = block
            return int(rearranged.sum())

        if self._distribution_by_reduction():
            sizes = {"key_tile": KEY_TILE}
        else:
            sizes = {"n_arrays": 3, "cache": False}
        counts = map_query_blocks(run, len(X), len(self._values), n_jobs=self.n_jobs, **sizes)
        self._report_rearranged(sum(counts), len(X))
        return out

    def _cross_validated_y_bandwidth(self):
        """Per output, the bandwidth in y of the smoothed CDF with the lowest leave-one-out
        CRPS (see :meth:`predict_cdf`), computed once per fit."""

        def compute():
            inputs = self._training_inputs()
            n = len(inputs)
            n_rows = min(Y_BANDWIDTH_ROWS, query_block_size(n, n, n_arrays=3, cache=False))
            rows = np.unique(np.linspace(0, n - 1, n_rows).round().astype(int))
            ids = DuplicateGroups(inputs).ids
            weights = self._distribution_weights(inputs[rows])
            weights[ids[rows][:, None] == ids[None, :]] = 0.0
            total = weights.sum(axis=1)
            # A row with no other input has no leave-one-out CDF.
            kept = total > 0
            weights = weights[kept] / total[kept, None]
            rows = rows[kept]
            targets = self._values + self._y_offset
            chosen = []
            for o in range(targets.shape[1]):
                y = targets[:, o]
                grid = np.unique(np.quantile(y, np.linspace(0.01, 0.99, 50)))
                spacing = np.gradient(grid) if len(grid) > 1 else np.ones(1)
                observed = y[rows][:, None] <= grid[None, :]
                criteria = [
                    np.mean(((weights @ kernel_cdf_columns(y, grid, h) - observed) ** 2) @ spacing)
                    for h in y_bandwidth_candidates(y)
                ]
                chosen.append(y_bandwidth_candidates(y)[int(np.argmin(criteria))])
            return np.array(chosen)

        return self.__dict__["_y_bandwidth_built"].get(compute)

    @in_caller_library
    def predict_quantiles(self, X, quantiles=(0.1, 0.5, 0.9)):
        r"""Conditional quantiles :math:`\hat Q(\tau \mid x) = \inf\{t : \hat F(t \mid x)
        \ge \tau\}` of :meth:`predict_cdf`.

        Exact weighted quantiles of the training targets under each query's weights (Hall,
        Wolff and Yao 1999; R np's ``npqreg``): the smallest target whose cumulative
        weight, over the targets sorted once at fit, reaches :math:`\tau` (for
        :math:`\tau = 0` the smallest target of positive weight). Non-crossing by
        construction: every level reads the same non-decreasing :math:`\hat F`. Every query
        of a block is served at once (no loop over queries): one pass of the kernel sums
        over the keys in target order gives each query's weight on every tile of sorted
        targets, and the tile where a level is reached is then read key by key (about
        twice the cost of one ``predict`` for 9 levels). Signed weights (local lines,
        signed feature maps) are rearranged first, as in :meth:`predict_cdf`.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        quantiles : float or array_like of floats in [0, 1], default=(0.1, 0.5, 0.9)

        Returns
        -------
        quantiles : ndarray of shape (n_queries, n_quantiles)
            Non-decreasing along the levels when they are sorted; with a leading
            ``n_outputs`` axis for 2-D targets.

        See Also
        --------
        conformal_interval : prediction intervals with a coverage guarantee.

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> X = np.linspace(0, 1, 200)[:, None]
        >>> y = X[:, 0] + 0.1 * np.random.default_rng(0).normal(size=200)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> model.predict_quantiles([[0.5]], [0.1, 0.5, 0.9]).round(2)
        array([[0.36, 0.5 , 0.61]])
        """
        X = self._validate_queries(X)
        self._check_targets_kept()
        levels = check_quantiles(quantiles)
        n_outputs = self._sorted_targets.shape[1]
        out = np.zeros((n_outputs, len(X), len(levels)))

        def compute(rows, o, masses, fractions, tile):
            ranks = quantile_ranks(masses, levels, fractions, tile)
            out[o, rows] = self._sorted_targets[ranks, o]

        self._report_rearranged(self._map_distribution(X, compute), len(X))
        return self._per_output(out.astype(self._dtype, copy=False))

    def _leave_one_out_residuals(self):
        r"""Per kept row, :math:`y_i - \hat\mu_{-i}(x_i)` (target units, (n, n_outputs)):
        the kernel average without the row and its exact duplicates, through the reduction
        with those pairs left out (or, for approximate weights, with their weight removed
        from the row's weights); :math:`\pm\infty` for a row with no other input."""
        inputs = self._training_inputs()
        groups = DuplicateGroups(inputs)
        ids = groups.ids
        order = np.argsort(ids, kind="stable")
        starts = np.searchsorted(ids[order], np.arange(groups.n_groups + 1))
        exact = self._exact_kernel()
        a, b = self.kernel_.head_weights, self.kernel_.head_bias
        n, t = self._values.shape
        estimate = np.zeros((n, t)) + b
        alone = np.zeros(n, dtype=bool)
        for block in iter_query_blocks(n, n if exact is None else min(n, KEY_TILE), n_arrays=3):
            queries = np.arange(n)[block]
            members = [order[starts[ids[q]] : starts[ids[q] + 1]] for q in queries]
            left_out = (
                np.repeat(np.arange(len(queries)), [len(m) for m in members]),
                np.concatenate(members),
            )
            for h in range(self.kernel_.n_heads):
                if exact is not None:
                    sums = exact.sums(
                        inputs[block], h, self._value_columns, left_out=left_out
                    ).astype(np.float64)
                    total = sums[:, -1]
                    with np.errstate(invalid="ignore", divide="ignore"):
                        mean = sums[:, :t] / total[:, None] * self._value_scale
                else:
                    weights = self._kernel_weights(inputs[block], h)
                    own = np.zeros(len(queries))
                    np.add.at(own, left_out[0], weights[left_out])
                    own_values = np.zeros((len(queries), t))
                    np.add.at(
                        own_values,
                        left_out[0],
                        weights[left_out][:, None] * self._values[left_out[1]],
                    )
                    total = 1.0 - own
                    with np.errstate(invalid="ignore", divide="ignore"):
                        mean = (weights @ self._values - own_values) / total[:, None]
                alone[block] |= ~(total > 0)
                estimate[block] += a[h] * mean
        residuals = self._values - estimate
        residuals[alone] = np.inf
        return residuals

    def _residuals(self):
        """The absolute leave-one-out residuals, their order per output and the group ids
        of the kept rows (what a conformal interval needs), computed once per fit."""

        def compute():
            residuals = np.abs(self._leave_one_out_residuals())
            order = np.argsort(residuals, axis=0, kind="stable")
            ids = DuplicateGroups(self._training_inputs()).ids
            return residuals, order, np.take_along_axis(residuals, order, axis=0), ids

        return self.__dict__["_residuals_built"].get(compute)

    def _leave_one_out_at(self, X, ids):
        r""":math:`\hat\mu_{-i}(x)` at a block of queries for every kept row :math:`i`
        (centered target units, shape (n_outputs, b, n)), from the heads' kernel weights:
        :math:`(\hat\mu(x) - \sum_{j \in G_i} w_j y_j) / (1 - \sum_{j \in G_i} w_j)`
        with :math:`G_i` the row's group of exact duplicates; :math:`+\infty` where the
        group holds (nearly) all of the weight, which leaves nothing to estimate from."""
        from scipy import sparse

        n, t = self._values.shape
        n_groups = int(ids.max()) + 1
        # Each row's group: its own column of a sparse indicator (none without duplicates).
        members = None
        if n_groups < n:
            members = sparse.csr_matrix((np.ones(n), (np.arange(n), ids)), shape=(n, n_groups))
        a, b = self.kernel_.head_weights, self.kernel_.head_bias
        result = np.zeros((t, len(X), n)) + b[:, None, None]
        unknown = np.zeros((len(X), n), dtype=bool)
        for h in range(self.kernel_.n_heads):
            weights = self._kernel_weights(X, h)
            own = weights if members is None else np.asarray(weights @ members)[:, ids]
            rest = 1.0 - own
            # Rounding leaves 1 − w with few digits where the group holds nearly all the
            # weight: those estimates are unknown (the interval is then unbounded).
            unknown |= ~(rest > 1e-9)
            for o in range(t):
                mean = weights @ self._values[:, o]
                own_values = weights * self._values[:, o]
                if members is not None:
                    own_values = np.asarray(own_values @ members)[:, ids]
                with np.errstate(invalid="ignore", divide="ignore"):
                    result[o] += a[h] * (mean[:, None] - own_values) / rest
        result[:, unknown] = np.inf
        return result

    def _kernel_estimate(self, X):
        """The kernel average's estimate (the local constant of every head, mixed; centered
        target units, (b, n_outputs)) and the block's mixed kernel weights."""
        a, b = self.kernel_.head_weights, self.kernel_.head_bias
        proportions = self._head_proportions()
        estimate = np.zeros((len(X), len(b))) + b
        mixed = None
        for h in range(self.kernel_.n_heads):
            weights = self._kernel_weights(X, h)
            estimate += a[h] * (weights @ self._values)
            mixed = proportions[h] * weights if mixed is None else mixed + proportions[h] * weights
        return estimate, mixed

    @in_caller_library
    def conformal_interval(self, X, alpha=0.1, method="jackknife+"):
        r"""Prediction intervals for a new observation :math:`y` at :math:`x`, from the
        leave-one-out residuals of the fitted kernel.

        Unlike ``predict_interval`` (a confidence interval for the smoothed *mean*, which
        narrows as the training set grows), these intervals are meant to contain the next
        *observation* with probability :math:`1 - \alpha`: they are at least as wide as the
        noise. No model is refitted: the leave-one-out estimate
        :math:`\hat\mu_{-i}` of a Nadaraya–Watson average is the same average with row
        :math:`i` (and its exact duplicates, as in the bandwidth search) left out of the
        kernel sums, :math:`R_i = |y_i - \hat\mu_{-i}(x_i)|`.

        - ``"jackknife+"`` (Barber, Candès, Ramdas and Tibshirani 2021 [1]_):
          :math:`[\hat q^-_\alpha\{\hat\mu_{-i}(x) - R_i\},\
          \hat q^+_\alpha\{\hat\mu_{-i}(x) + R_i\}]`, :math:`\hat q^+_\alpha` the
          :math:`\lceil(1-\alpha)(n+1)\rceil`-th smallest of the :math:`n` values,
          :math:`\hat q^-_\alpha` the :math:`\lfloor\alpha(n+1)\rfloor`-th smallest. Its
          marginal coverage is at least :math:`1 - 2\alpha` for any distribution of
          exchangeable data and the kernel held fixed (the bandwidth or projections,
          fitted on all rows, are not refitted), and close to :math:`1 - \alpha` in
          practice. The width is the same everywhere, up to the estimates' spread.
        - ``"local"``: :math:`\hat\mu(x) \pm \hat q(x)`, :math:`\hat q(x)` the
          :math:`(1-\alpha)(1 + 1/n_\mathrm{eff})` quantile of the :math:`R_i` weighted by
          the query's own kernel weights :math:`w_i(x)`
          (:math:`n_\mathrm{eff} = 1 / \sum_i w_i(x)^2`): it widens where the noise is
          larger. Its coverage holds approximately, conditionally on the neighbourhood of
          :math:`x` (localized conformal prediction, Guan 2023 [2]_), with no finite-sample
          guarantee.

        Both use the kernel average (the local constant of each head, mixed as in
        ``predict``): a head's local line or tilt, whose leave-one-out estimate is not the
        kernel's with a row removed, is not used here. Sample weights weigh the kernel (as
        in ``predict``) and, for jackknife+, each row's two values in the ranks (the new
        observation weighing the mean sample weight, so that equal weights give the rule
        above).

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
            The queries.
        alpha : float in (0, 1), default=0.1
            One minus the nominal coverage (0.1: 90 % intervals).
        method : {"jackknife+", "local"}, default="jackknife+"

        Returns
        -------
        lower, upper : ndarray of shape (n_queries,) or (n_queries, n_outputs)
            Shaped like ``predict``'s output; :math:`\pm\infty` where too few residuals
            (or too few effective neighbours, for ``"local"``) support the level.

        Notes
        -----
        The residuals take one pass of the training set against itself,
        :math:`O(n^2 d)`, on the first call after a fit (kept for later calls); each query
        then costs :math:`O(n)` for ``"local"`` and :math:`O(n)` plus a selection among
        :math:`n` values for ``"jackknife+"``. An ``AttentionRegressor`` fitted with
        ``leave_one_out=False`` raises a ``ValueError``: its kernel was trained to copy
        each row's own target, and its leave-one-out residuals measure nothing it learned.

        References
        ----------
        .. [1] R. F. Barber, E. J. Candès, A. Ramdas, R. J. Tibshirani, "Predictive
           inference with the jackknife+", Ann. Statist. 49 (2021).
        .. [2] L. Guan, "Localized conformal prediction: a generalized inference framework
           for conformal prediction", Biometrika 110 (2023).

        Examples
        --------
        >>> import numpy as np
        >>> from kernattn import KernelSmoother
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(0, 1, size=(300, 1))
        >>> y = X[:, 0] + 0.1 * rng.normal(size=300)
        >>> model = KernelSmoother(bandwidth=0.05).fit(X, y)
        >>> lower, upper = model.conformal_interval([[0.5]], alpha=0.1)
        >>> (upper - lower).round(1)  # about 2 × 1.645 noise standard deviations
        array([0.3])
        """
        alpha = check_alpha(alpha)
        method = check_conformal_method(method)
        X = self._validate_queries(X)
        self._check_targets_kept()
        if getattr(self, "leave_one_out", True) is False:
            raise ValueError(
                "conformal intervals need leave-one-out residuals of a kernel fitted on the "
                "leave-one-out loss; this model was fitted with leave_one_out=False (its "
                "kernel copies each row's own target); refit with leave_one_out=True"
            )
        residuals, order, sorted_residuals, ids = self._residuals()
        tiles = [TargetTiles(column) for column in order.T]
        sample_weight = self.sample_weight_[self._active]
        n, t = self._values.shape
        lower = np.empty((len(X), t))
        upper = np.empty((len(X), t))

        def compute(rows):
            if method == "jackknife+":
                loo = self._leave_one_out_at(X[rows], ids)
                for o in range(t):
                    low, high = jackknife_plus(loo[o], residuals[:, o], alpha, sample_weight)
                    lower[rows, o], upper[rows, o] = low, high
            else:
                # The kernel weights carry the sample weights: a row of weight 2 counts
                # twice among the residuals.
                estimate, weights = self._kernel_estimate(X[rows])
                for o in range(t):
                    half = local_residual_quantiles(
                        weights, tiles[o], sorted_residuals[:, o], alpha
                    )
                    lower[rows, o] = estimate[:, o] - half
                    upper[rows, o] = estimate[:, o] + half

        # jackknife+: the weights, the groups' shares, the leave-one-out estimates per
        # output and the two sets of values a selection copies; local: the weights twice.
        n_arrays = 8 + 3 * t if method == "jackknife+" else 4
        map_query_blocks(compute, len(X), n, n_jobs=self.n_jobs, n_arrays=n_arrays, cache=False)
        lower += self._y_offset
        upper += self._y_offset
        shape = (len(X),) + self._target_shape
        return lower.reshape(shape).astype(self._dtype), upper.reshape(shape).astype(self._dtype)
