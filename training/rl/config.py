"""What a SAC run trains with: :class:`SACConfig`, its per-setting defaults, and the reference controller it names.

Torch-free (nothing this module imports reaches torch), so that ``rcb train`` builds its options from the fields
below and answers ``--help`` without loading torch. Each field's docstring is also its option's help text
(``rcb train --FIELD-NAME``); ``metadata`` holds what the command line needs beyond the type and default: the
choices, the accepted range, the metavar, the algorithms an option is for (``algos``), or ``option: False`` for a
field that is not an option.

Where the defaults leave the paper's appendix, each for a reason measured on validation days (docs/cli.md):

* relative actions, ``ratio_t = ratio_{t-1} exp(0.3 tanh(u))`` (:attr:`SACConfig.action_step`): a slot's action
  moves the ratio level for the rest of the day, which the critic can credit; absolute ratios on [0, 4] learn a
  timid policy (validation score 0.41 against 0.72-0.75);
* ``n``-step critic targets for end-of-day rewards, and a critic refit when a curriculum stage begins;
* the actor climbs the mean of the twin critics (their minimum leaves ROI slack unspent);
* a small initial temperature (0.001): with rewards of order 1 per day, SAC's usual 0.1-1 lets the entropy bonus
  of 48 slots outweigh the objective.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

from model.controller import GAIN_FIELDS, ControllerGains, Reference
from training.replay.dayset import VALIDATION_FRACTION, validation_folds
from training.rl.curriculum import PAPER_CURRICULUM, SPARSE_ONLY, LagrangianStage, Stage, USCBStage

CURRICULA: dict[str, tuple[Stage, ...]] = {
    "hard": SPARSE_ONLY,
    "crl": PAPER_CURRICULUM,
    "cbrl": PAPER_CURRICULUM,
    "uscb": (USCBStage("uscb", epochs=None),),
    "rcpo": (LagrangianStage("rcpo", epochs=None),),
}
"""Each algorithm's curriculum: the variants of one trainer."""
ALGOS: tuple[str, ...] = tuple(CURRICULA)
"""The choices of :attr:`SACConfig.algo`: ``hard``, ``crl``, ``cbrl``, ``uscb``, ``rcpo``."""

RESIDUAL_ROI_MARGIN: dict[str, float] = {"mc": 0.05, "sc": 0.0}
"""A residual run's default ROI margin, per setting (:attr:`SACConfig.roi_margin`). MC: 0.05, the size of residual
runs' near misses, keeps test and OOD constraint satisfaction as high or higher. SC: 0, because there the PID's days
end near ``L`` and a 5% margin's reward prefers a PID bidding 15% lower, which the score does not
(``python -m research.reward_probe``)."""
START_AT_CONTROLLER: dict[str, bool] = {"mc": False, "sc": True}
"""A residual run's default :attr:`SACConfig.start_at_controller`, per setting. MC: off, because six validation days
can rank a market's PID above its trained epochs and be wrong by 0.06 ANS on test."""
SELECTION_SEEDS: dict[str, int] = {"mc": 1, "sc": 5}
"""CBRL's default :attr:`SACConfig.selection_seeds`, per setting. SC: 5, with which more of the suite's test and OOD
rows meet the bar than with one stream. MC: 1, as five streams keep the same epoch as one."""
LATE_SELECTION: dict[str, bool] = {"mc": False, "sc": True}
"""Whether a CBRL run of the setting trains on bootstrap days and keeps the validation argmax among the last
quarter of its epochs by default (:attr:`SACConfig.bootstrap_days`, :attr:`SACConfig.select_from`). SC: on, which
meets the bar on every row of the suite the plain argmax meets, with a larger summed gap. MC: off, as its runs
validate best in the curriculum's first stage and the last quarter's epochs score 0.12 lower."""


def last_quarter(epochs: int) -> int:
    """The first epoch of a run's last quarter: 18 of 24 epochs (at least one epoch is left out, if there are two)."""
    return epochs - max(epochs // 4, 1) if epochs > 1 else 0


@dataclass
class SACConfig:
    """Hyperparameters of a SAC run (defaults: the paper's appendix where it says, CleanRL's elsewhere)."""

    algo: str = field(default="crl", metadata={"choices": ALGOS})
    """hard (the sparse indicator reward, Eq. 5), crl (the three-stage curriculum, Eq. 7 then Eq. 5), cbrl (the
    curriculum plus the posterior encoder: policy and critics condition on z ~ q(z | tau)), or the soft-combination
    rivals uscb (a gamma^violation penalty) and rcpo (a Lagrangian, by dual ascent)."""
    epochs: int = field(default=24, metadata={"range": (1, None)})
    """Training epochs; one epoch plays every training day ``episodes_per_day`` times."""
    episodes_per_day: int = field(default=4, metadata={"range": (1, None)})
    """Stochastic episodes collected per training day and epoch."""
    updates_per_epoch: int = field(default=600, metadata={"range": (1, None)})
    """Gradient steps per epoch."""
    batch_size: int = field(default=256, metadata={"range": (1, None)})
    """Transitions per gradient step, drawn 16 at a time from whole episodes."""
    stage_refit_updates: int = field(default=300, metadata={"range": (0, None)})
    """Critic-only updates when a curriculum stage begins: the new reward's values are refitted before the actor
    follows them (without them, CBRL's policy collapses for an epoch at the switch to the sparse original problem)."""
    buffer_episodes: int = field(default=4000, metadata={"range": (1, None)})
    """Replay capacity in whole episodes, the oldest let go first (each epoch collects the train days times
    ``episodes_per_day``)."""
    gamma: float = field(default=0.99, metadata={"range": (0.0, 1.0)})
    """Discount factor of the critics' targets."""
    n_step: int = field(default=8, metadata={"range": (1, 48)})
    """Critic targets from ``n``-step returns in the stages rewarded at the day's end only (the original problem,
    USCB, RCPO; 48: the whole day): the terminal reward reaches early slots in 48 / n bootstraps instead of 48 (a
    slight off-policy bias, the usual trade). Dense curriculum stages keep 1-step targets: summed slot penalties
    make the critic's targets large and the policy stop bidding."""
    tau: float = field(default=0.005, metadata={"range": (0.0, 1.0)})
    """Polyak factor of the target critics."""
    learning_rate: float = field(default=3e-4, metadata={"range": (0.0, None)})
    """Adam's step for every network (appendix)."""
    lr_milestones: tuple[int, ...] = (4000, 8000, 12000)
    """Gradient steps at which every learning rate halves, comma-separated and increasing (appendix; with a larger
    ``updates_per_epoch``, scale them alike to keep the schedule's epochs)."""
    hidden: int = field(default=128, metadata={"range": (1, None)})
    """Width of the actor's and critics' two hidden layers."""
    action_step: float = field(default=0.3, metadata={"range": (0.01, 2.0)})
    """Largest log-ratio move of one action: the policy multiplies its base ratio (the last slot's, or a residual
    run's controller's) by ``exp(action_step tanh(u))``, relative actions
    (:class:`~training.rl.networks.TanhGaussianPolicy`)."""
    start_ratio: float = field(default=1.0, metadata={"range": (0.0, 4.0)})
    """The ratio the first slot's relative action scales (a run that is not residual)."""
    residual: bool | None = None
    """Learn a correction of the PID tuned on the train days, ``ratio_t = c_t exp(action_step tanh(u))`` with
    ``c_t`` the PID's ratio (:attr:`controller`, read as the ``controller_ratio`` feature), not the control law
    itself. Default: residual for cbrl (above the non-residual CBRL on every market of the suite), not for the
    rivals."""
    roi_margin: float | None = field(default=None, metadata={"range": (0.0, 0.5)})
    """The rewards hold each training episode to ``L (1 + roi_margin)`` (the features, the constraints and model
    selection keep ``L``): a policy that spends its ROI slack down to ``L`` on train days falls just below it on days
    it has not seen, and a margin keeps a buffer, as a tuned PID does by itself. Default: 0.05 for a residual MC
    run, else 0."""
    controller: dict[str, Any] | None = field(default=None, metadata={"option": False})
    """A residual run's reference controller, filled by ``rcb train`` from the home market: the PID gains
    (:data:`model.controller.GAIN_FIELDS`) and the train days' ``traffic_profile``, as the model card carries them."""
    initial_alpha: float = field(default=0.001, metadata={"range": (0.0, None)})
    """Starting entropy temperature, then tuned toward ``target_entropy``."""
    target_entropy: float = -2.5
    """SAC's entropy target for the temperature, in nats of the log-ratio change's density (relative actions) or
    the ratio's (absolute). Relative actions compound, a slot's noise persisting, so they want a lower target than
    the usual ``-dim(action)``."""
    reward_scale: float = field(default=1.0, metadata={"range": (0.0, None)})
    """Multiplies every reward (D/D* and normalized violations are of order 1 per episode)."""
    uscb_gamma: float = field(default=3.0, metadata={"range": (1.0, None)})
    """uscb: the penalty base gamma (tuned by training several and selecting on validation days)."""
    rcpo_multiplier: float = field(default=1.0, metadata={"range": (0.0, None)})
    """rcpo: the initial Lagrange multiplier."""
    rcpo_learning_rate: float = field(default=1.0, metadata={"range": (0.0, None)})
    """rcpo: the dual-ascent step on the mean signed constraint gap of each epoch's episodes
    (:func:`training.rl.rewards.constraint_gap`; tuned by training several and selecting on validation days)."""
    latent_dim: int = field(default=8, metadata={"range": (1, None)})
    """cbrl: the size of the latent z."""
    kl_weight: float = field(default=0.01, metadata={"range": (0.0, None)})
    """cbrl: the weight of KL(q || N(0, I)) against the critic's squared Bellman error in the ELBO (Eq. 8)."""
    actor_mean_q: bool = True
    """The actor climbs the mean of the twin critics instead of their minimum (the targets keep the minimum): the
    minimum's pessimism leaves 10-20% of the ROI slack unspent on validation days."""
    posterior_initial_std: float | None = field(default=None, metadata={"range": (0.0, None)})
    """cbrl: the initial standard deviation of q(z | tau). Default: PyTorch's initialization (about 0.7)."""
    torch_threads: int = field(default=1, metadata={"range": (1, None)})
    """Intra-op threads: the networks are small, so one thread is fastest and leaves a core to the simulator."""
    auto_curriculum: bool = field(default=False, metadata={"algos": ("crl", "cbrl")})
    """crl and cbrl: learn each curriculum stage's ROI relaxation ``b_k`` by regret minimization (appendix) instead
    of keeping the paper's fixed 0.1 and 0.2."""
    bootstrap_days: bool | None = None
    """Each epoch, replay every train day as a Poisson(1) resample of its impressions
    (:mod:`training.replay.day_bootstrap`; fresh each epoch, the same for the day's ``episodes_per_day`` episodes),
    so the policy meets new luck in the day's regime instead of the logged day's again; model selection plays the
    logged days. Default: on for cbrl in SC, with late-epoch selection, else off."""
    relaxed_stages: bool = field(default=True, metadata={"algos": ("crl", "cbrl")})
    """crl and cbrl: open with the paper's relaxed curriculum stages (cold start ``b`` = 0.1, then warm-up 0.2); off:
    the original problem from the first epoch (a residual policy already starts near its controller)."""
    start_at_controller: bool | None = None
    """Residual runs: the policy starts as its controller exactly (the actor's mean starts at 0), and model selection
    scores that untrained policy on the validation days first, so a trained epoch is kept only where it beats the
    controller there. Default: on for a residual SC run, else off."""
    validation_fraction: float = field(default=VALIDATION_FRACTION, metadata={"range": (0.0, 0.5)})
    """Share of the train days held out for model selection (:func:`training.replay.dayset.split_validation`)."""
    validation_fold: int = field(default=0, metadata={"range": (0, None)})
    """Which of the ``1 / validation_fraction`` disjoint folds of the train days model selection holds out: every
    fifth day from day K (0: the days ``rcb evaluate --split validation`` reads). An ensemble's runs trained on folds
    0..4 learn from, and are selected on, all the train days. Pooled markets hold out each market's own fold."""
    selection_seeds: int | None = field(default=None, metadata={"range": (1, None)})
    """How many noise streams model selection plays each validation day with (play seeds 0..K-1, the posterior
    samples of ``rcb evaluate --seeds K``); an epoch's validation score is their mean, because a CBRL policy's score on
    a few days moves with its posterior samples. Default: 5 for cbrl in SC, else 1 (the rivals' deterministic
    policies play every stream alike)."""
    select_from: int | None = field(default=None, metadata={"range": (0, None)})
    """The first epoch model selection may keep (:mod:`training.rl.epoch_selection`); the earlier epochs and the
    untrained controller are then not candidates (6: the original problem's first epoch under the default
    curriculum). Default: for cbrl in SC the last quarter of the epochs (18 of 24), else 0 (every epoch and the
    controller)."""
    init_from: str | None = field(default=None, metadata={"metavar": "RUN"})
    """Fine-tune: start from the last epoch's networks of RUN, a finished ``rcb train`` run of the same setting and
    algorithm (actor, critics and their targets, posterior encoder, temperature), with fresh optimizers, schedule
    and curriculum; a residual run corrects its own market's controller, and model selection's first candidate is
    the carried policy. Default: fresh networks."""
    seed: int = field(default=0, metadata={"range": (0, None)})
    """Seeds the networks, collection and sampling."""
    curriculum: tuple[Stage, ...] = field(default=(), repr=False, metadata={"option": False})
    """The stages trained in order, derived from ``algo`` and its options (:data:`CURRICULA`)."""

    def __post_init__(self) -> None:
        if self.algo not in CURRICULA:
            raise ValueError(f"unknown algo {self.algo!r}; SAC supports {', '.join(CURRICULA)}")
        if self.residual is None:
            self.residual = self.algo == "cbrl"
        if self.start_at_controller and not self.residual:
            raise ValueError("start_at_controller needs a residual run (it starts at the reference controller)")
        if not 0 <= self.validation_fold < validation_folds(self.validation_fraction):
            raise ValueError(
                f"validation_fold must be in 0..{validation_folds(self.validation_fraction) - 1}"
                f" (validation_fraction {self.validation_fraction})"
            )
        if self.selection_seeds is not None and self.selection_seeds < 1:
            raise ValueError(f"selection_seeds must be >= 1, not {self.selection_seeds}")
        self._check_select_from()
        if not self.curriculum:
            stages = CURRICULA[self.algo]
            if self.algo == "uscb":  # CURRICULA's uscb and rcpo entries are one stage of their own kind
                stages = (replace(cast(USCBStage, stages[0]), gamma=self.uscb_gamma),)
            elif self.algo == "rcpo":
                stages = (replace(cast(LagrangianStage, stages[0]), multiplier=self.rcpo_multiplier),)
            elif not self.relaxed_stages:
                stages = SPARSE_ONLY
            self.curriculum = stages

    def resolve(self, setting: str) -> SACConfig:
        """Fill the defaults that depend on the setting the run trains for (the ROI margin, the start at the
        controller, the selection seeds, bootstrap days and late-epoch selection); a choice already made is kept.
        Idempotent; returns ``self``."""
        if self.roi_margin is None:
            self.roi_margin = RESIDUAL_ROI_MARGIN[str(setting)] if self.residual else 0.0
        if self.start_at_controller is None:
            self.start_at_controller = bool(self.residual) and START_AT_CONTROLLER[str(setting)]
        if self.selection_seeds is None:  # without a posterior to sample, every stream plays the same episodes
            self.selection_seeds = SELECTION_SEEDS[str(setting)] if self.bayesian else 1
        late = self.bayesian and LATE_SELECTION[str(setting)]
        if self.bootstrap_days is None:
            self.bootstrap_days = late
        if self.select_from is None:
            self.select_from = last_quarter(self.epochs) if late else 0
        self._check_select_from()
        return self

    def _check_select_from(self) -> None:
        if self.select_from is None:  # resolve() fills it
            return
        if self.select_from < 0 or (self.select_from and self.select_from >= self.epochs):
            raise ValueError(
                f"select_from must be in 0..{self.epochs - 1} (an epoch of the run), not {self.select_from}"
                " (given, or kept from the run being resumed)"
            )

    @property
    def bayesian(self) -> bool:
        """Whether the run learns CBRL's posterior encoder."""
        return self.algo == "cbrl"

    def reference_controller(self) -> Reference | None:
        """The residual policy's reference controller (None for a run that is not residual)."""
        return reference_of(bool(self.residual), self.controller)

    def to_dict(self) -> dict[str, Any]:
        """The config as run.json and the model files hold it."""
        out = asdict(self)
        out["curriculum"] = [asdict(s) for s in self.curriculum]
        return out


def reference_of(residual: bool, controller: dict[str, Any] | None) -> Reference | None:
    """A run's reference controller from its config's ``residual`` and ``controller`` (:attr:`SACConfig.controller`,
    as run.json and best.pt hold it): the PID with those gains and traffic profile; None unless it is residual."""
    if not residual:
        return None
    if not controller:
        raise ValueError("a residual run's config lacks its reference controller")
    return ControllerGains.with_profile(controller["traffic_profile"], {k: controller[k] for k in GAIN_FIELDS})
