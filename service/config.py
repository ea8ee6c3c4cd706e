"""The service's settings: one pydantic-settings class, read from ``RCB_*`` environment variables.

``rcb serve`` flags override them. Validators refuse unusable values at startup, not at the first request.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.store import check_store_url
from service.store.base import check_prefix

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "default"


class Settings(BaseSettings):
    """Every knob of the service. Environment: ``RCB_<FIELD>`` (e.g. ``RCB_MODEL_DIR``, ``RCB_REDIS_URL``)."""

    # hide_input_in_errors: a bad store URL's error must not print the password it holds
    model_config = SettingsConfigDict(
        env_prefix="RCB_", extra="ignore", frozen=True, populate_by_name=True, hide_input_in_errors=True
    )

    model_dir: Path = DEFAULT_MODEL_DIR
    """The model artifact to serve (``rcb export``'s output)."""
    store: str = Field(default="memory", validation_alias=AliasChoices("RCB_STORE", "RCB_REDIS_URL"))
    """``memory`` (in-process, one process only), ``redis://host:port/db`` or ``redis+cluster://h1:p1,h2:p2``.
    ``RCB_STORE`` or ``RCB_REDIS_URL`` (aliases take no prefix: an unprefixed ``STORE`` variable is not read)."""
    key_prefix: str = "rcb"
    """Prefix of every Redis key (``{prefix}:{{campaign}}``) and of the update channel."""
    state_ttl_s: int = Field(default=7 * 24 * 3600, gt=0)
    """A campaign's state expires this long after its last write."""
    store_timeout_s: float = Field(default=0.25, gt=0)
    """Bound on one Redis command: a stalled store answers 503 after this, it does not hang requests."""
    pool_size: int = Field(default=64, gt=0)
    pool_timeout_s: float = Field(default=0.5, gt=0)
    ratio_cache_ttl_s: float = Field(default=1.0, gt=0)
    """Longest a process serves a campaign's ratio from its cache without re-reading the store (the staleness
    bound when an update notification is lost; notifications make it milliseconds)."""
    shield: bool = True
    """Keep the model's ratio within the safety shield's band around a PID controller on the same stats
    (``model/shield.py``); answers say ``decided_by: shield`` when it moved the ratio. On by default: the shipped
    model scores 0.716 (CSR 0.90) alone and 0.772 (CSR 1.00) shielded on the benchmark's MC OOD days (RESULTS.md)."""
    noise_seed: int = Field(default=0, ge=0, lt=2**64)
    """Posterior-sampling seed: z is drawn from the stream keyed by (seed, campaign, episode), slot in the counter."""
    api_token: SecretStr | None = None
    """If set, write endpoints (register, slot updates, model reload) need ``Authorization: Bearer <token>``."""
    max_body_bytes: int = Field(default=8 * 2**20, gt=0)
    """Larger request bodies are refused with 413."""
    max_utilities: int = Field(default=100_000, gt=0)
    """Most impressions one /v1/bid call may score."""
    max_bid_campaigns: int = Field(default=10_000, gt=0)
    """Most campaign ids one columnar /v1/bid call may carry (each is checked and looked up)."""
    max_batch_updates: int = Field(default=20_000, gt=0)
    """Most campaigns one /v1/slot-update/batch call may carry."""
    onnx_threads: int = Field(default=1, gt=0)
    """onnxruntime intra-op threads per session (1: predictable latency; scale out by processes)."""
    metrics_campaign_limit: int = Field(default=10_000, ge=0)
    """Most campaigns with series of their own in the per-campaign counters of ``/metrics`` (shield actions,
    out-of-range slots), per process; the rest are counted under ``campaign="_other"``. 0: all under it."""
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING or ERROR (any case)."""
    json_logs: bool = True

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"log_level must be debug, info, warning or error; got {value!r}")
        return level

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        value = value.strip()
        if value != "memory":
            check_store_url(value)  # a port out of range or a cluster node without one: said now, not at open
        return value

    @field_validator("key_prefix")
    @classmethod
    def _key_prefix(cls, value: str) -> str:
        # the store refuses these when it opens (a traceback in the lifespan); said here, with the other settings
        return check_prefix(value, "key_prefix")

    @field_validator("api_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        # compose's `.env` or an exported empty variable: RCB_API_TOKEN= means no token, not a 0-character one
        return None if value == "" or (isinstance(value, SecretStr) and not value.get_secret_value()) else value

    @field_validator("api_token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("api_token must be at least 16 characters (or unset for no auth)")
        return value

    @property
    def store_kind(self) -> str:
        if self.store == "memory":
            return "memory"
        return "cluster" if self.store.startswith("redis+cluster://") else "redis"
