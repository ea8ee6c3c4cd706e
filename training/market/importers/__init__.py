"""Importers of impression logs into the schema of docs/data-schema.md (``rcb market import``).

Each format's module reads its files, checks what only the source columns can tell (an hour of 24 maps
to a valid-looking slot once converted), maps the columns to ``day, slot, utility, market_price,
delivery[, cost]`` and hands the frame to :func:`training.market.schema.validate_frame`. Every rejected
row is counted under the reason that rejected it, in the :class:`ImportSummary` and in the manifest;
nothing is dropped silently. :func:`import_market` (:mod:`.market`) then writes a market directory as
``rcb market generate`` does: one ``day_XXX.parquet`` per day plus ``manifest.json``.

Formats: ``cbrl-syn`` (:mod:`.cbrl`, the CBRL reference code's dumps), ``auctionnet``
(:mod:`.auctionnet`, the NeurIPS 2024 auto-bidding traffic logs) and ``rcb`` (:mod:`.rcb_logs`, logs
already in the project's schema). MC constraints come from the source (``auctionnet``), from a
per-day constraints file (:mod:`.constraints_file`) or are drawn by :mod:`training.market.constraints`.
"""

from training.market.importers.common import DELIVERY_MODES, ImportSummary, ProgressCallback
from training.market.importers.constraints_file import CONSTRAINT_COLUMNS, ConstraintsFile, read_constraints_file
from training.market.importers.market import (
    CONSTRAINTS_FILE_FORMATS,
    SUPPORTED_FORMATS,
    check_source,
    import_market,
    split_assignment,
)

__all__ = [
    "CONSTRAINTS_FILE_FORMATS",
    "CONSTRAINT_COLUMNS",
    "DELIVERY_MODES",
    "SUPPORTED_FORMATS",
    "ConstraintsFile",
    "ImportSummary",
    "ProgressCallback",
    "check_source",
    "import_market",
    "read_constraints_file",
    "split_assignment",
]
