"""How :class:`~kernattn.AttentionRegressor` starts and runs its optimizers.

Initial projections scaled to unit logit variance, the check that the softmax is not
saturated at the start, the split of a validation set, and the two optimizers over the
leave-one-out objective of :mod:`kernattn.learned._objective`: full-batch L-BFGS (scipy) and
Adam over mini-batches of queries. Both record a loss per iteration or epoch, print progress
when asked and stop early on a held-out validation loss. Everything here takes plain arrays
and settings.
"""

import time
import warnings

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from sklearn.exceptions import ConvergenceWarning

from kernattn._core.blocks import single_threaded_blas

# At most this many duplicate groups are used to measure the initial logit variance.
_INIT_SAMPLE = 512
# The softmax counts as saturated at the start when the mean largest weight exceeds this.
_SATURATED = 0.99
# Queries (duplicate groups) whose leave-one-out loss against every key sets the final width.
_CALIBRATION_QUERIES = 2048
# Adam's moment decay rates and denominator guard (Kingma & Ba, 2015).
_BETA1, _BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8


def sample_groups(groups, rng):
    """Rows of at most ``_INIT_SAMPLE`` randomly chosen duplicate groups (all rows if fewer).

    Parameters
    ----------
    groups : DuplicateGroups
    rng : numpy.random.RandomState
    """
    if groups.n_groups <= _INIT_SAMPLE:
        return np.arange(len(groups.ids))
    chosen = np.zeros(groups.n_groups, dtype=bool)
    chosen[rng.choice(groups.n_groups, _INIT_SAMPLE, replace=False)] = True
    return np.flatnonzero(chosen[groups.ids])


def validation_split(groups, fraction, rng):
    """Training and validation rows, holding out ``fraction`` of the duplicate groups whole
    (so that no validation query has a twin among the training keys)."""
    n_val = int(np.ceil(fraction * groups.n_groups))
    if groups.n_groups - n_val < 2:
        raise ValueError(
            "early_stopping needs at least 3 distinct training inputs; got "
            f"{len(groups.ids)} sample(s) with {groups.n_groups} distinct input(s)"
        )
    held = np.zeros(groups.n_groups, dtype=bool)
    held[rng.choice(groups.n_groups, n_val, replace=False)] = True
    return np.flatnonzero(~held[groups.ids]), np.flatnonzero(held[groups.ids])


def initial_projections(init, Z, sample_weight, n_heads, head_dim, rng, base=None):
    """Unscaled initial projections (n_heads, d, head_dim) for ``"identity"``, ``"pca"`` or
    ``"random"``, or from the first head's projection ``base`` (``init="loo"``).

    Heads after the first start elsewhere: identical heads would receive identical
    gradients and never become different. Head ``h ≥ 1`` starts from
    :math:`D_h Q_h B`, with :math:`B` the first head's projection, :math:`Q_h` a random
    rotation (another subspace when ``head_dim < n_features``) and :math:`D_h` a random
    positive diagonal (log-normal, σ = 0.5) that weighs the features differently (a
    rotation alone would leave a Gaussian head with a tied, square projection unchanged).
    """
    d = Z.shape[1]
    if init == "random":
        return rng.standard_normal((n_heads, d, head_dim)) / np.sqrt(d)
    if base is not None:
        base = np.asarray(base, dtype=float)
    elif init == "identity":
        base = np.eye(d, head_dim)
    else:
        mean = np.average(Z, axis=0, weights=sample_weight)
        centered = Z - mean
        covariance = (centered * sample_weight[:, None]).T @ centered / sample_weight.sum()
        eigenvalues, eigenvectors = np.linalg.eigh(covariance)
        order = np.argsort(eigenvalues)[::-1]
        base = np.zeros((d, head_dim))
        k = min(d, head_dim)
        base[:, :k] = eigenvectors[:, order[:k]]
        # Directions without variance (d > n) are an arbitrary basis of the null space, and
        # project every training input to the same value: drop them.
        base[:, :k] *= eigenvalues[order[:k]] > 1e-10 * max(eigenvalues.max(), 1e-300)
        # A deterministic sign (the largest entry positive): eigh's sign is arbitrary.
        signs = np.sign(base[np.argmax(np.abs(base), axis=0), np.arange(head_dim)])
        base *= np.where(signs == 0, 1.0, signs)
    W = np.repeat(base[None], n_heads, axis=0)
    for h in range(1, n_heads):
        Q, R = np.linalg.qr(rng.standard_normal((d, d)))
        Q *= np.where(np.diag(R) < 0, -1.0, 1.0)  # a rotation drawn uniformly (Haar)
        D = np.exp(0.5 * rng.standard_normal(d))
        W[h] = D[:, None] * (Q @ base)
    return W


def scale_to_unit_variance(objective, W, scale, rows):
    """Rescale each head's projection so that its logits have unit within-row variance.

    Dot-product and Gaussian logits are quadratic in a common factor of ``W_q = W_k = W``,
    so the factor is ``var^(-1/4)``; cosine logits do not depend on it.
    """
    if objective.similarity == "cosine":
        return W
    variance, _ = objective.within_row_logits(W, W, scale, rows)
    factor = np.where(variance > 0, np.maximum(variance, 1e-300) ** -0.25, 1.0)
    return W * factor[:, None, None]


def warn_if_saturated(objective, query, key, scale, rows):
    """Warn when a head's softmax starts close to one-hot (its gradient then vanishes)."""
    _, top = objective.within_row_logits(query, key, scale, rows)
    if np.any(top > _SATURATED):
        heads = np.flatnonzero(top > _SATURATED).tolist()
        warnings.warn(
            f"the softmax of head(s) {heads} is saturated at the start (mean largest weight "
            f"{top.max():.4f}): each query attends to about one key, so the gradient is "
            "close to 0 and training barely moves. Scale the initial projections down or use "
            "a smaller scale.",
            UserWarning,
            stacklevel=7,
        )


class Monitor:
    """Records the losses of a run, prints them, and decides when to stop.

    The run stops when the loss it watches (the validation loss when there is one, else
    the training loss) has not improved by at least ``tol`` (relative) over the last
    ``n_iter_no_change`` iterations: the lowest loss of those iterations is above
    ``(1 − tol)`` times the lowest one before them. With ``noisy`` losses (Adam's epoch
    losses, averages over mini-batches that change from one epoch to the next) the mean of
    the last ``n_iter_no_change`` losses is compared with the mean of the ones before them
    instead: a lowest loss keeps falling by chance long after the mean stopped falling. The
    parameters with the lowest validation loss seen are kept.

    Parameters
    ----------
    validation_loss : callable or None
        ``theta → loss`` of the held-out queries.
    tol : float
    n_iter_no_change : int
    verbose : int
    max_iter : int, optional
        Printed with each iteration's number.
    noisy : bool, default=False
    """

    def __init__(
        self, validation_loss, tol, n_iter_no_change, verbose, max_iter=None, noisy=False
    ):
        self.noisy = noisy
        self.validation_loss = validation_loss
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.verbose = verbose
        self.max_iter = max_iter
        self.loss_curve = []
        self.validation_scores = []
        self.best_theta = None
        self.best_score = np.inf
        self._scores = []
        self._phase_start = 0
        self._start = time.perf_counter()

    def new_phase(self):
        """The stopping rule waits ``n_iter_no_change`` iterations from here."""
        self._phase_start = len(self._scores)

    def record(self, theta, loss, grad_norm):
        """Record one iteration; ``True`` when the run should stop."""
        self.loss_curve.append(float(loss))
        if self.validation_loss is not None:
            score = float(self.validation_loss(theta))
            self.validation_scores.append(score)
        else:
            score = float(loss)
        self._scores.append(score)
        if self.verbose:
            extra = "" if self.validation_loss is None else f", validation loss = {score:.6f}"
            of = "" if self.max_iter is None else f"/{self.max_iter}"
            print(
                f"Iteration {len(self.loss_curve)}{of}, loss = {loss:.6f}, "
                f"gradient norm = {grad_norm:.3e}{extra}, "
                f"elapsed = {time.perf_counter() - self._start:.1f} s",
                flush=True,
            )
        if score < self.best_score:
            self.best_score = score
            self.best_theta = theta.copy()
        return self.stalled()

    def stalled(self):
        """Whether the last ``n_iter_no_change`` iterations improved by less than ``tol``."""
        n = self.n_iter_no_change
        if len(self._scores) - self._phase_start < n or len(self._scores) <= n:
            return False
        if self.noisy:
            if len(self._scores) < 2 * n:
                return False
            before = float(np.mean(self._scores[-2 * n : -n]))
            recent = float(np.mean(self._scores[-n:]))
        else:
            before = min(self._scores[:-n])
            recent = min(self._scores[-n:])
        return not (before - recent > self.tol * abs(before))


def run_lbfgs(loss_and_grad, theta, monitor, *, max_iter):
    """Full-batch L-BFGS (scipy's L-BFGS-B without bounds) from ``theta``.

    The monitor's stopping rule ends the run; L-BFGS's own tests (a relative step of the
    loss below rounding, a vanishing gradient) end it too. Returns the last parameters, the
    number of iterations and whether the run converged.
    """
    last = {}

    def fun(t):
        loss, grad = loss_and_grad(t)
        last["x"], last["loss"], last["grad"] = t.copy(), loss, grad
        return loss, grad

    stopped = []

    def callback(intermediate_result):
        t = intermediate_result.x
        if not np.array_equal(t, last.get("x", None)):
            fun(t)
        if monitor.record(t, last["loss"], np.linalg.norm(last["grad"])):
            stopped.append(True)
            raise StopIteration

    result = minimize(
        fun,
        theta,
        jac=True,
        method="L-BFGS-B",
        callback=callback,
        # One step's relative decrease is no test of convergence (L-BFGS takes small steps
        # between large ones): only rounding ends a run here, the monitor's window does.
        options={"maxiter": max_iter, "ftol": 1e-15, "gtol": 1e-10, "maxfun": 3 * max_iter + 20},
    )
    converged = result.status == 0 or (result.status == 99 and bool(stopped))
    return result.x, int(result.nit), converged


def run_adam(
    loss_and_grad,
    theta,
    monitor,
    *,
    groups,
    train,
    sample_weight,
    max_iter,
    learning_rate,
    batch_size,
    key_subsample,
    rng,
    steps_per_iteration=None,
):
    """Adam (Kingma & Ba, 2015) over mini-batches of duplicate groups of queries.

    Batches are made of whole duplicate groups, drawn in a random order each epoch, so
    integer sample weights and repeated rows give the same batches. With
    ``key_subsample``, each step's queries attend to a random subset of that many groups of
    keys (nothing of their own group). ``loss_and_grad(theta, queries, keys)`` is the
    objective on row indices. An iteration (one loss recorded, one test of the stopping
    rule) is an epoch, or ``steps_per_iteration`` steps (epochs then run on across
    iterations): with many rows an epoch is long, and training may end within the first.
    Returns the last parameters, the number of iterations and whether the monitor stopped
    the run.
    """
    ids, local = np.unique(groups.ids[train], return_inverse=True)
    n_groups = len(ids)
    steps = steps_per_iteration or -(-n_groups // batch_size)
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    step = 0
    position, order = n_groups, None
    for iteration in range(max_iter):
        losses, weights, norms = [], [], []
        for _ in range(steps):
            if position >= n_groups:
                order = rng.permutation(n_groups)
                position = 0
            in_batch = np.zeros(n_groups, dtype=bool)
            in_batch[order[position : position + batch_size]] = True
            position += batch_size
            queries = train[in_batch[local]]
            keys = train
            if key_subsample is not None and key_subsample < n_groups:
                kept = np.zeros(n_groups, dtype=bool)
                kept[rng.choice(n_groups, key_subsample, replace=False)] = True
                keys = train[kept[local]]
            loss, grad = loss_and_grad(theta, queries, keys)
            step += 1
            m = _BETA1 * m + (1 - _BETA1) * grad
            v = _BETA2 * v + (1 - _BETA2) * grad**2
            m_hat = m / (1 - _BETA1**step)
            v_hat = v / (1 - _BETA2**step)
            theta = theta - learning_rate * m_hat / (np.sqrt(v_hat) + _ADAM_EPS)
            losses.append(loss)
            weights.append(sample_weight[queries].sum())
            norms.append(np.linalg.norm(grad))
        epoch_loss = np.average(losses, weights=weights) if sum(weights) > 0 else 0.0
        if monitor.record(theta, epoch_loss, float(np.mean(norms))):
            return theta, iteration + 1, True
    return theta, max_iter, False


def calibrate_width(objective, theta, projections, train, rng, verbose=0):
    r"""Rescale the projections of a kernel trained against a key subsample to all the keys.

    A kernel fitted with each query attending to m random keys has the width that suits m
    keys; predictions attend to all n, whose denser neighborhoods want a narrower kernel.
    Every projection is multiplied by :math:`\sqrt c` (the logits of a dot-product or
    Gaussian head by :math:`c`), :math:`c` minimizing the leave-one-out loss of
    ``_CALIBRATION_QUERIES`` random training queries against every training key (a
    bounded search over :math:`\log c \in [-1, 3]`; a cost linear in n).

    Parameters
    ----------
    objective : LeaveOneOutObjective
    theta : ndarray
    projections : ndarray of bool
        Mask of the projections' entries in ``theta``.
    train : ndarray of int
        The training rows (queries are drawn from them; all of them are keys).
    rng : numpy.random.RandomState
    verbose : int

    Returns
    -------
    theta : ndarray
    """
    queries = np.sort(rng.choice(train, min(len(train), _CALIBRATION_QUERIES), replace=False))

    def scaled(log_c):
        out = theta.copy()
        out[projections] *= np.exp(0.5 * log_c)
        return out

    def loss(log_c):
        return objective.loss(scaled(log_c), queries, train)

    start = time.perf_counter()
    with single_threaded_blas():
        result = minimize_scalar(
            loss, bounds=(-1.0, 3.0), method="bounded", options={"xatol": 0.05}
        )
        before = loss(0.0)
    if verbose:
        print(
            f"Width for all {len(train)} keys: logits x {np.exp(result.x):.3f}, loss of "
            f"{len(queries)} queries {before:.6f} -> {result.fun:.6f}, "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
    return scaled(result.x) if result.fun < before else theta


def optimize(
    objective,
    theta,
    *,
    optimizer,
    train,
    validation,
    max_iter,
    tol,
    n_iter_no_change,
    learning_rate,
    batch_size,
    key_subsample,
    rng,
    verbose,
    frozen_first=None,
    steps_per_iteration=None,
):
    """Run ``optimizer`` over ``objective`` from ``theta``.

    Training queries attend to the training keys; validation queries (``None``: no early
    stopping) to the training keys too. With a validation set, the parameters with the
    lowest validation loss are returned. ``frozen_first`` (a slice of ``theta``): a first
    phase holds those parameters fixed (their gradient set to 0) until the stopping rule
    ends it, and a second phase trains everything, within the same ``max_iter``.

    Returns
    -------
    theta : ndarray
    n_iter : int
    monitor : Monitor
        Holds ``loss_curve`` and ``validation_scores``.
    """
    validation_loss = None
    if validation is not None:

        def validation_loss(t):
            return objective.loss(t, validation, train)

    noisy = optimizer == "adam" and validation is None
    monitor = Monitor(validation_loss, tol, n_iter_no_change, verbose, max_iter, noisy)
    phases = [None] if frozen_first is None else [frozen_first, None]
    n_iter, converged = 0, True
    # The optimizers' own linear algebra is tiny, and the objective runs its blocks on
    # threads of its own: BLAS threads woken in between spin and take a core from them.
    with single_threaded_blas():
        for frozen in phases:
            if n_iter >= max_iter:
                converged = False
                break
            monitor.new_phase()
            theta, used, converged = _run(
                optimizer,
                _frozen(objective.loss_and_grad, frozen),
                objective,
                theta,
                monitor,
                train=train,
                max_iter=max_iter - n_iter,
                learning_rate=learning_rate,
                batch_size=batch_size,
                key_subsample=key_subsample,
                rng=rng,
                steps_per_iteration=steps_per_iteration,
            )
            n_iter += used
    if validation is not None and monitor.best_theta is not None:
        theta = monitor.best_theta
    if not converged:
        warnings.warn(
            f"AttentionRegressor's {optimizer} optimizer stopped at max_iter={max_iter} "
            "before converging; increase max_iter or tol.",
            ConvergenceWarning,
            stacklevel=7,
        )
    return theta, n_iter, monitor


def _frozen(loss_and_grad, frozen):
    """``loss_and_grad`` with the gradient of the ``frozen`` slice set to 0."""
    if frozen is None:
        return loss_and_grad

    def frozen_loss_and_grad(*args):
        loss, grad = loss_and_grad(*args)
        grad[frozen] = 0.0
        return loss, grad

    return frozen_loss_and_grad


def _run(optimizer, loss_and_grad, objective, theta, monitor, *, train, max_iter, **adam):
    if optimizer == "lbfgs":
        return run_lbfgs(
            lambda t: loss_and_grad(t, train, train),
            theta,
            monitor,
            max_iter=max_iter,
        )
    return run_adam(
        loss_and_grad,
        theta,
        monitor,
        groups=objective.groups,
        train=train,
        sample_weight=objective.sw,
        max_iter=max_iter,
        **adam,
    )
