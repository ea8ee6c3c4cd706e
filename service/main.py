"""The FastAPI app: ``create_app(settings)`` builds it; ``uvicorn --factory service.main:create_app`` serves it.

Nothing happens at import: the lifespan loads the model and opens the store, so tests and workers
build their own. The routers are one per resource (``service/routes/``).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.routing import Route

from service.config import Settings
from service.errors import install_error_handlers
from service.lifespan import lifespan
from service.log_config import configure_logging
from service.metrics import Metrics
from service.middleware import LimitsAndMetrics
from service.routes import admin, bids, campaigns, health, slot_updates, ui
from service.schemas import SlotUpdate


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.json_logs)
    metrics = Metrics(campaign_limit=settings.metrics_campaign_limit)
    app = FastAPI(
        title="rcb bidding service",
        version="1",
        summary="ROI-constrained bidding (CBRL): per-campaign belief state, slot updates, batch bid scoring",
        description="The ad engine registers each campaign's episode (a day of 48 slots), reports every slot's stats "
        "and receives the next bid ratio; it scores impressions as ratio x utility. Errors are JSON "
        "`{error, detail}`. See docs/http-api.md.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    install_error_handlers(app)
    for router in (campaigns.router, slot_updates.router, bids.router, health.router, admin.router, ui.router):
        app.include_router(router)
    # The bid hot path as a plain Starlette route, matched first: FastAPI's per-request dependency and parameter
    # machinery is a large share of a 1,000-impression bid, and this endpoint parses its body itself. The APIRoute
    # of the same path stays for the OpenAPI schema (it is never reached).
    app.router.routes.insert(0, Route("/v1/bid", bids.bid, methods=["POST"], include_in_schema=False))
    app.add_middleware(LimitsAndMetrics, metrics=metrics, max_body_bytes=settings.max_body_bytes)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict:
    """FastAPI's schema plus the bodies /v1/bid parses itself (raw bytes), and the slot update the batch's items
    refer to (each validated on its own)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, summary=app.summary, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (*bids.DOCUMENTED_MODELS, SlotUpdate):
        body = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(body.pop("$defs", {}))
        components[model.__name__] = body
    app.openapi_schema = schema
    return schema
