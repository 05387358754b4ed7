"""The ``kernattn`` command line."""

import argparse

import kernattn


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kernattn",
        description=(
            "Attention as a kernel smoother: fit and compare Nadaraya-Watson, learned-kernel "
            "attention and random-feature linear attention on regression tasks."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kernattn {kernattn.__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
    return 0
