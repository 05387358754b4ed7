r"""Bandwidth selection for the kernel smoother: normal-reference rules and the criteria
(leave-one-out, AICc, GCV) with their search.

The bandwidth sets how far a query looks: with the Gaussian kernel, :math:`h_j` is the
kernel's standard deviation along feature :math:`j`. The rules of thumb read it off each
feature's spread (:mod:`~kernattn.bandwidth._rules`); a criterion
(:mod:`~kernattn.bandwidth._criterion`) is minimized per feature by the search
(:mod:`~kernattn.bandwidth._search`): leave-one-out picks the bandwidths whose smoother best
predicts every training target from the other training points.
"""

from kernattn.bandwidth._criterion import CRITERIA, check_observations
from kernattn.bandwidth._rules import BANDWIDTH_RULES, rule_of_thumb_bandwidth
from kernattn.bandwidth._search import (
    BandwidthSelection,
    BandwidthWarning,
    loo_bandwidth,
    resolve_bandwidth,
    select_bandwidth,
)

__all__ = [
    "BANDWIDTH_RULES",
    "CRITERIA",
    "BandwidthSelection",
    "BandwidthWarning",
    "check_observations",
    "loo_bandwidth",
    "resolve_bandwidth",
    "rule_of_thumb_bandwidth",
    "select_bandwidth",
]
