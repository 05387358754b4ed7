r"""The Nadaraya–Watson estimator shared by every kernattn regressor.

All three estimators predict

.. math::

    \hat y(x) = \sum_i w_i(x)\, y_i, \qquad
    w_i(x) = \frac{s_i\, \kappa(x, x_i)}{\sum_j s_j\, \kappa(x, x_j)}

(:math:`s_i` the sample weights) and differ only in the kernel :math:`\kappa`. This module
holds what does not depend on the kernel: input validation, fit bookkeeping (a failed fit
leaves an earlier one intact), blocked prediction with a bounded memory footprint,
``attention_weights`` and ``predict(X, return_std=True)``.

A subclass says how it makes logits :math:`\log(s_i \kappa(x, x_i))` for a block of queries;
the linear estimator, which never forms them, overrides the block methods instead.
"""

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from kernattn._blocks import map_query_blocks
from kernattn.attention import _exp_shifted

# Keys per tile in the prediction of a subclass with non-positive logits.
_KEY_TILE = 2048

# A row whose exponentiated logits sum below this has underflowed (its nearest key is far
# away on the logit scale): it is recomputed with the row maximum subtracted.
_UNDERFLOW = 1e-200


def duplicate_groups(X):
    """Group id per row: rows with identical inputs share an id."""
    _, groups = np.unique(X, axis=0, return_inverse=True)
    return groups.ravel()


def _underflowed(row_sums):
    """Rows whose exponentiated logits sum to (almost) nothing, or overflowed (inf, NaN)."""
    return ~((row_sums >= _UNDERFLOW) & (row_sums < np.inf))


class NadarayaWatsonRegressor(RegressorMixin, BaseEstimator):
    """Base class: a Nadaraya–Watson regressor defined by its logits.

    Subclasses implement

    - ``_check_params()``: raise ``ValueError``/``TypeError`` for bad constructor arguments
      (called first in ``fit``, before anything on ``self`` changes);
    - ``_fit_kernel(X, Y, sample_weight)``: called after the training set is stored (so
      ``_values`` and ``_log_sample_weight`` are available); learn the kernel and set the
      fitted attributes that ``_block_logits`` needs. ``X`` (float64, shape (n, d)),
      ``Y`` (float64, shape (n, n_outputs)) and ``sample_weight`` hold only the rows with
      positive weight;
    - blocks are predicted from several threads at once: the block methods must not write to
      ``self``;
    - ``_block_logits(X)``: the (n_queries, n) logits ``log κ(x, x_i) + log s_i`` of a
      block of validated queries against those rows.

    A subclass whose logits are never positive sets ``_nonpositive_logits = True``: the row
    maximum is then skipped (one pass less) and only rows that underflow are recomputed,
    from ``_far_logits(X)`` (by default the same logits) with the maximum subtracted. Its
    ``_block_logits(X, floor=True, keys=slice)`` (the logits against a tile of keys) must
    then floor logits that can fall below
    ``kernattn.attention._EXP_FLOOR`` (numpy's ``exp`` is several times slower on arguments
    that underflow); it may skip that pass when it knows none can.

    After ``fit`` the base holds ``X_fit_``, ``y_fit_`` and ``sample_weight_`` (the training
    data as given, so ``attention_weights`` has one column per training row), and private
    copies of the positive-weight targets.
    """

    _nonpositive_logits = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    # ------------------------------------------------------------------ fitting

    def fit(self, X, y, sample_weight=None):
        """Fit the kernel and store the training set.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        y : array_like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative. An integer weight is the same as repeating the row.

        Returns
        -------
        self
        """
        previous = dict(self.__dict__)
        try:
            self._check_params()
            X, y, sample_weight = self._validate_training_data(X, y, sample_weight)
            if not np.any(sample_weight > 0):
                raise ValueError("sample_weight must have at least one positive entry")
            Y = y.reshape(len(y), -1)
            active = np.flatnonzero(sample_weight > 0)
            self._set_training_set(X, y, sample_weight, active)
            self._fit_kernel(X[active], Y[active], sample_weight[active])
        except BaseException:
            # A failed fit must leave an earlier one intact.
            self.__dict__.clear()
            self.__dict__.update(previous)
            raise
        return self

    def _validate_training_data(self, X, y, sample_weight, reset=True):
        """scikit-learn's checks (and messages) for X, y and sample_weight; float64 out."""
        X, y = validate_data(
            self,
            X,
            y,
            reset=reset,
            multi_output=True,
            y_numeric=True,
            dtype=[np.float64, np.float32],
        )
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        sample_weight = _check_sample_weight(
            sample_weight, X, dtype=np.float64, ensure_non_negative=True
        )
        return X, y, sample_weight

    def _set_training_set(self, X, y, sample_weight, active):
        self.X_fit_ = X
        self.y_fit_ = y
        self.sample_weight_ = sample_weight
        Y = y.reshape(len(y), -1)[active]
        sw = sample_weight[active]
        self._active = active
        self._log_sample_weight = np.log(sw / sw.max())
        # Targets are stored centred: the weighted second moment used by return_std then
        # does not cancel catastrophically for targets far from zero.
        self._y_offset = np.average(Y, axis=0, weights=sw)
        self._values = Y - self._y_offset
        self._target_shape = y.shape[1:]
        self._moments = np.hstack([self._values, self._values**2, np.ones((len(Y), 1))])

    # --------------------------------------------------------------- predicting

    def _validate_queries(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return np.asarray(X, dtype=np.float64)

    def _block_kernel(self, X):
        """Unnormalised weights ``exp(logits - c)`` for a block, ``c`` a per-row shift.

        The shift keeps ``exp`` finite and the largest entry of every row at 1 when needed
        (log-sum-exp), so a query far from every key still gets its nearest key's target
        instead of 0/0. With non-positive logits the shift is skipped, and only rows that
        underflowed are recomputed by :meth:`_far_kernel`.
        """
        if not self._nonpositive_logits:
            logits = self._block_logits(X)
            logits -= logits.max(axis=1, keepdims=True)
            return _exp_shifted(logits)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            logits = self._block_logits(X, floor=True)
            kernel = np.exp(logits, out=logits)
        with np.errstate(over="ignore", invalid="ignore"):
            redo = _underflowed(kernel.sum(axis=1))
        if np.any(redo):
            kernel[redo] = self._far_kernel(X[redo])
        return kernel

    def _far_kernel(self, X):
        """Kernel rows, shifted by their maximum, for queries whose logits underflowed."""
        logits = self._far_logits(X)
        # At astronomic distances the shift can overflow to −inf: a weight of 0, as meant.
        with np.errstate(over="ignore"):
            logits -= logits.max(axis=1, keepdims=True)
        return _exp_shifted(logits)

    def _far_logits(self, X):
        """Logits up to a per-query constant, for queries whose logits underflowed.

        Only used when ``_nonpositive_logits`` is set; the row maximum is subtracted after.
        """
        return self._block_logits(X)

    def _block_weights(self, X):
        """Normalised weights (rows sum to 1) of a block against the positive-weight rows."""
        kernel = self._block_kernel(X)
        kernel /= kernel.sum(axis=1, keepdims=True)
        return kernel

    def _predict_block(self, X, return_std):
        """Estimate (and weighted variance) for a block, in the centred target units.

        The normaliser and the weighted moments come out of one matrix product with
        ``[values, values², 1]``, so the (block × n) weights are never divided; the
        normaliser also tells which rows underflowed.
        """
        if self._nonpositive_logits:
            sums = np.zeros((len(X), self._moments.shape[1]))
            # Key tiles keep each kernel block in cache; with non-positive logits there is
            # no row maximum to wait for, so the tiles' sums simply add up.
            for start in range(0, len(self._moments), _KEY_TILE):
                keys = slice(start, start + _KEY_TILE)
                with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                    logits = self._block_logits(X, floor=True, keys=keys)
                    sums += np.exp(logits, out=logits) @ self._moments[keys]
            redo = _underflowed(sums[:, -1])
            if np.any(redo):
                sums[redo] = self._far_kernel(X[redo]) @ self._moments
        else:
            sums = self._block_kernel(X) @ self._moments
        t = self._values.shape[1]
        denominator = sums[:, -1:]
        mean = sums[:, :t] / denominator
        if not return_std:
            return mean, None
        variance = sums[:, t : 2 * t] / denominator - mean**2
        return mean, np.maximum(variance, 0.0)

    def _n_block_keys(self):
        return len(self._values)

    def predict(self, X, return_std=False):
        """Nadaraya–Watson estimate at each query.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
        return_std : bool
            Also return the weighted spread of the training targets around the estimate,
            ``sqrt(Σ_i w_i(x) (y_i − ŷ(x))²)``: how much the neighbours the query attends to
            disagree.

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) or (n_queries, n_outputs)
        y_std : ndarray of the same shape
            Only when ``return_std=True``.
        """
        X = self._validate_queries(X)
        return self._finish_prediction(*self._predict_centred(X, return_std))

    def _predict_centred(self, X, return_std, **block_options):
        """Estimates and variances of validated queries, in centred target units, from
        :meth:`_predict_block` over query blocks (on all cores for large problems)."""
        t = self._values.shape[1]
        mean = np.empty((len(X), t))
        variance = np.empty((len(X), t)) if return_std else None

        def predict_rows(rows):
            block_mean, block_var = self._predict_block(X[rows], return_std, **block_options)
            mean[rows] = block_mean
            if return_std:
                variance[rows] = block_var

        tile = _KEY_TILE if self._nonpositive_logits else None
        map_query_blocks(predict_rows, len(X), self._n_block_keys(), key_tile=tile)
        return mean, variance

    def _finish_prediction(self, mean, variance):
        """Back to target units and shape; the standard deviation from the variance."""
        mean += self._y_offset
        shape = (len(mean),) + self._target_shape
        if variance is None:
            return mean.reshape(shape)
        return mean.reshape(shape), np.sqrt(variance).reshape(shape)

    def attention_weights(self, X):
        """The weight every query gives every training row.

        Row ``i`` is the distribution :math:`w(x_i)` the estimate averages the training
        targets with: ``predict(X) == attention_weights(X) @ y_fit_``. Rows sum to 1; rows
        with zero sample weight get weight 0.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)

        Returns
        -------
        weights : ndarray of shape (n_queries, n_train)
        """
        X = self._validate_queries(X)
        weights = np.zeros((len(X), len(self.X_fit_)))

        def weigh_rows(rows):
            weights[rows, self._active] = self._block_weights(X[rows])

        map_query_blocks(weigh_rows, len(X), self._n_block_keys())
        return weights
