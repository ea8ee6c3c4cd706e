"""Structured JSON logs: one object per line with the message, level, logger and any ``extra`` fields.

Slot updates log the campaign, the slot and the ratio (``extra={...}``), so a log search by campaign
shows its day.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        body.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(body, default=str).decode()


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    """Our logger (``rcb.service``) to stderr, JSON or plain; uvicorn's access log stays off the hot path."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("rcb.service")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    logging.Formatter.converter = time.gmtime
