"""How :class:`~kernattn.AttentionRegressor` starts and runs its optimisers.

Initial projections scaled to unit logit variance, and the two optimisers over the
leave-one-out objective of :mod:`kernattn._learned_objective`: full-batch L-BFGS (scipy) and
Adam over mini-batches of queries. Both record a loss per iteration or epoch, print progress
when asked and stop early on a held-out validation loss.
"""

import warnings

import numpy as np
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning

from kernattn._learned_objective import key_bias, project

# At most this many duplicate groups are used to measure the initial logit variance.
_INIT_SAMPLE = 512
# The softmax counts as saturated at the start when the mean largest weight exceeds this.
_SATURATED = 0.99
# Adam's moment decay rates and denominator guard (Kingma & Ba, 2015).
_BETA1, _BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8


def within_row_logits(objective, query, key, tau, rows):
    """Per head: weighted within-row variance of the logits and mean largest weight.

    Queries are ``rows``; keys are all rows outside the query's duplicate group (as in the
    leave-one-out loss), weighted by their sample weights, so repeated rows and integer
    weights give the same figures.
    """
    Z, sw, groups, similarity = objective.Z, objective.sw, objective.groups, objective.similarity
    variances, top = [], []
    for h in range(len(tau)):
        Pq, _ = project(Z[rows], query[h], similarity)
        Pk, _ = project(Z, key[h], similarity)
        logits = Pq @ Pk.T / tau[h] + key_bias(Pk, similarity, tau[h])
        allowed = groups[rows][:, None] != groups[None, :]
        kw = allowed * sw
        norm = kw.sum(axis=1)
        ok = norm > 0
        mean = (kw * logits).sum(axis=1) / np.where(ok, norm, 1.0)
        var = (kw * (logits - mean[:, None]) ** 2).sum(axis=1) / np.where(ok, norm, 1.0)
        variances.append(np.average(var[ok], weights=sw[rows][ok]) if np.any(ok) else 0.0)
        shifted = np.where(allowed, logits + objective.log_sw, -np.inf)
        shifted[~ok] = 0.0
        shifted -= shifted.max(axis=1, keepdims=True)
        w = np.exp(shifted)
        w /= w.sum(axis=1, keepdims=True)
        top.append(np.average(w.max(axis=1)[ok], weights=sw[rows][ok]) if np.any(ok) else 0.0)
    return np.array(variances), np.array(top)


def sample_groups(groups, rng):
    """Rows of at most ``_INIT_SAMPLE`` randomly chosen duplicate groups (all of them if fewer)."""
    n_groups = groups.max() + 1
    if n_groups <= _INIT_SAMPLE:
        return np.arange(len(groups))
    chosen = np.zeros(n_groups, dtype=bool)
    chosen[rng.choice(n_groups, _INIT_SAMPLE, replace=False)] = True
    return np.flatnonzero(chosen[groups])


def initial_projections(init, Z, sample_weight, n_heads, head_dim, rng):
    """Unscaled initial projections (n_heads, d, head_dim) for ``"identity"``, ``"pca"``,
    ``"random"``. Heads after the first get a random perturbation: identical heads would
    receive identical gradients and never become different."""
    d = Z.shape[1]
    if init == "random":
        return rng.standard_normal((n_heads, d, head_dim)) / np.sqrt(d)
    if init == "identity":
        base = np.eye(d, head_dim)
    else:
        mean = np.average(Z, axis=0, weights=sample_weight)
        centred = Z - mean
        covariance = (centred * sample_weight[:, None]).T @ centred / sample_weight.sum()
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
    if n_heads > 1:
        W[1:] += 0.5 * rng.standard_normal((n_heads - 1, d, head_dim)) / np.sqrt(d)
    return W


def scale_to_unit_variance(objective, query, key, tau, rows):
    """Rescale each head's projections so its logits have unit within-row variance.

    Dot-product and Gaussian logits are quadratic in a common factor of ``W_q, W_k``, so
    the factor is ``var^(-1/4)``; cosine logits do not depend on it.
    """
    if objective.similarity == "cosine":
        return query, key
    variance, _ = within_row_logits(objective, query, key, tau, rows)
    factor = np.where(variance > 0, np.maximum(variance, 1e-300) ** -0.25, 1.0)
    return query * factor[:, None, None], key * factor[:, None, None]


def warn_if_saturated(objective, query, key, tau, rows):
    _, top = within_row_logits(objective, query, key, tau, rows)
    if np.any(top > _SATURATED):
        heads = np.flatnonzero(top > _SATURATED).tolist()
        warnings.warn(
            f"the softmax of head(s) {heads} is saturated at the start (mean largest weight "
            f"{top.max():.4f}): each query attends to about one key, so the gradient is "
            "close to 0 and training barely moves. Scale the initial projections down or use "
            "a larger temperature (scale).",
            UserWarning,
            stacklevel=4,
        )


class Trainer:
    """Runs one optimiser over the objective and records ``loss_curve_`` and friends.

    ``train`` and ``validation`` are row indices; validation queries attend to the
    training keys only. ``n_iter_no_change`` iterations without an improvement of at least
    ``tol`` (of the validation loss when there is one, else of the training loss) stop the
    run; the best parameters seen on the validation set are kept.
    """

    def __init__(self, estimator, objective, train, validation):
        self.est = estimator
        self.objective = objective
        self.train = train
        self.validation = validation
        self.loss_curve = []
        self.validation_scores = []
        self.best_theta = None
        self.best_score = np.inf
        self.stall = 0
        self.converged = False

    def _record(self, theta, loss, grad_norm, iteration):
        self.loss_curve.append(float(loss))
        if self.validation is not None:
            score = self.objective.loss(theta, self.validation, self.train)
            self.validation_scores.append(float(score))
        else:
            score = loss
        if self.est.verbose:
            extra = "" if self.validation is None else f", validation loss = {score:.6f}"
            print(
                f"Iteration {iteration}, loss = {loss:.6f}, gradient norm = {grad_norm:.3e}"
                + extra
            )
        if score < self.best_score - self.est.tol * max(abs(self.best_score), 1.0):
            self.stall = 0
        else:
            self.stall += 1
        if score < self.best_score:
            self.best_score = score
            self.best_theta = theta.copy()
        return self.stall >= self.est.n_iter_no_change

    def run(self, theta):
        if self.est.optimizer == "lbfgs":
            theta, n_iter = self._lbfgs(theta)
        else:
            theta, n_iter = self._adam(theta)
        if self.validation is not None and self.best_theta is not None:
            theta = self.best_theta
        if not self.converged:
            warnings.warn(
                f"AttentionRegressor's {self.est.optimizer} optimiser stopped at max_iter="
                f"{self.est.max_iter} before converging; increase max_iter or tol.",
                ConvergenceWarning,
                stacklevel=4,
            )
        return theta, n_iter

    def _lbfgs(self, theta):
        last = {}

        def fun(t):
            loss, grad = self.objective.loss_and_grad(t, self.train, self.train)
            last["x"], last["loss"], last["grad"] = t.copy(), loss, grad
            return loss, grad

        def callback(intermediate_result):
            t = intermediate_result.x
            if not np.array_equal(t, last.get("x", None)):
                fun(t)
            stop = self._record(
                t, last["loss"], np.linalg.norm(last["grad"]), len(self.loss_curve) + 1
            )
            if stop and self.validation is not None:
                self.converged = True
                raise StopIteration

        result = minimize(
            fun,
            theta,
            jac=True,
            method="L-BFGS-B",
            callback=callback,
            options={
                "maxiter": self.est.max_iter,
                "ftol": self.est.tol,
                "gtol": 1e-8,
                "maxfun": 3 * self.est.max_iter + 20,
            },
        )
        if result.status == 0 or (result.status == 99 and self.converged):
            self.converged = True
        return result.x, int(result.nit)

    def _adam(self, theta):
        """Adam (Kingma & Ba, 2015) over mini-batches of duplicate groups of queries.

        Batches are made of whole duplicate groups, drawn in a random order each epoch, so
        integer sample weights and repeated rows give the same batches. With
        ``key_subsample``, each step's queries attend to a random subset of that many
        groups of keys (plus nothing of their own group).
        """
        est, objective = self.est, self.objective
        rng = est._rng
        groups = objective.groups[self.train]
        ids, local = np.unique(groups, return_inverse=True)
        m = np.zeros_like(theta)
        v = np.zeros_like(theta)
        step = 0
        n_iter = 0
        for epoch in range(est.max_iter):
            order = rng.permutation(len(ids))
            losses, weights, norms = [], [], []
            for batch in _batches(len(ids), est.batch_size):
                chosen = order[batch]
                in_batch = np.zeros(len(ids), dtype=bool)
                in_batch[chosen] = True
                queries = self.train[in_batch[local]]
                keys = self.train
                if est.key_subsample is not None and est.key_subsample < len(ids):
                    kept = np.zeros(len(ids), dtype=bool)
                    kept[rng.choice(len(ids), est.key_subsample, replace=False)] = True
                    keys = self.train[kept[local]]
                loss, grad = objective.loss_and_grad(theta, queries, keys)
                step += 1
                m = _BETA1 * m + (1 - _BETA1) * grad
                v = _BETA2 * v + (1 - _BETA2) * grad**2
                m_hat = m / (1 - _BETA1**step)
                v_hat = v / (1 - _BETA2**step)
                theta = theta - est.learning_rate * m_hat / (np.sqrt(v_hat) + _ADAM_EPS)
                weight = objective.sw[queries].sum()
                losses.append(loss)
                weights.append(weight)
                norms.append(np.linalg.norm(grad))
            n_iter = epoch + 1
            epoch_loss = np.average(losses, weights=weights) if sum(weights) > 0 else 0.0
            if self._record(theta, epoch_loss, float(np.mean(norms)), n_iter):
                self.converged = True
                break
        return theta, n_iter


def _batches(n, size):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))
