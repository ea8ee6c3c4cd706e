"""The `rcb` console script: one typer app; each command lives in `rcb/commands/<name>.py`.

Commands import their heavy dependencies lazily so `rcb --help` stays fast and the serving
commands never pull in the training stack.
"""

from __future__ import annotations

import typer

from rcb.commands import curves, evaluate, export, market, oracle, simulate, train

app = typer.Typer(
    name="rcb",
    help="ROI-constrained bidding (CBRL): market logs, simulator, oracle, training, export, serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(market.app, name="market")
app.command("oracle")(oracle.oracle_command)
app.command("simulate")(simulate.simulate_command)
app.command("evaluate")(evaluate.evaluate_command)
app.command("train")(train.train_command)
app.command("export")(export.export_command)
app.command("curves")(curves.curves_command)


if __name__ == "__main__":
    app()
