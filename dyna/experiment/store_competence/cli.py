"""``dyna store competence``: a tenant's task type in an experience store, its Beta
posterior after each episode with the 95% credible band, as JSON or a PNG.

It lives here, not in :mod:`dyna.store.cli`, because it draws: only :mod:`dyna.experiment`
draws plots. The store is opened read-only (:func:`dyna.store.cli.open_store`); the posterior
follows the store's own prior and discount (:func:`dyna.competence.posterior_path`), so its
last point is what ``get_competence`` answers. An unknown tenant, a task type without
episodes of the tenant, a missing store or a bad ``--out`` is one line and exit 2, and
nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

from dyna.errors import ConfigError, MissingFileError
from dyna.store.cli import open_store, refuse_unknown_tenant

__all__ = ["add_parser"]


def add_parser(cmds) -> None:
    """Add ``competence`` to the sub-parsers of ``dyna store`` (``cmds``)."""
    p = cmds.add_parser("competence", help="a tenant's task type: the store's Beta "
                        "posterior over its episodes, with the 95%% credible band (JSON, "
                        "or a PNG with --out); read-only")
    p.add_argument("db", metavar="DB", help="experience store (must exist): a SQLite file or "
                   "a postgresql:// DSN (password in PGPASSWORD or ~/.pgpass)")
    p.add_argument("--tenant", required=True, help="tenant (exact; must have episodes)")
    p.add_argument("--task-type", dest="task_type", required=True,
                   help="task type (exact; must have episodes of the tenant)")
    p.add_argument("--by", choices=["episode", "time"], default="episode",
                   help="x axis of the PNG: the episode index (default) or its time")
    p.add_argument("--out", default=None, metavar="PNG",
                   help="draw into this .png file (its folder must exist); default: print "
                   "the posterior after each episode as JSON and write nothing")
    p.set_defaults(func=_competence)


def _png_target(out: str) -> Path:
    """``--out`` of ``store competence``, checked before the store is opened.

    Raises
    ------
    ConfigError
        A suffix other than ``.png``, or a folder.
    MissingFileError
        Its folder does not exist (never created).
    """
    path = Path(out)
    if path.suffix.lower() != ".png":
        raise ConfigError("--out", out, "must name a .png file")
    if path.is_dir():
        raise ConfigError("--out", out, "is a folder, not a .png file")
    if not path.parent.is_dir():
        raise MissingFileError("--out", path.parent, "no such folder (it is not created)")
    return path


def _competence(args) -> int:
    """``dyna store competence`` (module docstring): an unknown tenant or a task type
    without episodes of the tenant refused in one line, nothing written."""
    from dyna.competence import beta_interval, posterior_path  # noqa: PLC0415
    from dyna.experience import SUCCESS  # noqa: PLC0415

    target = _png_target(args.out) if args.out is not None else None
    store = open_store(args.db, read_only=True)
    try:
        refuse_unknown_tenant(store, args)
        frame = store.to_dataset(args.tenant, task_type=args.task_type)
        if frame.height == 0:
            types = [t["task_type"] for t in
                     store.dispatch("list_task_types", tenant_id=args.tenant)["task_types"]]
            shown = ", ".join(repr(t) for t in types[:5]) + (", ..." if len(types) > 5
                                                              else "")
            raise ConfigError("--task-type", args.task_type, f"has no episodes of tenant "
                              f"{args.tenant!r} (task types: {shown})")
        prior, discount = store.prior, store.discount
    finally:
        store.close()
    frame = frame.sort("timestamp", "id")
    seconds = frame["timestamp"].dt.epoch("us") / 1e6   # the Datetime column, in seconds
    success = (frame["outcome"] == SUCCESS).fill_null(False).to_numpy()
    a, b = posterior_path(success, prior, discount)
    lower, upper = beta_interval(a, b, 0.95)
    mean = a / (a + b)
    out = {"tenant_id": args.tenant, "task_type": args.task_type,
           "n_episodes": int(a.size), "prior": list(prior), "discount": discount,
           "level": 0.95, "a": float(a[-1]), "b": float(b[-1]), "mean": float(mean[-1]),
           "lower": float(lower[-1]), "upper": float(upper[-1]),
           "out": None if target is None else str(target)}
    if target is None:
        out["path"] = {"episode": list(range(1, a.size + 1)),
                       "timestamp": seconds.to_list(), "a": a.tolist(),
                       "b": b.tolist(), "mean": mean.tolist(), "lower": lower.tolist(),
                       "upper": upper.tolist()}
    else:
        _draw_competence(target, args, seconds.to_numpy(), success,
                         (mean, lower, upper), prior, discount)
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _draw_competence(path: Path, args, timestamps, success, curve, prior,
                     discount: float) -> None:
    """The PNG of ``store competence``: the posterior mean and its band against the
    episode index (or the time, ``--by time``), each outcome a tick at 0 (failure) or 1
    (success). Written whole (:func:`dyna.experiment.plotting.save`).

    Raises
    ------
    StoreWriteError
        The PNG could not be written (field ``--out``); nothing is left under its name.
    """
    import datetime as _dt  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from dyna.errors import StoreWriteError  # noqa: PLC0415
    from dyna.experiment.plotting import figure, save  # noqa: PLC0415

    mean, lower, upper = curve
    if args.by == "time":
        x = [_dt.datetime.fromtimestamp(t, _dt.timezone.utc) for t in timestamps.tolist()]
        xlabel = "time of the episode (UTC)"
    else:
        x = list(range(1, mean.size + 1))
        xlabel = "episode (oldest first)"
    forget = "" if discount == 1.0 else f", discount {discount:g} per episode"
    title = (f"competence of tenant {args.tenant!r}, task type {args.task_type!r}: "
             f"{mean.size} episodes\nBeta posterior after each episode, prior "
             f"Beta({prior[0]:g}, {prior[1]:g}){forget}; band: 95% credible interval")
    with figure(figsize=(7.0, 4.0)) as fig:
        ax = fig.subplots()
        ax.fill_between(x, lower, upper, color="C0", alpha=0.2, linewidth=0,
                        label="95% credible interval")
        ax.plot(x, mean, color="C0", lw=1.3, label="posterior mean")
        ax.plot(x, np.where(success, 1.0, 0.0), "|", color="0.35", ms=5, alpha=0.6,
                label="outcome (1 success, 0 failure)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("competence (probability of success)", fontsize=8)
        ax.set_title(title, fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        fig.legend(fontsize=7, loc="outside lower center", ncol=3, frameon=False)
        if args.by == "time":
            from matplotlib import dates  # noqa: PLC0415

            locator = dates.AutoDateLocator()
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
        try:
            save(fig, path.with_suffix(""), svg=False)
        except OSError as exc:
            raise StoreWriteError(path, exc.strerror or str(exc), field="--out") from None
