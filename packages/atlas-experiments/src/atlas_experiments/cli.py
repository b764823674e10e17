"""Entry point of the `atlas` command.

Each command group lives in `atlas_experiments.commands.<group>` and registers its own
subcommands; a command's handler returns an exit code. Errors that a user can fix (bad config
keys, missing files, checksum mismatches) are `ValueError`/`FileNotFoundError` subclasses and are
printed as one line instead of a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from atlas_experiments import __version__
from atlas_experiments.commands import cost as cost_commands
from atlas_experiments.commands import data as data_commands
from atlas_experiments.commands import eval as eval_commands
from atlas_experiments.commands import report as report_commands
from atlas_experiments.commands import study as study_commands
from atlas_experiments.commands import track as track_commands
from atlas_experiments.commands import train as train_commands

COMMAND_GROUPS = (
    data_commands,
    train_commands,
    eval_commands,
    track_commands,
    report_commands,
    study_commands,
    cost_commands,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="atlas", description="ATLAS reproduction: data, training, evaluation")
    parser.add_argument("--version", action="version", version=f"atlas {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="group", metavar="<command>", required=True)
    for group in COMMAND_GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"atlas: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
