r"""The leave-one-out objective of :class:`~kernattn.AttentionRegressor` and its gradient.

For standardised inputs :math:`z_i`, head :math:`h` projects queries and keys,
:math:`q_i = z_i W_q^h`, :math:`k_j = z_j W_k^h`, and makes the logits

- ``"dot"``: :math:`\ell_{ij} = q_i^\top k_j / \tau_h`,
- ``"cosine"``: :math:`\ell_{ij} = \hat q_i^\top \hat k_j / \tau_h` with
  :math:`\hat u = u / \sqrt{\|u\|^2 + \epsilon}`,
- ``"gaussian"``: :math:`\ell_{ij} = -\tfrac12\|q_i - k_j\|^2 / \tau_h`, computed as
  :math:`(q_i^\top k_j - \tfrac12\|k_j\|^2)/\tau_h` (the query-only term cancels in the softmax),

plus :math:`\log s_j` for the sample weights. The leave-one-out estimate of head :math:`h`
at training point :math:`i` is :math:`f^h_i = \sum_j w^h_{ij} y_j` with the softmax taken over
the keys :math:`j` whose input differs from :math:`x_i` (the query's own key and its exact
duplicates are left out: otherwise a sharp kernel copies each target from itself, and
repeated rows would not act as integer weights). The heads are mixed affinely,
:math:`\hat y_i = \sum_h a_h f^h_i + b`, and the objective is

.. math::

    L = \frac{1}{\sum_i s_i} \Big(\frac{1}{V}\sum_i s_i \|\hat y_i - y_i\|^2
        + \alpha \sum \|W\|_F^2\Big),

with :math:`V` the weighted variance of the targets: the data term reads as a
leave-one-out :math:`1 - R^2`, so ``alpha`` and ``tol`` do not depend on the targets' units,
and ``alpha`` weighs the penalty against the sum of squared errors (as in ridge
regression), so the penalty matters less as the sample grows. With
:math:`r_i = \hat y_i - y_i`, its gradient with respect to the logits is

.. math::

    \frac{\partial L}{\partial \ell^h_{ij}} = \frac{2 s_i a_h}{V \sum s}\,
        w^h_{ij} \langle r_i, y_j - f^h_i\rangle =: G^h_{ij},

and the chain rule through the (bi)linear logits gives the projections' gradients as
matrix products with :math:`G`. Everything is computed in query blocks bounded by
scikit-learn's ``working_memory``: no (n × n) matrix is formed for large n.

References
----------
.. [1] K. Q. Weinberger, G. Tesauro, "Metric Learning for Kernel Regression", AISTATS 2007.
"""

import numpy as np

from kernattn._blocks import iter_query_blocks

# Added to ‖u‖² before the square root of the cosine normalisation: a zero projection then
# has a zero (not NaN) direction and the normalisation stays differentiable.
_COSINE_EPS = 1e-12


def project(Z, W, similarity):
    """Projections ``Z @ W``, normalised to unit length for ``"cosine"``.

    Returns the projections and, for ``"cosine"``, the norms they were divided by.
    """
    P = Z @ W
    if similarity != "cosine":
        return P, None
    norm = np.sqrt(np.einsum("ij,ij->i", P, P) + _COSINE_EPS)
    return P / norm[:, None], norm


def key_bias(K, similarity, tau):
    """The key-only logit term: ``-½‖k‖²/τ`` for ``"gaussian"``, 0 otherwise."""
    if similarity == "gaussian":
        return -0.5 * np.einsum("ij,ij->i", K, K) / tau
    return np.zeros(len(K))


class Layout:
    """Where each parameter lives in the flat vector the optimisers see.

    The vector holds ``W_q`` (n_heads, n_features, head_dim), ``W_k`` (unless tied),
    ``log τ`` (n_heads, only for a learned temperature), the head weights ``a`` (n_heads)
    and the head bias ``b`` (n_outputs, in centred target units).
    """

    def __init__(self, n_heads, n_features, head_dim, n_outputs, tie_qk, learn_tau):
        self.shape = (n_heads, n_features, head_dim)
        self.n_heads = n_heads
        self.n_outputs = n_outputs
        self.tie_qk = tie_qk
        self.learn_tau = learn_tau
        w = n_heads * n_features * head_dim
        sizes = [("query", w), ("key", 0 if tie_qk else w)]
        sizes += [("log_tau", n_heads if learn_tau else 0), ("a", n_heads), ("b", n_outputs)]
        self.slices = {}
        start = 0
        for name, size in sizes:
            self.slices[name] = slice(start, start + size)
            start += size
        self.size = start

    def pack(self, query, key, log_tau, a, b):
        theta = np.empty(self.size)
        theta[self.slices["query"]] = np.ravel(query)
        if not self.tie_qk:
            theta[self.slices["key"]] = np.ravel(key)
        if self.learn_tau:
            theta[self.slices["log_tau"]] = log_tau
        theta[self.slices["a"]] = a
        theta[self.slices["b"]] = b
        return theta

    def unpack(self, theta):
        query = theta[self.slices["query"]].reshape(self.shape)
        key = query if self.tie_qk else theta[self.slices["key"]].reshape(self.shape)
        log_tau = theta[self.slices["log_tau"]] if self.learn_tau else None
        return query, key, log_tau, theta[self.slices["a"]], theta[self.slices["b"]]

    def penalised(self):
        """Mask of the entries the L2 penalty applies to (the projections)."""
        mask = np.zeros(self.size, dtype=bool)
        mask[self.slices["query"]] = True
        mask[self.slices["key"]] = True
        return mask


class LeaveOneOutObjective:
    """Leave-one-out loss and gradient of the multi-head attention regressor.

    Parameters
    ----------
    Z : ndarray of shape (n, d)
        Standardised inputs.
    Y : ndarray of shape (n, t)
        Targets, centred by their weighted mean.
    sample_weight : ndarray of shape (n,)
        Positive.
    groups : ndarray of shape (n,)
        Duplicate-group id of every row (identical inputs share an id).
    layout : Layout
    similarity : {"dot", "cosine", "gaussian"}
    tau : ndarray of shape (n_heads,)
        The temperatures when they are not learned.
    alpha : float
        L2 penalty on the projections (against the sum of squared errors / V).
    """

    def __init__(self, Z, Y, sample_weight, groups, layout, similarity, tau, alpha):
        self.Z = Z
        self.Y = Y
        self.sw = sample_weight
        self.log_sw = np.log(sample_weight / sample_weight.max())
        self.groups = groups
        self.layout = layout
        self.similarity = similarity
        self.tau = tau
        self.alpha = alpha / sample_weight.sum()
        variance = np.sum(sample_weight @ Y**2) / sample_weight.sum()
        self.variance = variance if variance > 0 else 1.0
        self.penalised = layout.penalised()

    def valid_queries(self, queries, keys):
        """The queries that have at least one key outside their duplicate group."""
        in_keys = np.bincount(self.groups[keys], minlength=self.groups.max() + 1)
        return queries[in_keys[self.groups[queries]] < len(keys)]

    def _temperatures(self, log_tau):
        return np.exp(log_tau) if log_tau is not None else self.tau

    def _head_weights(self, Pq, Pk, bias, tau, rows, keys):
        logits = Pq[rows] @ Pk[keys].T
        logits /= tau
        logits += bias[keys] + self.log_sw[keys]
        logits[self.groups[rows][:, None] == self.groups[keys][None, :]] = -np.inf
        logits -= logits.max(axis=1, keepdims=True)
        w = np.exp(logits, out=logits)
        w /= w.sum(axis=1, keepdims=True)
        return w

    def _forward(self, theta):
        query, key, log_tau, a, b = self.layout.unpack(theta)
        tau = self._temperatures(log_tau)
        heads = []
        for h in range(self.layout.n_heads):
            Pq, nq = project(self.Z, query[h], self.similarity)
            Pk, nk = (Pq, nq) if self.layout.tie_qk else project(self.Z, key[h], self.similarity)
            heads.append((Pq, nq, Pk, nk, key_bias(Pk, self.similarity, tau[h])))
        return heads, tau, a, b

    def head_estimates(self, theta, queries=None, keys=None):
        """Leave-one-out estimates ``f^h_i`` of every head, shape (n_queries, n_heads, t).

        Queries without any key outside their duplicate group get ``nan``.
        """
        n = len(self.Z)
        queries = np.arange(n) if queries is None else queries
        keys = np.arange(n) if keys is None else keys
        heads, tau, _, _ = self._forward(theta)
        out = np.full((len(queries), self.layout.n_heads, self.Y.shape[1]), np.nan)
        valid = np.isin(queries, self.valid_queries(queries, keys))
        index = np.flatnonzero(valid)
        for block in iter_query_blocks(len(index), len(keys), n_arrays=3, cache=False):
            rows = queries[index[block]]
            for h, (Pq, _, Pk, _, bias) in enumerate(heads):
                w = self._head_weights(Pq, Pk, bias, tau[h], rows, keys)
                out[index[block], h] = w @ self.Y[keys]
        return out

    def loss(self, theta, queries=None, keys=None):
        return self.loss_and_grad(theta, queries, keys, gradient=False)[0]

    def loss_and_grad(self, theta, queries=None, keys=None, gradient=True):
        """Objective and its gradient at ``theta`` (queries against keys, both row indices).

        The data term is averaged over the queries that have a key outside their
        duplicate group; with none, it is 0.
        """
        n = len(self.Z)
        queries = np.arange(n) if queries is None else queries
        keys = np.arange(n) if keys is None else keys
        layout = self.layout
        H = layout.n_heads
        heads, tau, a, b = self._forward(theta)
        queries = self.valid_queries(queries, keys)
        total = self.sw[queries].sum()
        Yk = self.Y[keys]
        gQ = [np.zeros_like(head[0]) for head in heads]
        gK = [np.zeros_like(head[2]) for head in heads]
        g_log_tau = np.zeros(H)
        g_a = np.zeros(H)
        g_b = np.zeros(layout.n_outputs)
        data = 0.0
        for block in iter_query_blocks(len(queries), len(keys), n_arrays=H + 3, cache=False):
            rows = queries[block]
            weights = [
                self._head_weights(Pq, Pk, bias, tau[h], rows, keys)
                for h, (Pq, _, Pk, _, bias) in enumerate(heads)
            ]
            estimates = [w @ Yk for w in weights]
            residual = b - self.Y[rows]
            for h in range(H):
                residual += a[h] * estimates[h]
            data += self.sw[rows] @ np.einsum("ij,ij->i", residual, residual)
            if not gradient:
                continue
            coef = 2.0 * self.sw[rows] / (self.variance * total)
            weighted = residual * coef[:, None]
            g_b += weighted.sum(axis=0)
            projected = weighted @ Yk.T
            for h, (Pq, _, Pk, _, _) in enumerate(heads):
                g_a[h] += np.sum(weighted * estimates[h])
                # G_ij = coef_i a_h w_ij <r_i, y_j − f_i>.
                G = projected - np.einsum("ij,ij->i", weighted, estimates[h])[:, None]
                G *= weights[h]
                G *= a[h] / tau[h]
                GK = G @ Pk[keys]
                gQ[h][rows] += GK
                key_grad = G.T @ Pq[rows]
                g_log_tau[h] -= np.einsum("ij,ij->", Pq[rows], GK)
                if self.similarity == "gaussian":
                    column = G.sum(axis=0)
                    key_grad -= column[:, None] * Pk[keys]
                    g_log_tau[h] += 0.5 * column @ np.einsum("ij,ij->i", Pk[keys], Pk[keys])
                gK[h][keys] += key_grad
        scale = self.variance * total if total > 0 else 1.0
        penalty = self.alpha * np.sum(theta[self.penalised] ** 2)
        if not gradient:
            return data / scale + penalty, None
        query, key, log_tau, _, _ = layout.unpack(theta)
        g_query = np.empty(layout.shape)
        g_key = np.empty(layout.shape)
        for h, (Pq, nq, Pk, nk, _) in enumerate(heads):
            g_query[h] = self.Z.T @ self._unnormalise(gQ[h], Pq, nq)
            g_key[h] = self.Z.T @ self._unnormalise(gK[h], Pk, nk)
        if layout.tie_qk:
            g_query += g_key
        grad = layout.pack(g_query, g_key, g_log_tau, g_a, g_b)
        if total == 0:
            grad[:] = 0.0
        grad[self.penalised] += 2.0 * self.alpha * theta[self.penalised]
        return data / scale + penalty, grad

    def _unnormalise(self, g, P, norm):
        """Back through ``u = p/√(‖p‖² + ε)``: ``∂u/∂p = (I − u uᵀ)/√(‖p‖² + ε)``."""
        if norm is None:
            return g
        return (g - np.einsum("ij,ij->i", g, P)[:, None] * P) / norm[:, None]
