"""`rcb serve`: the bidding service's command (``service/cli.py``), the one ``python -m service`` runs.

The command, its options and its help live in ``service/cli.py``, so the service image (model/ and service/
only) and the dev install's ``rcb serve`` start the service alike. HTTP API: docs/http-api.md.
"""

from __future__ import annotations

from service.cli import EPILOG, _check_can_listen, serve_command

__all__ = ["EPILOG", "_check_can_listen", "serve_command"]
