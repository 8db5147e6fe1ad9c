"""Kind ``agent_tasks``: the helper process that draws scenario figures
(``python -P -m dyna.experiment.kinds.agent_tasks.figure_helper --parent PID``); the
message and the parent's side are in :mod:`dyna.experiment.kinds.agent_tasks.figure_worker`.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from dyna.fileio.paths import file_kind

__all__ = ["main"]


def _as_config(fields: dict) -> SimpleNamespace:
    """The config a scenario figure reads, from :func:`_config_fields`'s values."""
    return SimpleNamespace(name=str(fields["name"]), store=str(fields["store"]),
                           variants=tuple(str(v) for v in fields["variants"]),
                           analysis={"window": int(fields["window"]),
                                     "chosen_family": int(fields["chosen_family"])},
                           runs=int(fields["runs"]), seed=int(fields["seed"]))


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise ValueError("truncated message")
    return data


def _serve(stream) -> None:
    import polars as pl

    from dyna.experiment.kinds.agent_tasks.plots import ROWS, scenario_figure

    while True:
        line = stream.readline()
        if not line.strip():
            return
        head = json.loads(line)
        sizes = [int(n) for n in head["sizes"]]
        if len(sizes) != len(ROWS) or any(n < 0 for n in sizes):
            raise ValueError("bad sizes")
        sub = {key: pl.read_ipc(io.BytesIO(_read_exact(stream, n)))
               for (key, _, _), n in zip(ROWS, sizes)}
        scenario = str(head["scenario"])
        if "/" in scenario or "\\" in scenario or scenario in ("", ".", ".."):
            raise ValueError("bad scenario name")
        folder = Path(head["folder"])
        if not folder.is_absolute() or file_kind(folder) != "folder":
            raise ValueError("bad folder")
        paths = scenario_figure(_as_config(head["config"]), scenario, sub,
                                 {str(v) for v in head["same"]}, folder, str(head["note"]))
        sys.stdout.write(json.dumps({"i": int(head["i"]), "paths": [str(p) for p in paths]})
                         + "\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m dyna.experiment.kinds.agent_tasks.figure_helper --parent
    PID``: draw every figure of the message on stdin; exit 0 when done, 1 on a bad
    message, 2 on a bad command line, 130 on Ctrl-C."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dyna.experiment.kinds.agent_tasks."
                                      "figure_helper")
    ap.add_argument("--parent", type=int, required=True)
    args = ap.parse_args(argv)
    try:
        from dyna.experiment.helper_process import die_with_parent

        die_with_parent(args.parent)
        _serve(sys.stdin.buffer)
        sys.stdout.flush()
        return 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (ValueError, KeyError, TypeError, OSError) as exc:
        print(f"figure worker: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
