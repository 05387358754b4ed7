"""The warning classes kernattn issues, each filterable on its own."""


class BandwidthWarning(UserWarning):
    """A selected bandwidth ended on the lower edge of its search range, or a local-linear
    neighborhood was too small for a line.

    Issued once per fit (and once per prediction for the neighborhoods); it names the edge
    and the features, and can be filtered on its own::

        warnings.filterwarnings("ignore", category=kernattn.BandwidthWarning)
    """
