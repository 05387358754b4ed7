r"""Binned kernel sums: the smoother's sums on a regular grid, in one and two dimensions.

The exact smoother sums one kernel value per (query, key) pair. With one or two continuous
inputs and many rows, the keys can first be *binned* onto a regular grid, and the sums at
every grid point become a convolution of the binned columns with the kernel sampled on the
grid (Fan and Marron, 1994; Wand and Jones, 1995, appendix D; R's KernSmooth):

1. **Linear binning.** A row at :math:`x` between grid points :math:`g_k` and
   :math:`g_{k+1}` (spacing :math:`\delta`, :math:`x = g_k + t\delta`) gives the fraction
   :math:`1 - t` of its weighted columns to :math:`g_k` and :math:`t` to :math:`g_{k+1}`
   (in 2-D the four corners of its cell, by the products of the two axes' fractions). The
   split keeps each row's mass and its mean position.
2. **Gridded moments.** With the Gaussian kernel :math:`K(u) = e^{-u^2/2}` and bin counts
   :math:`c_k` (weights :math:`s_j`) and :math:`c^y_k` (weighted targets :math:`s_j y_j`),
   the local-polynomial moments at grid point :math:`g` are

   .. math::

       S_e(g) = \sum_k c_k K(u_k) u_k^e, \qquad T_e(g) = \sum_k c^y_k K(u_k) u_k^e,
       \qquad u_k = (g_k - g)/h,

   for :math:`|e| \le 2p` and :math:`|e| \le p` respectively (multi-indices in 2-D, where
   the Gaussian is a product and every sum is two 1-D convolutions). Each is a correlation
   of the bin counts with the taps :math:`K(m\delta/h)(m\delta/h)^e`, computed directly or
   by FFT, whichever the measured crossover
   :data:`~kernattn.smoother._binned.moments.FFT_CROSSOVER` says is faster.
3. **Queries.** The moments are smooth functions of the evaluation point, so at a query
   :math:`q` they are linearly (bilinearly) *interpolated* from the grid, and the local
   polynomial of degree :math:`p` is solved at :math:`q` from them
   (:func:`~kernattn.smoother._binned.solve.solve_local_polynomial`): interpolating the
   sums, not the gridded estimate.

The files, one idea each: ``grid`` (the grid, locating points, interpolation), ``binning``
(linear binning, coarsening), ``moments`` (the gridded moments), ``solve`` (the local
polynomial from moments), ``queries`` (the estimate at queries), ``error`` (the error
bound and grid rule), ``left_out`` (a row's own share), ``cells`` and ``statistics``
(the criteria's sums over the rows), ``cost`` (binned or exact); ``kernel`` is the
fitted binned kernel, ``search`` the bandwidth search on binned sums, ``plugin`` the
direct plug-in bandwidth.

References
----------
Fan, J. and Marron, J. S. (1994). Fast implementations of nonparametric curve estimators.
*Journal of Computational and Graphical Statistics*, 3, 35–56.

Wand, M. P. (1994). Fast computation of multivariate kernel estimators. *Journal of
Computational and Graphical Statistics*, 3, 433–445.

Wand, M. P. and Jones, M. C. (1995). *Kernel Smoothing*. Chapman and Hall.
"""
