"""``shield:METHOD``: the controller and the band a method plays behind, as the service would run them.

The band (:class:`model.shield.ShieldConfig`) is an exported model's card's own ``shield`` section, else the code's
defaults; a controller model's is the whole ratio range (:data:`model.artifact.OPEN_BAND`: the shield never moves a
controller's own ratio). The controller the band is centred on is an exported model's card's: its
``safety_controller`` (the served market's PID, ``rcb calibrate``), a PID controller model's own law, else its
training market's PID; a residual run's (or ensemble's) own reference, the controller it is trained around and its
export writes on the card; else the PID tuned on the evaluated market's train days (:func:`market_shield_gains`).
"""

from __future__ import annotations

from collections.abc import Callable

from model.contract import Setting
from model.controller import ControllerGains
from model.shield import ShieldConfig
from training.bidders.base import Bidder
from training.bidders.onnx import OnnxBidder
from training.bidders.tuned import Progress, tuned_baseline
from training.market.dataset import Market
from training.replay.dayset import DaySet


def shield_gains(
    inner: Bidder,
    market: Market,
    setting: Setting,
    train: Callable[[], DaySet],
    progress: Progress | None = None,
    market_pid: Callable[[], ControllerGains] | None = None,
) -> ControllerGains:
    """The controller behind ``inner``'s shield, as the service would run it: an exported model's card's
    (:meth:`model.artifact.Artifact.controller_gains`: its safety controller, else its own PID or its training
    market's); a residual run's (or ensemble's) own reference, the controller it was trained around and its
    export writes on the card, whichever market it plays; else (a baseline, a non-residual run) the PID tuned on
    this market's train days, which is what a non-residual run's export writes where it plays its own market (on
    another market it is that market's PID, not the one its card would carry). ``market_pid``: that PID, where the
    caller keeps it (tuned once per evaluation)."""
    if isinstance(inner, OnnxBidder):
        return inner.artifact.controller_gains()
    if isinstance(own := getattr(inner, "controller", None), ControllerGains):
        return own
    return market_pid() if market_pid is not None else market_shield_gains(market, setting, train, progress)


def market_shield_gains(
    market: Market, setting: Setting, train: Callable[[], DaySet], progress: Progress | None = None
) -> ControllerGains:
    """The PID tuned on ``market``'s train days, as a shield's controller (gains and the train days' profile)."""
    params = tuned_baseline(market, "pid", setting, train, progress)[0].params()
    return ControllerGains.with_profile(params["traffic_profile"], params)


def shield_config(inner: Bidder) -> ShieldConfig:
    """The band around ``inner``, as the service would run it: an exported model's card (its ``shield`` section,
    the defaults where it has none; the open band of a controller model); the defaults for every other bidder."""
    if isinstance(inner, OnnxBidder):
        return inner.artifact.shield_config()
    return ShieldConfig()
