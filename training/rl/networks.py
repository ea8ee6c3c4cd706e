"""SAC's networks (paper appendix, "Policy design"): a tanh-Gaussian policy on [0, 4] and twin Q critics.

Inputs are the observation features of :mod:`model.features`, optionally concatenated with a latent
``z`` (CBRL's posterior sample). Torch lives in ``training/`` only; serving runs the ONNX export.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from model.contract import RATIO_MAX, RATIO_MIN
from model.features import CONTROLLER_INDEX, FEATURE_NAMES

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
PREV_RATIO = FEATURE_NAMES.index("prev_ratio")
"""Where the last ratio sits in the observation (relative actions scale it)."""


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, outputs)
    )


class TanhGaussianPolicy(nn.Module):
    """A squashed Gaussian ``u ~ N(mu(o), sigma(o))`` mapped to a bid ratio in ``[RATIO_MIN, RATIO_MAX]``.

    Two parameterizations of the ratio (``step`` picks):

    * ``step == 0``, **absolute**: ``ratio = RATIO_MIN + (tanh(u) + 1) / 2 * (RATIO_MAX - RATIO_MIN)``;
    * ``step > 0``, **relative**: ``ratio = min(base * exp(step * tanh(u)), RATIO_MAX)`` where ``base`` is
      the previous slot's ratio (read back from the ``prev_ratio`` feature) or ``start_ratio`` in the
      first slot. Each action then moves the ratio *level*, which persists, instead of setting one slot's
      ratio out of 48: the critic sees effects 48 times larger, the credit assignment that makes
      PID controllers work. The observation and the output stay a ratio, so serving is unchanged.
    * ``step > 0`` and ``residual``: the same with ``base`` the reference controller's ratio for this slot
      (the ``controller_ratio`` feature): the policy learns a bounded correction of a PID, not the control
      law itself, so an untrained or confused policy bids near the controller.

    ``zero_start`` (residual only): the mean's output row starts at zero, so the untrained policy's deterministic
    ratio *is* the controller's (``tanh(0) = 0``), whatever the latent; exploration noise is unchanged.
    """

    # Buffers registered in __init__, declared here: nn.Module's attribute lookup types them Tensor | Module.
    scale: torch.Tensor
    offset: torch.Tensor

    def __init__(
        self,
        inputs: int,
        hidden: int = 128,
        step: float = 0.0,
        start_ratio: float = 1.0,
        residual: bool = False,
        zero_start: bool = False,
    ):
        super().__init__()
        if residual and step <= 0:
            raise ValueError("a residual policy needs a relative action step > 0")
        if zero_start and not residual:
            raise ValueError("zero_start needs a residual policy (it starts at its controller)")
        self.body = mlp(inputs, hidden, 2)
        if zero_start:
            head = self.body[-1]
            assert isinstance(head, nn.Linear)
            with torch.no_grad():  # row 0 is the mean; row 1 (log std) keeps its random init
                head.weight[0].zero_()
                head.bias[0].zero_()
        self.step = float(step)
        self.start_ratio = float(start_ratio)
        self.residual = residual
        self.base_feature = CONTROLLER_INDEX if residual else PREV_RATIO
        """Which observation feature (a ratio over 4) relative actions scale."""
        self.register_buffer("scale", torch.tensor((RATIO_MAX - RATIO_MIN) / 2.0))
        self.register_buffer("offset", torch.tensor((RATIO_MAX + RATIO_MIN) / 2.0))

    def distribution(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.body(observation).unbind(-1)
        return mean, torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def base(self, observation: torch.Tensor) -> torch.Tensor:
        """The ratio a relative action scales: the controller's (residual), else the last slot's, or ``start_ratio``
        before any."""
        previous = observation[..., self.base_feature] * RATIO_MAX
        return torch.where(previous > 0, previous, torch.full_like(previous, self.start_ratio))

    def to_ratio(self, observation: torch.Tensor, squashed: torch.Tensor) -> torch.Tensor:
        """The ratio of a squashed action ``tanh(u)`` in ``[-1, 1]``."""
        if self.step == 0:
            return self.offset + self.scale * squashed
        return torch.clamp(self.base(observation) * torch.exp(self.step * squashed), RATIO_MIN, RATIO_MAX)

    def to_action(self, observation: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`to_ratio`, clipped to ``[-1, 1]``: what the critics take as the action."""
        if self.step == 0:
            return (ratio - self.offset) / self.scale
        base = self.base(observation)
        return torch.clamp(torch.log(torch.clamp(ratio, min=1e-6) / base) / self.step, -1.0, 1.0)

    def sample(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A reparameterized ratio, the action the critics see for it (:meth:`critic_action` of ``tanh(u)``) and the
        log-density of ``tanh(u)`` (see below)."""
        mean, log_std = self.distribution(observation)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        squashed = torch.tanh(u)
        ratio = self.to_ratio(observation, squashed)
        action = self.critic_action(observation, squashed, ratio)
        # |d ratio / d u| is scale (1 - tanh^2) for absolute actions. For relative ones the density is of
        # the log-ratio change (step (1 - tanh^2)): in ratio space it would grow with the ratio, and the
        # entropy bonus would then pay the policy to bid high.
        slope = self.scale if self.step == 0 else self.step
        log_prob = (
            -0.5 * ((u - mean) / std) ** 2
            - log_std
            - 0.5 * math.log(2 * math.pi)
            - torch.log(slope * (1 - squashed.pow(2)) + 1e-6)
        )
        return ratio, action, log_prob

    def critic_action(self, observation: torch.Tensor, squashed: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
        """The action the critics see for ``squashed``: itself, unless its ratio was clipped (at ``RATIO_MAX``).

        The replay buffer keeps ratios, and the critics learn on :meth:`to_action` of them, so every squashed action
        whose ratio clipped is trained as the one action that lands on the bound. Fed the raw squashed action instead,
        the actor and the bootstrap read the critics where they never learned (relative actions above
        ``log(RATIO_MAX / base) / step``, reached once the base exceeds ``RATIO_MAX * exp(-step)``). Where nothing
        clipped the values are ``squashed``'s exactly; where it clipped the gradient is zero, as the ratio's is.
        """
        if self.step == 0:
            unclipped = self.offset + self.scale * squashed
        else:
            unclipped = self.base(observation) * torch.exp(self.step * squashed)
        return torch.where(ratio != unclipped, self.to_action(observation, ratio), squashed)

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        """The deterministic ratio (the mean's image): what evaluation and export use."""
        mean, _ = self.distribution(observation)
        return self.to_ratio(observation, torch.tanh(mean))


class TwinQ(nn.Module):
    """Two independent Q networks on (observation, squashed action); SAC uses their minimum."""

    def __init__(self, inputs: int, hidden: int = 128):
        super().__init__()
        self.q1 = mlp(inputs + 1, hidden, 1)
        self.q2 = mlp(inputs + 1, hidden, 1)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``action``: the squashed action in ``[-1, 1]`` (:meth:`TanhGaussianPolicy.to_action` of the ratio)."""
        x = torch.cat([observation, action.unsqueeze(-1)], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)
