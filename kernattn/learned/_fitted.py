"""The fitted attributes the learned estimators read from their kernel of attention heads."""


class FittedHeadsMixin:
    """``query_projection_``, ``key_projection_``, ``scale_``, ``head_weights_``,
    ``center_`` and ``input_scale_`` of a fitted kernel of heads
    (:class:`~kernattn._engine.heads.SoftmaxHeads`).

    The estimator says where its kernel is, ``_fitted_kernel(name)`` (raising for an
    attribute ``name`` asked before the fit), and how an array is handed out,
    ``_fitted_array(array)`` (a read-only view or a copy).
    """

    def _fitted_kernel(self, name):
        raise NotImplementedError

    def _fitted_array(self, array):
        raise NotImplementedError

    @property
    def query_projection_(self):
        """:math:`W_q^h` of every head, (n_heads, n_features, head_dim)."""
        return self._fitted_array(self._fitted_kernel("query_projection_").query_weights)

    @property
    def key_projection_(self):
        """:math:`W_k^h` of every head, (n_heads, n_features, head_dim)."""
        return self._fitted_array(self._fitted_kernel("key_projection_").key_weights)

    @property
    def scale_(self):
        """The multiplier :math:`s_h` of every head's similarity."""
        return self._fitted_array(self._fitted_kernel("scale_").scale)

    @property
    def head_weights_(self):
        """The weight :math:`a_h` of every head's estimate in the mixture."""
        return self._fitted_array(self._fitted_kernel("head_weights_").head_weights)

    @property
    def center_(self):
        """The center :math:`c` of the standardization of the inputs."""
        return self._fitted_array(self._fitted_kernel("center_").center)

    @property
    def input_scale_(self):
        """The scale :math:`\\sigma` of the standardization of the inputs."""
        return self._fitted_array(self._fitted_kernel("input_scale_").input_scale)
