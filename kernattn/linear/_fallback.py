"""The queries linear attention's features cannot serve, and how the estimator says so.

A query whose feature denominator is not safely positive, or that lies beyond the reach of
the features, is computed exactly against every training key (or, without kept keys, given
the weighted training mean): :class:`ExactFallbackWarning` says how many, and
:class:`NotLinearTimeWarning` says when they are so many (more than ``LINEAR_SHARE`` of the
queries) that the estimator is no longer linear in n.
"""

from kernattn.linear._cost import LINEAR_SHARE


class ExactFallbackWarning(UserWarning):
    """Some queries were computed exactly, against every training key, because the
    features could not serve them (see :class:`LinearAttentionRegressor`, "Numerics")."""


class NotLinearTimeWarning(ExactFallbackWarning):
    """More than 10 % of the queries are computed exactly against every training key: the
    prediction (or fit) costs O(n) per query, no longer linear time in all."""


def fallback_warning(n_fallback, n_queries, keys_kept):
    """The message and category of the warning for ``n_fallback`` of ``n_queries`` queries
    the features could not serve (computed exactly where the keys are kept)."""
    how = (
        "computed exactly"
        if keys_kept
        else "given the training mean (partial_fit keeps no keys to compute them exactly)"
    )
    message = (
        f"{n_fallback} of {n_queries} queries had a linear-attention denominator that is "
        "not safely positive (negative, cancelling or underflowing feature sums), or lay "
        "beyond the reach of the features (far from every key, Nyström landmark, or key "
        f"of the near field); "
        f"they were {how}"
    )
    if n_fallback > LINEAR_SHARE * n_queries and keys_kept:
        message += (
            f". That is more than {LINEAR_SHARE:.0%} of the queries: this prediction is "
            "no longer linear in the training set size (use feature_map='nystroem', the "
            "default, or a larger bandwidth)"
        )
        return message, NotLinearTimeWarning
    return message, ExactFallbackWarning


def unserved_message(share, n_sample):
    """The fit's warning where a ``share`` above ``LINEAR_SHARE`` of ``n_sample`` sampled
    training rows cannot be served by the features."""
    return (
        f"{share:.0%} of {n_sample} sampled training rows cannot be served by "
        "the features and would be computed exactly against every training key: "
        "prediction is no longer linear in the training set size. Use "
        "feature_map='nystroem' (the default) or a larger bandwidth"
    )
