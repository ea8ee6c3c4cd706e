"""Prometheus metrics of one service process (``GET /metrics``), in a registry of its own per app.

With several workers each process reports its own series (scrape each, or sum in Prometheus). The per-campaign
counters keep their own series for the first ``campaign_limit`` campaigns they see and count the rest under
``campaign="_other"``: a DSP with a million campaigns must not give Prometheus a million series per counter.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service.store.base import StoreBusy, StoreError

OTHER_CAMPAIGNS = "_other"
"""The ``campaign`` label of the per-campaign counters once ``campaign_limit`` campaigns have a series."""

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self, campaign_limit: int = 10_000) -> None:
        self.campaign_limit = campaign_limit
        self._campaigns: set[str] = set()
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "rcb_request_seconds",
            "Request latency by route",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.slot_updates = Counter(
            "rcb_slot_updates_total",
            "Slot updates by result (applied, replayed, conflict, skipped, unknown, wrong_episode, contended, "
            "unreadable, duplicate, invalid, unavailable)",
            ["result"],
            registry=r,
        )
        self.decisions = Counter(
            "rcb_decisions_total",
            "Ratios decided, by who decided (model, shield, fallback or handover)",
            ["decided_by"],
            registry=r,
        )
        self.fallbacks = Counter("rcb_fallbacks_total", "Ratios decided by the fallback controller", registry=r)
        self.shield_actions = Counter(
            "rcb_shield_actions_total",
            "Slots whose model ratio the shield moved, per campaign",
            ["campaign"],
            registry=r,
        )
        self.out_of_range = Counter(
            "rcb_out_of_range_slots_total",
            "Slots decided outside the model's range (clipped features; for a planner, no scenario explains the day:"
            " posterior on its grids' edge or costs misfit), per campaign",
            ["campaign"],
            registry=r,
        )
        self.handovers = Counter(
            "rcb_handovers_total",
            "Campaigns handed to their controller for the rest of the episode (the model was failing them), per"
            " campaign",
            ["campaign"],
            registry=r,
        )
        self.cache = Counter(
            "rcb_ratio_cache_total", "Ratio cache lookups by outcome (hit, miss, stale)", ["outcome"], registry=r
        )
        self.impressions = Counter("rcb_impressions_scored_total", "Utilities scored by /v1/bid", registry=r)
        self.model_info = Gauge(
            "rcb_model_info", "The model served (1 for the current version)", ["version"], registry=r
        )
        self.model_loaded = Gauge(
            "rcb_model_loaded", "1 when a model is loaded, 0 when the fallback decides", registry=r
        )
        self.store_up = Gauge(
            "rcb_store_up", "1 when the store answered its last command or ping, 0 after a failure", registry=r
        )
        self.store_busy = Counter(
            "rcb_store_busy_total",
            "Slot updates and bid reads the store never saw (one each): every connection of this process busy",
            registry=r,
        )

    def campaign_label(self, campaign: str) -> str:
        """``campaign`` while it has (or may still get) a series of its own, else :data:`OTHER_CAMPAIGNS`."""
        if campaign in self._campaigns:
            return campaign
        if len(self._campaigns) < self.campaign_limit:
            self._campaigns.add(campaign)
            return campaign
        return OTHER_CAMPAIGNS

    def store_failed(self, error: StoreError, slot_updates: int = 0) -> None:
        """The store could not take a command (``error``): ``rcb_store_up`` says so now (not after the next /readyz
        ping), and ``slot_updates`` updates it refused count as ``unavailable``. A :class:`~service.store.StoreBusy`
        never left this process (every connection busy), which says nothing of the store's health: it counts in
        ``rcb_store_busy_total`` and leaves ``rcb_store_up`` as it was."""
        if isinstance(error, StoreBusy):
            self.store_busy.inc()
        else:
            self.store_up.set(0)
        if slot_updates:
            self.slot_updates.labels(result="unavailable").inc(slot_updates)

    def set_model(self, version: str, loaded: bool) -> None:
        self.model_info.clear()
        self.model_info.labels(version=version).set(1)
        self.model_loaded.set(1 if loaded else 0)
