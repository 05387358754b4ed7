"""The binned tier of :class:`~kernattn.KernelSmoother` (1–2 inputs): ``grid`` bins the data
and takes kernel sums on the grid, ``kernel`` is the fitted binned kernel, ``search`` the
bandwidth search on binned sums, ``plugin`` the direct plug-in bandwidth.
"""
