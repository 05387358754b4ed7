"""pytest configuration.

- A module that needs an optional extra is not collected without it.
- The property tests (Hypothesis) draw the same examples on every run, so that the suite
  gives the same result wherever it runs; ``pytest --hypothesis-profile=explore`` draws new
  examples on each run, to search for failing cases.
"""

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("repeatable")

collect_ignore = []
try:
    import dask.array  # noqa: F401
except ImportError:
    # The Dask path is imported only when a dask collection is passed; without the extra
    # its doctests are not collected (tests/test_dask.py skips itself).
    collect_ignore.append("kernattn/distributed")
try:
    import torch  # noqa: F401
except ImportError:
    # kernattn.torch is the torch extra's layer: without torch its doctests are not
    # collected (tests/test_torch.py skips itself).
    collect_ignore.append("kernattn/torch.py")
