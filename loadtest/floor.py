"""The bare endpoint floor: the bidding service's HTTP hot path with no model and no store.

``POST /v1/bid`` does the same parsing and response work as the real endpoint -- JSON: orjson body -> numpy float
array -> multiply by a constant bid ratio -> orjson response ``{"bids", "bid_ratio", "slot"}``; binary
(``Content-Type: application/octet-stream``, ``?campaign_id=``): ``np.frombuffer`` little-endian float32 -> multiply
-> bytes. Whatever the service costs above this floor, measured in the same run on the same core, is the model, the
state store and the bookkeeping. The slot-update, batch and campaign-registration routes only parse their JSON body
and answer, so every scenario of the load generator can run against the floor too.

    uvicorn --factory loadtest.floor:create_floor_app --port 8000
"""

from __future__ import annotations

import numpy as np
import orjson
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from starlette.routing import Route

BID_RATIO = 0.8
_OCTET = "application/octet-stream"


def create_floor_app(bid_ratio: float = BID_RATIO) -> FastAPI:
    app = FastAPI(title="rcb floor", docs_url=None, redoc_url=None, openapi_url=None)
    ratio32 = np.float32(bid_ratio)

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def bid(request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-type", "").startswith(_OCTET):
            campaign_id = request.query_params.get("campaign_id")
            if campaign_id is None or len(body) % 4:
                raise HTTPException(400, "binary bid needs ?campaign_id= and a float32 body")
            utilities = np.frombuffer(body, dtype="<f4")
            return Response((utilities * ratio32).astype("<f4", copy=False).tobytes(), media_type=_OCTET)
        try:
            payload = orjson.loads(body)
            utilities = np.asarray(payload["utilities"], dtype=np.float64)
            payload["campaign_id"]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise HTTPException(400, f"bad bid request: {e}") from None
        bids = utilities * bid_ratio
        out = {"bids": bids, "bid_ratio": bid_ratio, "slot": 0}
        return Response(orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")

    # Routed as the service routes its bid (service.main): a plain Starlette route, matched first, that reads its
    # query itself. As a FastAPI route with a query parameter the floor did more framework work per request than
    # the service it is the floor of.
    app.router.routes.insert(0, Route("/v1/bid", bid, methods=["POST"]))

    def _parse(body: bytes) -> dict:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise HTTPException(400, f"bad JSON: {e}") from None
        if not isinstance(payload, dict):
            raise HTTPException(400, "expected a JSON object")
        return payload

    @app.post("/v1/slot-update")
    async def slot_update(request: Request) -> Response:
        _parse(await request.body())
        return Response(b'{"ok":true}', media_type="application/json")

    @app.post("/v1/slot-update/batch")
    async def slot_update_batch(request: Request) -> Response:
        updates = _parse(await request.body()).get("updates")
        if not isinstance(updates, list):
            raise HTTPException(400, "expected {'updates': [...]}")
        return Response(orjson.dumps({"ok": True, "applied": len(updates)}), media_type="application/json")

    @app.put("/v1/campaigns/{campaign_id}")
    async def register(campaign_id: str, request: Request) -> Response:
        _parse(await request.body())
        return Response(orjson.dumps({"campaign_id": campaign_id}), media_type="application/json")

    return app
