r"""What the Nadaraya–Watson classifiers share: attention over labelled keys.

A classifier's class probabilities are the Nadaraya–Watson estimate of the one-hot codes of
the labels, :math:`\hat p_c(x) = \sum_{i: y_i = c} w_i(x)` — the weights' class sums, which
the engine computes as a multi-output estimate of the codes (no kernel sum of its own). They
are then smoothed toward the class frequencies :math:`\pi_c` (sample- and class-weighted),

.. math::

    p_c(x) = (1 - \alpha)\, \hat p_c(x) + \alpha\, \pi_c,

with the share :math:`\alpha` (``prior_share_``) minimizing the leave-one-out log-loss of the
training rows (each row's :math:`\hat p` from the other rows, its exact duplicates left out
too): a query whose neighbours all carry other labels gets a small probability of its own
class, never 0. The leave-one-out probabilities come from the learned-kernel objective
(:class:`~kernattn.learned._objective.LeaveOneOutObjective`) on the one-hot codes, as the
classifiers' kernels are trained.

This module holds the base class (validation, labels, weights, the prior, ``predict_proba``
and the weights' contract) and the engine that serves a kernel fitted elsewhere.
"""

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from kernattn._core.loo import DuplicateGroups
from kernattn._engine.heads import SoftmaxHeads
from kernattn._engine.regressor import (
    NadarayaWatsonRegressor,
    fit_transaction,
    validated_queries,
)

#: The prior's share is at least this: every probability is then positive (at least this
#: share of a class frequency), whatever the leave-one-out log-loss prefers.
MIN_PRIOR_SHARE = 1e-6
#: Beyond this many training rows the leave-one-out probabilities that choose the prior's
#: share (and the likelihood bandwidths) are taken for this many rows drawn at random,
#: each against every key.
LOO_QUERIES = 2400


def one_hot(codes, n_classes):
    """The one-hot codes (n, n_classes) of integer labels ``codes``."""
    Y = np.zeros((len(codes), n_classes))
    Y[np.arange(len(codes)), codes] = 1.0
    return Y


def loo_queries(n, random_state):
    """The training rows whose leave-one-out probabilities are measured: all of them up to
    ``LOO_QUERIES``, else that many drawn without replacement (sorted)."""
    if n <= LOO_QUERIES:
        return np.arange(n)
    rng = check_random_state(random_state)
    return np.sort(rng.choice(n, LOO_QUERIES, replace=False))


def choose_prior_share(probabilities, Y, sample_weight, prior, unseen=0.0):
    r"""The share :math:`\alpha \in [10^{-6}, 1]` of the prior that minimizes the weighted
    log-loss of held-out (or leave-one-out) probabilities, with one more row of weight
    ``unseen`` by the rule of succession (0: none), and the log-loss of the rows at that
    share (mean per unit weight).

    The criterion is

    .. math::

        -\sum_i s_i \log\big((1-\alpha)\hat p_{i,y_i} + \alpha \pi_{y_i}\big)
        - u \log(\alpha / C)

    (convex in :math:`\alpha`): the last term is a row (of weight :math:`u`, ``unseen``)
    to which the kernel gave its class no weight at all, as Laplace's rule of succession
    adds one failure to the trials. Without it, rows that happen to hold no confident
    mistake (a few dozen on a small data set) choose :math:`\alpha \approx 0`, and the next
    query from a minority region costs :math:`-\log(10^{-6}\pi_c)`; with it,
    :math:`\alpha` is about :math:`1/(n + 1)` when the :math:`n` rows hold no mistake.

    Rows without probabilities (``nan``: no key outside their duplicate group) are left
    out; with none left the share is the smallest."""
    truth = np.einsum("ij,ij->i", probabilities, Y)
    base = Y @ prior
    ok = np.isfinite(truth)
    truth, base, sw = np.clip(truth[ok], 0.0, 1.0), base[ok], sample_weight[ok]
    if not len(truth):
        return MIN_PRIOR_SHARE, float("nan")
    total = sw.sum()

    def rows_loss(alpha):
        return -(sw @ np.log((1.0 - alpha) * truth + alpha * base)) / total

    def loss(alpha):
        return rows_loss(alpha) - unseen * np.log(alpha / len(prior)) / total

    result = minimize_scalar(
        loss, bounds=(MIN_PRIOR_SHARE, 1.0), method="bounded", options={"xatol": 1e-7}
    )
    best = min((MIN_PRIOR_SHARE, 1.0, float(result.x)), key=loss)
    return best, float(rows_loss(best))


def unseen_weight(X, sample_weight):
    """The weight of the rule of succession's unseen row: the mean weight of a distinct
    input (the same for integer weights and repeated rows, and in the weights' units)."""
    return float(sample_weight.sum() / max(DuplicateGroups(X).n_groups, 1))


class KernelSource:
    """A kernel fitted by a classifier, bound to the engine's keys when the engine fits.

    Holds the projections, scales and mixture of
    :class:`~kernattn._engine.heads.SoftmaxHeads` (everything but the keys and their weights); the
    engine hands it the training rows it keeps, in its order."""

    def __init__(self, **heads):
        self.heads = heads

    def bind(self, keys, log_sample_weight, dtype):
        """The :class:`~kernattn._engine.heads.SoftmaxHeads` over ``keys``."""
        return SoftmaxHeads(
            **self.heads, keys=keys, log_sample_weight=log_sample_weight, dtype=dtype
        )


class LabelEngine(NadarayaWatsonRegressor):
    """The Nadaraya–Watson engine over one-hot codes with a kernel learned elsewhere
    (``kernel_source``, a :class:`KernelSource`): prediction, weights, entropies."""

    def __init__(self, kernel_source=None, n_jobs=None):
        self.kernel_source = kernel_source
        self.n_jobs = n_jobs

    def _fit_kernel(self, X, Y, sample_weight):
        return self.kernel_source.bind(X, self._log_sample_weight, self._dtype)


class NadarayaWatsonClassifier(ClassifierMixin, BaseEstimator):
    """Base class: class probabilities as the weights' class sums, smoothed toward the
    class frequencies.

    Subclasses set ``_parameter_constraints`` and implement
    ``_fit_engine(X, Y, sample_weight)`` → ``(engine, (rows, loo))``: a fitted
    :class:`~kernattn._engine.regressor.NadarayaWatsonRegressor` of the one-hot codes ``Y``
    (float64,
    (n, n_classes)) and the leave-one-out probabilities ``loo`` of the training ``rows``
    (indices of positive-weight rows, :func:`loo_queries` of them; a row without any key
    outside its duplicate group: ``nan``). ``sample_weight`` already holds the class
    weights.
    """

    _parameter_constraints: dict = {
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }
    _succession = False

    # ------------------------------------------------------------------ fitting

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the kernel on the labelled training rows and choose the prior's share.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training inputs (the keys).
        y : array_like of shape (n_samples,)
            Labels of any type (numbers, strings); at least two classes.
        sample_weight : array_like of shape (n_samples,), optional
            Non-negative; an integer weight is the same as repeating the row. Multiplied
            by the class weights.

        Returns
        -------
        self : object
        """
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        X = np.asarray(X, dtype=np.float64)
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data; "
                f"got 1 class: {classes.tolist()[0]!r}"
            )
        sample_weight = _check_sample_weight(
            sample_weight, X, dtype=np.float64, ensure_non_negative=True, copy=True
        )
        if self.class_weight is not None:
            sample_weight *= compute_sample_weight(self.class_weight, codes)
        if not np.any(sample_weight > 0):
            raise ValueError("sample_weight must have at least one positive entry")
        Y = one_hot(codes, len(classes))
        prior = sample_weight @ Y
        prior /= prior.sum()
        with fit_transaction(self):
            self._check_params(X)
            engine, (rows, loo) = self._fit_engine(X, Y, sample_weight)
            unseen = unseen_weight(X[rows], sample_weight[rows]) if self._succession else 0.0
            share, loss = choose_prior_share(loo, Y[rows], sample_weight[rows], prior, unseen)
            self.classes_ = classes
            self.class_prior_ = prior
            self.prior_share_ = share
            self.loo_log_loss_ = loss
            self.engine_ = engine
        return self

    def _check_params(self, X):
        """Checks across parameters, before any work (subclasses add theirs)."""

    # ---------------------------------------------------------------- predicting

    def _validate_queries(self, X):
        return validated_queries(self, X)

    def predict_proba(self, X):
        """Class probabilities: the weights' class sums, smoothed toward the class
        frequencies, ``(1 − prior_share_) Σ_{i: y_i = c} w_i(x) + prior_share_ ·
        class_prior_[c]``.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)

        Returns
        -------
        proba : ndarray of shape (n_queries, n_classes)
            Positive, rows summing to 1, columns in the order of ``classes_``.
        """
        X = self._validate_queries(X)
        estimate = np.asarray(self.engine_.predict(X), dtype=np.float64).reshape(len(X), -1)
        # The codes' estimate is a convex combination of one-hot rows: rounding in the
        # engine's centered units can leave −1e-17 or a sum of 1 ± 1e-16.
        np.clip(estimate, 0.0, 1.0, out=estimate)
        estimate /= estimate.sum(axis=1, keepdims=True)
        share = self.prior_share_
        return (1.0 - share) * estimate + share * self.class_prior_

    def predict_log_proba(self, X):
        """The logarithm of :meth:`predict_proba`, of the same shape (finite: every
        probability is positive)."""
        return np.log(self.predict_proba(X))

    def decision_function(self, X):
        r"""Log-odds scores: the centred log-probabilities, :math:`\log p_c(x) - \frac{1}{C}
        \sum_j \log p_j(x)`; for two classes the positive class's log-odds,
        :math:`\log p_1(x) - \log p_0(x)`, the score of ``classes_[1]``.

        Finite (every probability is positive) and ordered as the probabilities: the
        largest score is :meth:`predict`'s class, a positive binary score predicts
        ``classes_[1]``.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)

        Returns
        -------
        scores : ndarray of shape (n_queries,) for two classes, else (n_queries, n_classes)
        """
        log_proba = self.predict_log_proba(X)
        if log_proba.shape[1] == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba - log_proba.mean(axis=1, keepdims=True)

    def predict(self, X):
        """The most probable class at each query.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)

        Returns
        -------
        labels : ndarray of shape (n_queries,)
        """
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def attention_weights(self, X, head=None):
        """The weight every query gives every training row (rows ≥ 0, summing to 1).

        ``predict_proba(X) == (1 − prior_share_) · attention_weights(X) @ Y +
        prior_share_ · class_prior_`` for ``Y`` the one-hot codes of the training labels.
        Rows with zero sample weight get weight 0.

        Parameters
        ----------
        X : array_like of shape (n_queries, n_features)
        head : int, optional
            One head's weights; ``None``: the mixture of the heads.

        Returns
        -------
        weights : ndarray of shape (n_queries, n_train)
        """
        X = self._validate_queries(X)
        return self.engine_.attention_weights(X, head=head)

    def effective_neighbors(self, X):
        """The effective number of training rows each head attends to at each query,
        ``exp(−Σ_i w_i log w_i)``, an array of shape (n_queries, n_heads) (see
        :meth:`NadarayaWatsonRegressor.effective_neighbors
        <kernattn._engine.regressor.NadarayaWatsonRegressor.effective_neighbors>`)."""
        X = self._validate_queries(X)
        return self.engine_.effective_neighbors(X)
