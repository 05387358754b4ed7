"""The warning classes kernattn issues, each filterable on its own."""


class BandwidthWarning(UserWarning):
    """A selected bandwidth ended on the lower edge of its search range, or a local
    polynomial's design could not support some queries (:class:`LocalDesignWarning`, a
    subclass).

    Issued once per fit (and once per prediction for the local designs); it names the edge
    and the features, and can be filtered on its own::

        warnings.filterwarnings("ignore", category=kernattn.BandwidthWarning)
    """


class LocalDesignWarning(BandwidthWarning):
    """Some queries' local designs cannot support the local polynomial: they were held back.

    A query is held back when its local polynomial would be more than twice as noisy (in
    standard deviation) as a single observation — its weights rest on too few distinct
    inputs, or it lies outside the support of its weights — or when it lies away from the
    local design along a direction the design does not resolve. Its estimate is then shrunk
    toward the local constant (the Nadaraya–Watson estimate at the query) until the
    variance bound holds; see :mod:`kernattn._local.polynomial`. Estimators count these
    queries and warn once per call to ``predict`` (and to the methods built on it); the
    warning can be filtered on its own::

        warnings.filterwarnings("ignore", category=kernattn.LocalDesignWarning)

    It is a :class:`BandwidthWarning` (a larger bandwidth supports the queries), so a filter
    on that class silences it too, as it silenced the local-constant fallback of local lines
    before 0.7.
    """
