"""Docstring sections written once and shared by several functions or methods.

A docstring names a shared section by a line holding only ``%(name)s`` (the placeholder of
scipy's and MNE's docstring fillers); :func:`fill_doc` puts the section's text there, at
that line's indentation, when the module is imported, so ``help``, Sphinx and doctests see
the whole docstring. Nothing else in the docstring is touched: braces, ``%`` and LaTeX stay
as written.
"""

import re
import textwrap

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)%\((?P<name>\w+)\)s[ \t]*$", re.MULTILINE)

__all__ = ["fill_doc"]


def fill_doc(**sections):
    """A decorator that puts ``sections[name]`` in place of each ``%(name)s`` line of the
    decorated object's docstring.

    Raises ``KeyError`` at import for a placeholder without a section, so that a misspelt
    name cannot reach the rendered documentation.

    Examples
    --------
    >>> RETURNS = '''Returns
    ... -------
    ... self : object'''
    >>> @fill_doc(returns=RETURNS)
    ... def fit():
    ...     '''Fit.
    ...
    ...     %(returns)s
    ...     '''
    >>> print(fit.__doc__)
    Fit.
    <BLANKLINE>
        Returns
        -------
        self : object
    <BLANKLINE>
    """

    def section(match):
        text = textwrap.dedent(sections[match.group("name")]).strip("\n")
        return textwrap.indent(text, match.group("indent"), lambda line: line.strip())

    def decorate(obj):
        # Under ``python -OO`` there is no docstring to fill.
        if obj.__doc__ is not None:
            obj.__doc__ = _PLACEHOLDER.sub(section, obj.__doc__)
        return obj

    return decorate
