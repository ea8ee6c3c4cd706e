"""One module per `rcb` command group; each exposes typer commands that `rcb.cli` registers."""
