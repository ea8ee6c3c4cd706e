"""The importers' public entry point under the name ``training.market.adapters`` (``rcb market import`` calls it).

The formats and the writing of the market directory live in :mod:`training.market.importers`; this module
names the same objects.
"""

from training.market.importers import (
    CONSTRAINT_COLUMNS,
    CONSTRAINTS_FILE_FORMATS,
    DELIVERY_MODES,
    SUPPORTED_FORMATS,
    ConstraintsFile,
    ImportSummary,
    ProgressCallback,
    check_source,
    import_market,
    read_constraints_file,
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
