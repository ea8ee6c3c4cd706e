"""What the endpoints do with a campaign's episode: register it, read it, apply slot updates (one or a batch).

A slot update (paper Sec. 3.2.4): append the slot's stats to the stored state, rebuild the
observations, run the posterior encoder, draw z with the shared counter-based noise, run the policy,
and store the next ratio with one compare-and-set keyed on ``(episode, slot)``. The store's
compare-and-set makes concurrent senders apply a slot once: the losers find the slot applied and
answer as a retry would (``replayed`` with the same stats, 409 with other stats). A campaign whose model is failing
it is handed to its controller for the rest of the episode (:mod:`service.handover`), a flag of the stored state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from model.contract import SLOTS_PER_DAY
from model.state import CampaignState, StateError
from service.config import Settings
from service.errors import ApiError, store_unavailable, unknown_campaign
from service.handover import hand_over
from service.metrics import Metrics
from service.ratio_cache import RatioCache, summary_of
from service.runner import Decided, ModelRunner, in_background
from service.schemas import BatchItem, CampaignRegistration, SlotAnswer, SlotUpdate, SlotUpdateBatchAnswer
from service.store import EpisodeStore, StoreBusy, Stored, StoreError, UnknownCampaign

log = logging.getLogger("rcb.service")

_CHUNK = 256
"""A slot batch reads, decides and writes this many campaigns at a time (one pipeline each), giving the event loop
back to bids between chunks; only _CHUNK_WITH_BIDS while bids flow (a chunk of 256 is ~20 ms of Python, and every
bid step waits for the chunk running)."""
_CHUNK_WITH_BIDS = 16
_BID_PRIORITY_S = 0.002
"""Longest a batch waits between two chunks for the bids in flight to finish."""
_BACKGROUND_CHUNK = 128
"""Campaigns per model call on the batch thread (nice 19): the bids' thread preempts it, so chunks need not be tiny."""


REFUSAL_RESULTS = {
    "unknown_campaign": "unknown",
    "contended": "contended",
    "unreadable_state": "unreadable",
    "duplicate_campaign": "duplicate",
}
"""``rcb_slot_updates_total``'s result for a refusal not counted where it is classified (conflicts, skips and wrong
episodes are counted by :meth:`Episodes._classified`, store outages by :meth:`service.metrics.Metrics.store_failed`,
updates that do not validate as ``invalid`` by the routes' validation paths)."""


def decode(campaign: str, stored: Stored) -> CampaignState:
    try:
        return CampaignState.from_bytes(stored.blob)
    except StateError as exc:
        raise ApiError(
            409, "unreadable_state", f"campaign {campaign!r}: stored state unreadable ({exc}); re-register"
        ) from None


def answer(state: CampaignState, slot: int, replayed: bool) -> SlotAnswer:
    """The answer to the report of ``slot``, as it was when that report was applied (a replay answers the same):
    the ratio then decided, by whom and which model, and whether the budget was then spent. After the last slot
    there is no slot to bid in, and a spent budget buys nothing more: ratio 0, as ``GET`` and ``/v1/bid`` say (the
    decided ratio stays in the state's history)."""
    over = slot + 1 >= SLOTS_PER_DAY
    spent = state.budget_exhausted_after(slot)
    return SlotAnswer(
        campaign_id=state.campaign,
        slot=slot + 1,
        bid_ratio=0.0 if over or spent else state.ratio_after(slot),
        model_version=state.model_version_at(slot + 1),
        decided_by=state.decided_by_at(slot + 1),  # type: ignore[arg-type]
        replayed=replayed,
        budget_exhausted=spent,
    )


@dataclass(frozen=True)
class Apply:
    """The update is for the next slot: apply it."""

    state: CampaignState


def classify(state: CampaignState, update: SlotUpdate) -> Apply | SlotAnswer | ApiError:
    """Apply, a replayed answer, or the conflict to answer (each 409 names the expected slot)."""
    where = {"episode": state.episode, "expected_slot": state.slot}
    if state.episode != update.episode:
        return ApiError(
            409,
            "wrong_episode",
            {
                **where,
                "message": f"campaign {state.campaign!r} is in episode {state.episode!r}, not {update.episode!r}",
            },
        )
    if update.slot < state.slot:
        reported = state.slot_stats(update.slot)
        sent = {"delivery": update.delivery, "cost": update.cost, "wins": update.wins, "auctions": update.auctions}
        if all(float(sent[k]) == reported[k] for k in reported):
            return answer(state, update.slot, replayed=True)
        return ApiError(
            409,
            "slot_conflict",
            {**where, "message": f"slot {update.slot} was already applied with other stats", "applied": reported},
        )
    if update.slot > state.slot:
        return ApiError(
            409, "slot_skipped", {**where, "message": f"slot {update.slot} reported before slot {state.slot}"}
        )
    return Apply(state)


class Episodes:
    def __init__(
        self, store: EpisodeStore, runner: ModelRunner, cache: RatioCache, metrics: Metrics, settings: Settings
    ):
        self.store, self.runner, self.cache, self.metrics, self.settings = store, runner, cache, metrics, settings
        # One lane for the CPU work of slot batches: concurrent batches take turns chunk by chunk, so a bid waits
        # behind at most one chunk (a few ms), not one chunk of every batch in flight.
        self._lane = asyncio.Lock()

    async def read(self, campaign: str) -> CampaignState:
        with self.cache.reading([campaign]) as read_from:  # a bid's read or a write may land while this one is out
            stored = await self.store.get(campaign)
            state = None if stored is None else decode(campaign, stored)
            self.cache.settle(campaign, read_from, state)
        if state is None:
            raise unknown_campaign(campaign)
        return state

    async def register(self, campaign: str, body: CampaignRegistration) -> tuple[CampaignState, bool]:
        if body.model is not None and body.model != self.runner.version:
            raise ApiError(
                409, "model_mismatch", f"the service serves model {self.runner.version!r}, not {body.model!r}"
            )
        stored = await self.store.get(campaign)
        if stored is not None and stored.episode == body.episode:
            try:
                state = decode(campaign, stored)
            except ApiError:  # unreadable (another format, a damaged blob): re-registering starts the episode anew
                log.warning("unreadable state replaced by a new registration", extra={"campaign": campaign})
                await self.store.delete(campaign)
            else:
                self._same_constraints(state, body)
                return state, False
        fresh = CampaignState.new(campaign, body.episode, body.roi_target, body.budget, self.settings.noise_seed)
        decided = await self.runner.decide_async([fresh])
        state = decided.state(0, fresh)
        stored, created = await self.store.register(campaign, body.episode, state.to_bytes(), summary_of(state))
        self.metrics.store_up.set(1)  # a write landed
        if created:
            self._count(decided, [(0, campaign)])
        else:  # a concurrent registration of the same episode won: answer its state
            state = decode(campaign, stored)
            self._same_constraints(state, body)
        self.cache.put(campaign, state)
        log.info(
            "episode registered",
            extra={"campaign": campaign, "episode": body.episode, "slot": 0, "new_episode": created},
        )
        return state, created

    @staticmethod
    def _same_constraints(state: CampaignState, body: CampaignRegistration) -> None:
        if (state.roi_target, state.budget) != (body.roi_target, body.budget):
            raise ApiError(
                409,
                "episode_exists",
                f"episode {state.episode!r} is registered with roi_target={state.roi_target}, budget={state.budget};"
                " use a new episode id to change them",
            )

    async def apply(self, update: SlotUpdate) -> SlotAnswer:
        stored = await self.store.get(update.campaign_id)
        if stored is None:
            raise self._refused(unknown_campaign(update.campaign_id))
        state, read = self._decoded(update.campaign_id, stored), stored.blob
        for _ in range(3):
            outcome = self._classified(state, update)
            if not isinstance(outcome, Apply):
                return outcome
            reported = state.reported(update.delivery, update.cost, update.wins, update.auctions)
            decided = self.runner.decide([reported])  # one campaign: ~1 ms, less than a hop to a worker thread
            decided, handed = hand_over(self.runner, [reported], decided)
            new = decided.state(0, reported)
            try:
                current = await self.store.compare_and_set(
                    update.campaign_id,
                    update.episode,
                    update.slot,
                    new.to_bytes(),
                    expected=read,
                    summary=summary_of(new),
                )
            except UnknownCampaign:
                raise self._refused(unknown_campaign(update.campaign_id)) from None
            if current is None:
                self._applied(new)
                self._count(decided, [(0, update.campaign_id)], handed)
                log.info(
                    "slot applied",
                    extra={
                        "campaign": update.campaign_id,
                        "slot": update.slot,
                        "ratio": new.next_ratio,
                        "decided_by": decided.decided_by,
                    },
                )
                return answer(new, update.slot, replayed=False)
            # a concurrent sender won, or the campaign was registered again: answer from what is stored now
            state, read = self._decoded(update.campaign_id, current), current.blob
        raise self._refused(ApiError(409, "contended", "the campaign's state kept changing; retry"))

    def _refused(self, exc: ApiError) -> ApiError:
        """``exc``, counted in ``rcb_slot_updates_total`` under :data:`REFUSAL_RESULTS`."""
        result = REFUSAL_RESULTS.get(exc.error)
        if result is not None:
            self.metrics.slot_updates.labels(result=result).inc()
        return exc

    def _decoded(self, campaign: str, stored: Stored) -> CampaignState:
        try:
            return decode(campaign, stored)
        except ApiError as exc:
            raise self._refused(exc) from None

    def _classified(self, state: CampaignState, update: SlotUpdate) -> Apply | SlotAnswer:
        outcome = classify(state, update)
        if isinstance(outcome, ApiError):
            self.metrics.slot_updates.labels(result=outcome.error.removeprefix("slot_")).inc()
            raise outcome
        if isinstance(outcome, SlotAnswer):
            self.metrics.slot_updates.labels(result="replayed").inc()
        return outcome

    def _applied(self, state: CampaignState) -> None:
        self.cache.put(state.campaign, state)
        self.metrics.slot_updates.labels(result="applied").inc()
        self.metrics.store_up.set(1)  # a write landed: the store answers (not only after the next /readyz ping)

    def _count(self, decided: Decided, landed: Sequence[tuple[int, str]], handed: Sequence[bool] | None = None) -> None:
        """Decisions by who decided; per campaign: shield actions, slots with out-of-range features and hand-overs
        (``handed``: per row of decided, the decision hands the campaign over). ``landed``: ``(row of decided,
        campaign)`` of the decisions written (one that lost a compare-and-set never served)."""
        kinds = [decided.decided_by[k] for k, _ in landed]
        for kind in set(kinds):
            n = kinds.count(kind)
            self.metrics.decisions.labels(decided_by=kind).inc(n)
            if kind == "fallback":
                self.metrics.fallbacks.inc(n)
        for k, campaign in landed:
            if decided.decided_by[k] == "shield":
                self.metrics.shield_actions.labels(campaign=self.metrics.campaign_label(campaign)).inc()
            if decided.out_of_range[k]:
                self.metrics.out_of_range.labels(campaign=self.metrics.campaign_label(campaign)).inc()
            if handed is not None and handed[k]:
                self.metrics.handovers.labels(campaign=self.metrics.campaign_label(campaign)).inc()
                log.warning("campaign handed over to its controller", extra={"campaign": campaign})

    async def apply_batch(self, updates: Sequence[SlotUpdate]) -> SlotUpdateBatchAnswer:
        """One answer per update, in order. Reads, decisions and writes go in chunks (one ``get_many``, one model call
        and one ``compare_and_set_many``, pipelined on Redis, per chunk), with the bids in flight served between
        chunks."""
        n = len(updates)
        results: list[BatchItem | None] = [None] * n
        seen: set[str] = set()
        unique: list[int] = []
        for i, u in enumerate(updates):
            if u.campaign_id in seen:
                results[i] = self._error_item(
                    u,
                    ApiError(
                        422,
                        "duplicate_campaign",
                        "one update per campaign per batch (send the next slot in the next call)",
                    ),
                )
            else:
                seen.add(u.campaign_id)
                unique.append(i)
        stored: list[Stored | StoreError | None] = []
        answered = False  # some read of the batch answered (checked per chunk, not over all read so far)
        for start, stop in self._spans(len(unique)):  # read in chunks too: one big pipeline is one long stall
            read_now = await self.store.get_each([updates[i].campaign_id for i in unique[start:stop]])
            stored += read_now
            answered = answered or any(not isinstance(item, StoreError) for item in read_now)
            if not answered:
                # no read of the batch answered so far: the store is down (not one node of a cluster, which fails
                # its own campaigns only); the request is one 503, without waiting on the chunks left
                down = stored[0]
                assert isinstance(down, StoreError)
                # the 503 handler counts the request's first update (store_failed); these count the others
                self.metrics.slot_updates.labels(result="unavailable").inc(len(unique) - 1)
                if isinstance(down, StoreBusy):
                    self.metrics.store_busy.inc(len(unique) - 1)
                raise down
        pending: list[tuple[int, CampaignState]] = []
        for start, stop in self._spans(len(unique)):
            async with self._lane:
                part = zip(unique[start:stop], stored[start:stop], strict=True)
                for i, item in part:
                    self._classify_item(updates[i], i, item, results, pending)
            await self.yield_to_bids()
        # each write carries the blob its state was computed from (a re-registration in between is a change)
        read = {i: item.blob for i, item in zip(unique, stored, strict=True) if isinstance(item, Stored)}
        if pending:
            await self._decide_and_write_chunks(updates, results, pending, read)
        done = [r for r in results if r is not None]
        assert len(done) == n
        batch = SlotUpdateBatchAnswer.of(done)
        log.info("slot batch", extra={"updates": n, "applied": batch.applied, "replayed": batch.replayed})
        return batch

    @staticmethod
    def _background_spans(n: int) -> Iterator[tuple[int, int]]:
        """Chunks of the decisions made on the low-priority thread: big enough to amortize a model call."""
        for start in range(0, n, _BACKGROUND_CHUNK):
            yield start, min(n, start + _BACKGROUND_CHUNK)

    def _spans(self, n: int) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` chunks of ``range(n)``: small while bids flow, sized when each chunk starts."""
        start = 0
        while start < n:
            stop = min(n, start + (_CHUNK_WITH_BIDS if self.cache.bids_flowing() else _CHUNK))
            yield start, stop
            start = stop

    async def yield_to_bids(self) -> None:
        """Between two chunks of a batch: give the loop to the bids in flight first (at most ~2 ms a chunk), so a
        slot boundary fills the gaps between bids instead of queueing them behind it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _BID_PRIORITY_S
        await asyncio.sleep(0)
        while self.cache.bids_in_flight and loop.time() < deadline:
            await asyncio.sleep(0)

    def _classify_item(
        self,
        u: SlotUpdate,
        i: int,
        item: Stored | StoreError | None,
        results: list[BatchItem | None],
        pending: list[tuple[int, CampaignState]],
    ) -> None:
        """One update of a batch against its stored state: an item now (unknown, conflict, replay, its read failed)
        or pending."""
        if item is None:
            results[i] = self._error_item(u, unknown_campaign(u.campaign_id))
            return
        if isinstance(item, StoreError):  # its node did not answer (a Redis Cluster with a node down): 503 alone
            results[i] = self._unavailable_item(u, item)
            return
        try:
            state = self._decoded(u.campaign_id, item)
            outcome = self._classified(state, u)
        except ApiError as exc:  # counted where raised
            results[i] = self._item(u, exc)
            return
        if isinstance(outcome, SlotAnswer):
            results[i] = BatchItem(status=200, campaign_id=u.campaign_id, answer=outcome)
        else:
            pending.append((i, state.reported(u.delivery, u.cost, u.wins, u.auctions)))

    def _written(self, u: SlotUpdate, new: CampaignState, current: Stored | None) -> BatchItem:
        """The item of an update whose compare-and-set answered ``current`` (None: written)."""
        if current is None:
            self._applied(new)
            return BatchItem(status=200, campaign_id=u.campaign_id, answer=answer(new, u.slot, False))
        try:
            outcome = self._classified(self._decoded(u.campaign_id, current), u)
        except ApiError as exc:  # counted where raised
            return self._item(u, exc)
        if not isinstance(outcome, SlotAnswer):  # the slot is still to apply: registered again since it was read
            return self._error_item(u, ApiError(409, "contended", "the campaign was registered again; retry"))
        return BatchItem(status=200, campaign_id=u.campaign_id, answer=outcome)

    async def _decide_and_write_chunks(
        self,
        updates: Sequence[SlotUpdate],
        results: list[BatchItem | None],
        pending: list[tuple[int, CampaignState]],
        read: dict[int, bytes],
    ) -> None:
        """Chunk by chunk: decide and build the new states (one model call on the nice-19 batch thread:
        :meth:`_decided_states`), write (pipelined round trips on Redis, small ones while bids flow; on the memory
        store no await at all, so the chunks are what lets the loop breathe), answer; the bids in flight go first
        between chunks."""
        for start, stop in self._background_spans(len(pending)):
            part = pending[start:stop]
            async with self._lane:
                decided, handed, news, blobs = await in_background(self._decided_states, [s for _, s in part])
                writes = []
                for (i, _), blob in zip(part, blobs, strict=True):
                    u = updates[i]
                    writes.append((u.campaign_id, u.episode, u.slot, blob, read[i]))
                summaries = [summary_of(new) for new in news]  # each write's notice says what it bids
            currents = await self.store.compare_and_set_many(writes, summaries, chunk=self._write_chunk())
            async with self._lane:
                for (i, _), new, current in zip(part, news, currents, strict=True):
                    u = updates[i]
                    if isinstance(current, UnknownCampaign):
                        results[i] = self._error_item(u, unknown_campaign(u.campaign_id))
                    elif isinstance(current, StoreError):
                        results[i] = self._unavailable_item(u, current)
                    else:
                        results[i] = self._written(u, new, current)
                self._count(
                    decided,
                    [(k, updates[i].campaign_id) for k, (i, _) in enumerate(part) if currents[k] is None],
                    handed,
                )
            await self.yield_to_bids()

    def _decided_states(
        self, reported: list[CampaignState]
    ) -> tuple[Decided, list[bool], list[CampaignState], list[bytes]]:
        """A chunk's decision, hand-overs, new states and their blobs: the CPU work of a chunk, all on the batch
        thread (the loop only sends the writes and answers)."""
        decided = self.runner.decide(reported)
        decided, handed = hand_over(self.runner, reported, decided)
        news = [decided.state(k, state) for k, state in enumerate(reported)]
        return decided, handed, news, [new.to_bytes() for new in news]

    def _write_chunk(self) -> int:
        """Writes per pipelined round trip: small while bids flow (each pipeline is packed on the loop)."""
        return _CHUNK_WITH_BIDS if self.cache.bids_flowing() else _CHUNK

    def _unavailable_item(self, update: SlotUpdate, error: StoreError) -> BatchItem:
        """The 503 item, inside a 200 batch, of an update whose read or write the store did not take; counted."""
        self.metrics.store_failed(error, slot_updates=1)
        return self._error_item(update, store_unavailable(error))

    def _error_item(self, update: SlotUpdate, exc: ApiError) -> BatchItem:
        """The item of a refusal, counted (:meth:`_refused`)."""
        return self._item(update, self._refused(exc))

    @staticmethod
    def _item(update: SlotUpdate, exc: ApiError) -> BatchItem:
        return BatchItem(status=exc.status, campaign_id=update.campaign_id, error=exc.error, detail=exc.detail)
