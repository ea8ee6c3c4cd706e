"""The `rcb` console script: one typer app; each command lives in `rcb/commands/<name>.py`.

Commands import their heavy dependencies (torch, matplotlib, the solvers) lazily, so `rcb --help` stays
fast. Results go to stdout, progress and messages to stderr; exit code 0 is success, 2 bad input (an
unusable option, path or data file, reported on one line). See docs/cli.md.
"""

from __future__ import annotations

import typer

from rcb.commands import (
    calibrate,
    curves,
    evaluate,
    export,
    fit,
    market,
    oracle,
    replay,
    reselect,
    serve,
    simulate,
    train,
)
from rcb.commands.common import DOCS_EPILOG

app = typer.Typer(
    name="rcb",
    help="ROI-constrained bidding (CBRL, KDD'22): market logs, simulator, hindsight oracle, baselines, training,"
    " evaluation, ONNX export and the bidding service.",
    epilog=DOCS_EPILOG + " Exit codes: 0 ok, 2 bad input.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(market.app, name="market")
app.command("oracle", epilog=DOCS_EPILOG)(oracle.oracle_command)
app.command("simulate", epilog=DOCS_EPILOG)(simulate.simulate_command)
app.command("evaluate", epilog="Metrics and tables: docs/metrics.md. " + DOCS_EPILOG)(evaluate.evaluate_command)
app.command("train", epilog=DOCS_EPILOG)(train.train_command)
app.command("reselect", epilog=DOCS_EPILOG)(reselect.reselect_command)
app.command("export", epilog=DOCS_EPILOG)(export.export_command)
app.command("calibrate", epilog=DOCS_EPILOG)(calibrate.calibrate_command)
app.command("fit", epilog=DOCS_EPILOG)(fit.fit_command)
app.command("curves", epilog=DOCS_EPILOG)(curves.curves_command)
app.command("serve", epilog=serve.EPILOG)(serve.serve_command)  # the same command as `python -m service`
app.command("replay", epilog="HTTP API: docs/http-api.md. " + DOCS_EPILOG)(replay.replay_command)


if __name__ == "__main__":
    app()
