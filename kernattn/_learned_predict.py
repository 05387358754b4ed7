r"""Prediction, diagnostics and head pruning of a fitted :class:`~kernattn.AttentionRegressor`.

The prediction is :math:`\hat y(x) = \sum_h a_h \hat y_h(x) + b`, each head's estimate a
softmax average of the training targets. The mixed weights :math:`\sum_h a_h w^h(x)` sum to
:math:`\sum_h a_h` (1 for one head, or when the learned head weights happen to sum to 1);
``predict(X) == attention_weights(X) @ y_fit_ + head_bias_``.

The diagnostics describe each head's softmax: its entropy
:math:`H = -\sum_i w_i \log w_i` (nats), the effective number of neighbours
:math:`e^{H}` (``n`` for uniform weights, 1 for one-hot), and the variance of the logits
across the keys, which sets how peaked the softmax can be.
"""

import copy
import numbers

import numpy as np
from scipy.optimize import nnls
from sklearn.utils.validation import check_is_fitted

from kernattn._base import duplicate_groups
from kernattn._blocks import iter_query_blocks
from kernattn._learned_objective import Layout, LeaveOneOutObjective, project


class AttentionDiagnosticsMixin:
    """Blocked multi-head prediction, attention weights, softmax diagnostics, pruning."""

    def _head_logits(self, Z, h):
        Q, _ = project(Z, self.query_weights_[h], self.similarity)
        logits = Q @ self._keys[h].T
        logits += self._key_bias[h]
        return logits

    def _head_kernel(self, Z, h):
        """``exp(logits − row max)``: a query far from every key keeps its nearest key."""
        logits = self._head_logits(Z, h)
        logits -= logits.max(axis=1, keepdims=True)
        return np.exp(logits, out=logits)

    def _standardised(self, X):
        return (X - self.x_mean_) / self.x_scale_

    def _n_heads_fitted(self):
        return len(self.temperature_)

    def _block_weights(self, X, heads=None):
        """Mixed weights ``Σ_h a_h w^h`` of a block (each row sums to ``Σ_h a_h``)."""
        Z = self._standardised(X)
        mixed = np.zeros((len(X), len(self._values)))
        for h in range(self._n_heads_fitted()) if heads is None else heads:
            kernel = self._head_kernel(Z, h)
            kernel *= self.head_weights_[h] / kernel.sum(axis=1, keepdims=True)
            mixed += kernel
        return mixed

    def _predict_block(self, X, return_std, heads=None):
        r"""Mixed estimate (centred units) and its spread for a block.

        The spread is :math:`\sum_h \pi_h \sum_i w^h_i (y_i - \hat y)^2` with
        :math:`\pi_h = |a_h|/\sum_g |a_g|`: the heads' neighbours around the final estimate,
        weighted by how much each head counts. It is never negative (mixed weights can be)
        and reduces to the single-head weighted variance.
        """
        Z = self._standardised(X)
        heads = range(self._n_heads_fitted()) if heads is None else heads
        t = self._values.shape[1]
        moments = self._moments
        mean = np.zeros((len(X), t)) + self._centred_bias()
        per_head = []
        for h in heads:
            sums = self._head_kernel(Z, h) @ moments
            m1 = sums[:, :t] / sums[:, -1:]
            mean += self.head_weights_[h] * m1
            if return_std:
                per_head.append((h, m1, sums[:, t : 2 * t] / sums[:, -1:]))
        if not return_std:
            return mean, None
        a = np.abs(self.head_weights_[[h for h, _, _ in per_head]])
        pi = a / a.sum() if a.sum() > 0 else np.full(len(a), 1.0 / len(a))
        variance = np.zeros_like(mean)
        for p, (_, m1, m2) in zip(pi, per_head, strict=True):
            variance += p * (m2 - 2.0 * mean * m1 + mean**2)
        return mean, np.maximum(variance, 0.0)

    def predict(self, X, return_std=False, heads=None):
        """Mixed Nadaraya–Watson estimate of the heads.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
        return_std : bool
            Also return the spread of the targets the heads attend to around the
            estimate (see :meth:`_predict_block`).
        heads : array_like of int, optional
            Predict with these heads only; every other head's estimate is replaced by the
            training mean of the targets (mean ablation), the mixture is not re-fitted
            (:meth:`prune_heads` re-fits it).

        Returns
        -------
        y_pred : ndarray of shape (n_queries,) or (n_queries, n_outputs)
        y_std : ndarray of the same shape
            Only when ``return_std=True``.
        """
        X = self._validate_queries(X)
        heads = self._check_heads(heads)
        return self._finish_prediction(*self._predict_centred(X, return_std, heads=heads))

    def _n_block_keys(self):
        # A head's kernel block and the logits it is made from live side by side.
        return 2 * len(self._values)

    def attention_weights(self, X, head=None):
        """The weight every query gives every training row, per head or mixed.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
        head : int, optional
            That head's softmax weights (rows sum to 1). ``None``: the mixed weights
            ``Σ_h head_weights_[h] w^h``, whose rows sum to ``head_weights_.sum()`` and with
            which ``predict(X) == attention_weights(X) @ y_fit_ + head_bias_``.

        Returns
        -------
        weights : ndarray of shape (n_queries, n_train)
            Rows with zero sample weight get weight 0.
        """
        X = self._validate_queries(X)
        heads = None
        if head is not None:
            if not isinstance(head, numbers.Integral) or isinstance(head, bool):
                raise ValueError(f"head must be None or one head index (an int); got {head!r}")
            heads = self._check_heads([head])
        weights = np.zeros((len(X), len(self.X_fit_)))
        for rows in iter_query_blocks(len(X), self._n_block_keys(), cache=False):
            if heads is None:
                weights[rows, self._active] = self._block_weights(X[rows])
            else:
                kernel = self._head_kernel(self._standardised(X[rows]), heads[0])
                kernel /= kernel.sum(axis=1, keepdims=True)
                weights[rows, self._active] = kernel
        return weights

    def attention_entropy(self, X):
        """Entropy (nats) of every head's softmax weights at each query.

        Computed from the logits, :math:`H = \\log Z - \\sum_i w_i \\ell_i` with
        :math:`\\ell` shifted by its row maximum, so one-hot rows give exactly 0.

        Returns
        -------
        entropy : ndarray of shape (n_queries, n_heads)
        """
        X = self._validate_queries(X)
        H = self._n_heads_fitted()
        out = np.empty((len(X), H))
        for rows in iter_query_blocks(len(X), self._n_block_keys(), cache=False):
            Z = self._standardised(X[rows])
            for h in range(H):
                logits = self._head_logits(Z, h)
                logits -= logits.max(axis=1, keepdims=True)
                kernel = np.exp(logits)
                total = kernel.sum(axis=1)
                entropy = np.log(total) - np.einsum("ij,ij->i", kernel, logits) / total
                out[rows, h] = np.maximum(entropy, 0.0)
        return out

    def effective_neighbours(self, X):
        """Effective number of training rows each head averages at each query, ``exp(H)``.

        Returns
        -------
        n_eff : ndarray of shape (n_queries, n_heads)
            Between 1 (one key gets all the weight) and the number of training rows.
        """
        return np.exp(self.attention_entropy(X))

    def logit_variance(self, X):
        """Per head: the mean over the queries of the logits' variance across the keys.

        Sample-weighted over the keys (the ``log s_i`` term is not part of the logit
        here). Around 1 the softmax spreads its weight; much larger, it is close to
        one-hot and its gradient vanishes.

        Returns
        -------
        variance : ndarray of shape (n_heads,)
        """
        X = self._validate_queries(X)
        H = self._n_heads_fitted()
        sw = self.sample_weight_[self._active]
        p = sw / sw.sum()
        log_sw = np.log(sw / sw.max())
        total = np.zeros(H)
        for rows in iter_query_blocks(len(X), self._n_block_keys(), cache=False):
            Z = self._standardised(X[rows])
            for h in range(H):
                logits = self._head_logits(Z, h) - log_sw
                mean = logits @ p
                total[h] += np.sum((logits - mean[:, None]) ** 2 @ p)
        return total / max(len(X), 1)

    # --------------------------------------------------------------- heads

    def prune_heads(self, heads, refit_mixture=True):
        """A copy that keeps only ``heads``, to measure what the other heads contribute.

        Parameters
        ----------
        heads : array_like of int
            Indices of the heads to keep.
        refit_mixture : bool, default=True
            Re-estimate ``head_weights_`` and ``head_bias_`` of the kept heads by weighted
            non-negative least squares on their leave-one-out estimates over the training
            set (stacked regression [1]_; the projections are not retrained). Unconstrained
            weights would exploit the anti-correlation of a leave-one-out estimate with its
            own target, and fit the training set only. Otherwise keep their weights and
            replace each dropped head by the training mean (as ``predict(X, heads=...)``
            does).

        Returns
        -------
        pruned : AttentionRegressor
            With ``n_heads = len(heads)``.

        References
        ----------
        .. [1] L. Breiman, "Stacked regressions", Machine Learning 24 (1996).
        """
        check_is_fitted(self)
        keep = self._check_heads(heads)
        pruned = copy.deepcopy(self)
        pruned.n_heads = len(keep)
        pruned.query_weights_ = self.query_weights_[keep].copy()
        pruned.key_weights_ = self.key_weights_[keep].copy()
        pruned.temperature_ = self.temperature_[keep].copy()
        pruned._keys = [self._keys[h] for h in keep]
        pruned._key_bias = [self._key_bias[h] for h in keep]
        a = self.head_weights_[keep].copy()
        b = self._centred_bias()
        if refit_mixture:
            a, b = pruned._refit_mixture()
        pruned.head_weights_ = a
        pruned.head_bias_ = b + (1.0 - a.sum()) * self._y_offset
        pruned._centred_b = b
        if isinstance(self.init, np.ndarray) and self.init.ndim == 3:
            pruned.init = self.init[keep]
        return pruned

    def _refit_mixture(self):
        """Weighted least squares of the targets on the heads' leave-one-out estimates."""
        active = self._active
        Z = (self.X_fit_[active] - self.x_mean_) / self.x_scale_
        sw = self.sample_weight_[active]
        H = len(self.temperature_)
        t = self._values.shape[1]
        layout = Layout(H, Z.shape[1], self.query_weights_.shape[2], t, False, False)
        objective = LeaveOneOutObjective(
            Z,
            self._values,
            sw,
            duplicate_groups(self.X_fit_[active]),
            layout,
            self.similarity,
            self.temperature_,
            0.0,
        )
        theta = layout.pack(self.query_weights_, self.key_weights_, None, np.ones(H), np.zeros(t))
        F = objective.head_estimates(theta)  # (n, H, t)
        ok = ~np.isnan(F[:, 0, 0])
        F, Y, sw = F[ok], self._values[ok], sw[ok]
        # Non-negative weights, as in stacked regression (Breiman, 1996): leave-one-out
        # estimates are anti-correlated with their own targets (a head that attends almost
        # uniformly predicts (Σ_j y_j − y_i)/(n − 1)), and unconstrained least squares turns
        # that into a weight near −n that fits the training targets and nothing else.
        total = sw.sum()
        F_mean = np.einsum("i,iht->ht", sw, F) / total
        Y_mean = sw @ Y / total
        # Rows (i, output): y_io − ȳ_o ≈ Σ_h a_h (F_iho − F̄_ho), intercept from the means.
        design = (F - F_mean).transpose(0, 2, 1).reshape(-1, H)
        root = np.sqrt(np.repeat(sw, t))
        a = nnls(design * root[:, None], (Y - Y_mean).ravel() * root)[0]
        return a, Y_mean - np.einsum("h,ht->t", a, F_mean)

    def _centred_bias(self):
        return self._centred_b

    def _check_heads(self, heads):
        H = len(self.temperature_)
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
