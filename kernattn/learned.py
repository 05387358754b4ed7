r"""``AttentionRegressor``: Nadaraya–Watson regression with a learned attention kernel.

Each head :math:`h` compares a query with the training inputs through learned projections,
:math:`q = W_q^{h\top} z`, :math:`k_i = W_k^{h\top} z_i` (:math:`z` the standardised input),
and averages the training targets with the softmax of the logits
:math:`\ell_i = \mathrm{sim}(q, k_i)/\tau_h`; the heads' estimates are mixed affinely. The
projections, the mixture and optionally the temperatures minimise the leave-one-out squared
error (see :mod:`kernattn._learned_objective` for the objective and its gradient).
"""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from kernattn._base import NadarayaWatsonRegressor, duplicate_groups
from kernattn._learned_fit import (
    Trainer,
    initial_projections,
    sample_groups,
    scale_to_unit_variance,
    warn_if_saturated,
)
from kernattn._learned_objective import Layout, LeaveOneOutObjective, key_bias, project
from kernattn._learned_predict import AttentionDiagnosticsMixin

_SIMILARITIES = ("dot", "cosine", "gaussian")
_SCALES = ("sqrt", "none", "learned")
_INITS = ("identity", "pca", "random")
_OPTIMIZERS = ("lbfgs", "adam")


def _is_int(value, low):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def _is_float(value, low, high=np.inf, low_open=True):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return (value > low if low_open else value >= low) and value <= high


class AttentionRegressor(AttentionDiagnosticsMixin, NadarayaWatsonRegressor):
    r"""Nadaraya–Watson regression whose kernel is multi-head attention, learned by
    leave-one-out.

    For a query :math:`x`, standardised to :math:`z = (x - \mu)/\sigma`, head :math:`h` makes
    logits against every training input :math:`x_i`,

    .. math::

        \ell^h_i = \mathrm{sim}(z W_q^h,\; z_i W_k^h) / \tau_h + \log s_i,

    with ``sim`` the dot product, the cosine, or :math:`-\tfrac12\|q - k\|^2`. Its estimate is
    :math:`\hat y_h(x) = \sum_i \mathrm{softmax}(\ell^h)_i\, y_i` (the values are the training
    targets), and the prediction is the affine mixture
    :math:`\hat y(x) = \sum_h a_h \hat y_h(x) + b` (``head_weights_``, ``head_bias_``). The
    projections :math:`W_q^h, W_k^h`, the mixture and (with ``scale="learned"``) the
    temperatures minimise the leave-one-out squared error, in which training point :math:`i`
    is predicted from the other points (its exact duplicates excluded too), plus
    ``alpha`` times the squared Frobenius norm of the projections. The loss is divided by
    the targets' variance: ``loss_curve_`` reads as a leave-one-out :math:`1 - R^2`.

    With ``similarity="gaussian"``, ``tie_qk=True`` and one head this is Metric Learning for
    Kernel Regression [1]_: the Gaussian smoother with the learned metric
    :math:`W W^\top`; with :math:`W = \mathrm{diag}(1/h)`, ``scale=1.0``,
    ``standardize=False`` and ``max_iter=0`` it is exactly
    :class:`~kernattn.KernelSmoother` with bandwidth :math:`h`. The ``"dot"`` kernel
    :math:`\exp(q^\top k/\tau)` with :math:`W_q \ne W_k` is asymmetric and not local by
    itself (it prefers keys far along :math:`q`); mixing heads makes up for part of that.

    Parameters
    ----------
    n_heads : int, default=1
    head_dim : int, optional
        Columns of each projection; ``None`` means ``n_features``.
    similarity : {"dot", "cosine", "gaussian"}, default="dot"
        ``"cosine"`` normalises q and k, so only its temperature sets how sharp the kernel
        is: use it with ``scale="learned"``.
    tie_qk : bool, default=False
        Share one projection for queries and keys (a symmetric kernel).
    scale : {"sqrt", "none", "learned"} or float, default="sqrt"
        The logit divisor τ: :math:`\sqrt{d_{head}}`, 1, learned (one per head, starting at
        :math:`\sqrt{d_{head}}`), or a given positive float.
    init : {"identity", "pca", "random"} or array_like, default="identity"
        Initial projections: the identity (truncated or padded to ``head_dim``), the leading
        principal directions of the standardised inputs, or Gaussian; each scaled so that
        the initial logits have unit within-query variance, whatever ``head_dim`` is. Heads
        after the first are perturbed randomly. An array of shape
        ``(n_features, head_dim)`` (every head) or ``(n_heads, n_features, head_dim)`` is used
        as given, for queries and keys (heads that start identical receive identical
        gradients and stay identical: give one array per head).
    alpha : float, default=3.0
        L2 penalty on the projections, weighed against the sum of squared leave-one-out
        errors divided by the targets' variance (as ridge regression's ``alpha`` against
        its sum of squares), so it fades as the sample grows.
    optimizer : {"lbfgs", "adam"}, default="lbfgs"
        Full-batch L-BFGS with the analytic gradient, or Adam over mini-batches of queries
        (whole duplicate groups) attending to all keys, or to ``key_subsample`` of them.
    learning_rate : float, default=0.01
        Adam's step size.
    batch_size : int, default=256
        Queries per Adam step.
    key_subsample : int, optional
        Adam only: each step's queries attend to this many randomly drawn keys (groups of
        duplicates) instead of all of them, for large n.
    max_iter : int, default=200
        L-BFGS iterations or Adam epochs; 0 keeps the initial kernel (no training).
    tol : float, default=1e-6
        Relative improvement of the loss below which training has converged (``ftol`` of
        L-BFGS; for Adam and early stopping, over ``n_iter_no_change`` iterations).
    n_iter_no_change : int, default=10
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training inputs (whole duplicate groups),
        train on the rest, and keep the parameters with the lowest loss of the held-out
        queries against the training keys. The fitted estimator attends to all rows.
    validation_fraction : float, default=0.1
    standardize : bool, default=True
        Standardise the inputs (weighted mean and standard deviation; a constant feature
        gets scale 1) before projecting, so the initial scaling and ``alpha`` mean the same
        for every feature's units.
    random_state : int, RandomState instance or None, default=None
        For the initial projections, the validation split and Adam's batches.
    warm_start : bool, default=False
        Start from the previous fit's parameters (when their shapes match).
    verbose : int, default=0
        Print the loss and gradient norm at every iteration or epoch.

    Attributes
    ----------
    x_mean_, x_scale_ : ndarray of shape (n_features,)
    query_weights_, key_weights_ : ndarray of shape (n_heads, n_features, head_dim)
    temperature_ : ndarray of shape (n_heads,)
    head_weights_ : ndarray of shape (n_heads,)
    head_bias_ : ndarray of shape (n_outputs,)
        In target units: ``predict(X) = Σ_h head_weights_[h] ŷ_h(X) + head_bias_``.
    loss_curve_ : list of float
        Training loss (leave-one-out :math:`1 - R^2` plus penalty) per iteration or epoch.
    validation_scores_ : list of float
        Held-out loss per iteration (only with ``early_stopping``).
    n_iter_ : int
    X_fit_, y_fit_, sample_weight_ : ndarray
    n_features_in_ : int

    See Also
    --------
    kernattn.KernelSmoother : the fixed-kernel estimator (no learning).

    References
    ----------
    .. [1] K. Q. Weinberger, G. Tesauro, "Metric Learning for Kernel Regression",
       AISTATS 2007.
    .. [2] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    .. [3] E. A. Nadaraya, "On estimating regression", Theory Probab. Appl. 9 (1964).

    Examples
    --------
    >>> import numpy as np
    >>> from kernattn import AttentionRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = np.sin(X[:, 0])
    >>> model = AttentionRegressor(similarity="gaussian", tie_qk=True, random_state=0)
    >>> model = model.fit(X, y)
    >>> bool(model.score(X, y) > 0.9)
    True
    >>> model.attention_weights(X[:2]).sum(axis=1).round(12)
    array([1., 1.])
    """

    def __init__(
        self,
        n_heads=1,
        head_dim=None,
        similarity="dot",
        tie_qk=False,
        scale="sqrt",
        init="identity",
        alpha=3.0,
        optimizer="lbfgs",
        learning_rate=0.01,
        batch_size=256,
        key_subsample=None,
        max_iter=200,
        tol=1e-6,
        n_iter_no_change=10,
        early_stopping=False,
        validation_fraction=0.1,
        standardize=True,
        random_state=None,
        warm_start=False,
        verbose=0,
    ):
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.similarity = similarity
        self.tie_qk = tie_qk
        self.scale = scale
        self.init = init
        self.alpha = alpha
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.key_subsample = key_subsample
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.standardize = standardize
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose

    # ------------------------------------------------------------------ checks

    def _check_params(self):
        def choice(name, value, allowed):
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(
                    f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}"
                )

        def need(ok, name, what):
            if not ok:
                raise ValueError(f"{name} must be {what}; got {getattr(self, name)!r}")

        need(_is_int(self.n_heads, 1), "n_heads", "an integer >= 1")
        need(self.head_dim is None or _is_int(self.head_dim, 1), "head_dim", "None or >= 1")
        choice("similarity", self.similarity, _SIMILARITIES)
        choice("optimizer", self.optimizer, _OPTIMIZERS)
        need(isinstance(self.tie_qk, bool | np.bool_), "tie_qk", "a bool")
        if isinstance(self.scale, str):
            choice("scale", self.scale, _SCALES)
        else:
            need(
                _is_float(self.scale, 0.0) and np.isfinite(self.scale),
                "scale",
                "'sqrt', 'none', 'learned' or a positive float",
            )
        if isinstance(self.init, str):
            choice("init", self.init, _INITS)
        need(_is_float(self.alpha, 0.0, low_open=False), "alpha", "a float >= 0")
        need(_is_float(self.learning_rate, 0.0), "learning_rate", "a positive float")
        need(_is_int(self.batch_size, 1), "batch_size", "an integer >= 1")
        need(
            self.key_subsample is None or _is_int(self.key_subsample, 1),
            "key_subsample",
            "None or an integer >= 1",
        )
        need(_is_int(self.max_iter, 0), "max_iter", "an integer >= 0")
        need(_is_float(self.tol, 0.0, low_open=False), "tol", "a float >= 0")
        need(_is_int(self.n_iter_no_change, 1), "n_iter_no_change", "an integer >= 1")
        need(
            _is_float(self.validation_fraction, 0.0, 1.0) and self.validation_fraction < 1,
            "validation_fraction",
            "a float in (0, 1)",
        )

    def _user_init(self, d, head_dim):
        try:
            W = np.asarray(self.init, dtype=float)
        except (TypeError, ValueError):
            W = None
        if W is None or W.shape not in ((d, head_dim), (self.n_heads, d, head_dim)):
            raise ValueError(
                "init must be 'identity', 'pca', 'random' or an array of shape (n_features, "
                f"head_dim) = ({d}, {head_dim}) or (n_heads, n_features, head_dim); got "
                f"{getattr(W, 'shape', self.init)!r}"
            )
        if not np.all(np.isfinite(W)):
            raise ValueError("init must contain only finite values")
        return np.broadcast_to(W, (self.n_heads, d, head_dim)).copy()

    # ------------------------------------------------------------------ fitting

    def _standardise(self, X, sample_weight):
        d = X.shape[1]
        if not self.standardize:
            return np.zeros(d), np.ones(d)
        mean = np.average(X, axis=0, weights=sample_weight)
        std = np.sqrt(np.average((X - mean) ** 2, axis=0, weights=sample_weight))
        scale = np.max(np.abs(X), axis=0)
        return mean, np.where(std > 1e-12 * np.maximum(scale, 1e-300), std, 1.0)

    def _temperatures(self, head_dim):
        if self.scale in ("sqrt", "learned"):
            value = np.sqrt(head_dim)
        elif self.scale == "none":
            value = 1.0
        else:
            value = float(self.scale)
        return np.full(self.n_heads, value)

    def _fit_kernel(self, X, Y, sample_weight):
        n, d = X.shape
        t = Y.shape[1]
        head_dim = d if self.head_dim is None else self.head_dim
        self._rng = check_random_state(self.random_state)
        x_mean, x_scale = self._standardise(X, sample_weight)
        Z = (X - x_mean) / x_scale
        groups = duplicate_groups(X)
        learn_tau = self.scale == "learned"
        layout = Layout(self.n_heads, d, head_dim, t, self.tie_qk, learn_tau)
        tau = self._temperatures(head_dim)
        objective = LeaveOneOutObjective(
            Z, self._values, sample_weight, groups, layout, self.similarity, tau, self.alpha
        )
        train, validation = self._split(groups)
        probe = sample_groups(groups, self._rng)
        theta = self._initial_theta(objective, layout, d, head_dim, tau, probe, sample_weight)
        if self.max_iter > 0:
            if len(objective.valid_queries(train, train)) == 0:
                raise ValueError(
                    "AttentionRegressor learns its kernel by leave-one-out and needs at least "
                    f"2 distinct training inputs; got {n} sample(s) with 1 distinct input. "
                    "Use max_iter=0 to keep the initial kernel."
                )
            query, key, log_tau, _, _ = layout.unpack(theta)
            warn_if_saturated(objective, query, key, self._tau(log_tau, tau), probe)
            trainer = Trainer(self, objective, train, validation)
            theta, n_iter = trainer.run(theta)
            self.loss_curve_ = trainer.loss_curve
            if validation is not None:
                self.validation_scores_ = trainer.validation_scores
        else:
            n_iter = 0
            self.loss_curve_ = [float(objective.loss(theta, train, train))]
        del self._rng
        self._set_kernel(layout, theta, tau, x_mean, x_scale, Z, sample_weight, n_iter)

    def _tau(self, log_tau, tau):
        return np.exp(log_tau) if log_tau is not None else tau

    def _split(self, groups):
        n = len(groups)
        if not self.early_stopping:
            return np.arange(n), None
        n_groups = groups.max() + 1
        n_val = int(np.ceil(self.validation_fraction * n_groups))
        if n_groups - n_val < 2:
            raise ValueError(
                f"early_stopping needs at least 3 distinct training inputs; got {n_groups}"
            )
        held = np.zeros(n_groups, dtype=bool)
        held[self._rng.choice(n_groups, n_val, replace=False)] = True
        return np.flatnonzero(~held[groups]), np.flatnonzero(held[groups])

    def _initial_theta(self, objective, layout, d, head_dim, tau, probe, sample_weight):
        t = layout.n_outputs
        previous = getattr(self, "query_weights_", None)
        # The previous bias in centred units: the new data may have another mean.
        previous_bias = getattr(self, "_centred_b", None)
        if (
            self.warm_start
            and previous is not None
            and previous_bias is not None
            and previous.shape == layout.shape
            and self.head_bias_.shape == (t,)
        ):
            log_tau = np.log(self.temperature_)
            return layout.pack(
                self.query_weights_, self.key_weights_, log_tau, self.head_weights_, previous_bias
            )
        if isinstance(self.init, str):
            W = initial_projections(
                self.init, objective.Z, sample_weight, self.n_heads, head_dim, self._rng
            )
            W, _ = scale_to_unit_variance(objective, W, W, tau, probe)
        else:
            W = self._user_init(d, head_dim)
        a = np.full(self.n_heads, 1.0 / self.n_heads)
        return layout.pack(W, W, np.log(tau), a, np.zeros(t))

    def _set_kernel(self, layout, theta, tau, x_mean, x_scale, Z, sample_weight, n_iter):
        query, key, log_tau, a, b = layout.unpack(theta)
        self.x_mean_ = x_mean
        self.x_scale_ = x_scale
        self.query_weights_ = query.copy()
        self.key_weights_ = key.copy()
        self.temperature_ = self._tau(log_tau, tau).copy()
        self.head_weights_ = a.copy()
        # b is in centred target units; head_bias_ is in the targets' own units.
        self.head_bias_ = b + (1.0 - a.sum()) * self._y_offset
        self._centred_b = b.copy()
        self.n_iter_ = n_iter
        self._cache_keys(Z)

    def _cache_keys(self, Z):
        """Per head: keys divided by τ and the key bias ``log s_i`` (−½‖k‖²/τ for Gaussian)."""
        self._keys = []
        self._key_bias = []
        for h in range(len(self.temperature_)):
            K, _ = project(Z, self.key_weights_[h], self.similarity)
            self._keys.append(K / self.temperature_[h])
            bias = key_bias(K, self.similarity, self.temperature_[h])
            self._key_bias.append(bias + self._log_sample_weight)
