"""Peer trace samplers from the curriculum / prioritised-replay literature (ecosystem §4).

* :class:`PrioritizedLevelReplaySampler` (``plr``): Prioritized Level Replay (Jiang,
  Grefenstette, Rocktäschel, ICML 2021) with a trace as the "level"; re-implemented from the
  paper and the ecosystem digest §4.4 (the original code is CC-BY-NC and is not copied).
* :class:`WorstCaseSampler` (``worst_case``): the fixed-trace-set analogue of adversarial
  "robustify" training (Gilad et al., HotNets 2019; ecosystem §4.7): prefer the traces with the
  lowest recent return, with an ε-uniform floor so that nothing starves.

Both work at trace level and take plain arrays only; ``memberships`` is optional and used only
to fill ``clusters`` so that the harness can log their weights per cluster.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from plume.checks import choice, fail, fraction, positive, real
from plume.sampling.base import SamplerNeeds, TraceSampler
from plume.sampling.checks import valid_trace
from plume.sampling.mixture import NEVER, EpsilonMixtureSampler
from plume.sampling.weights import as_memberships

__all__ = ["PLRConfig", "PrioritizedLevelReplaySampler", "WorstCaseConfig", "WorstCaseSampler",
           "plr_replay_distribution"]

SCORE_TRANSFORMS = ("rank", "power", "softmax")
PLR_SCORES = ("value_l1", "positive_value_loss", "return_delta")
REPLAY_SCHEDULES = ("proportionate", "fixed")


def _score_weights(scores: np.ndarray, transform: str, temperature: float) -> np.ndarray:
    """``h(S)`` over the given scores (all of them "seen")."""
    s = np.asarray(scores, dtype=np.float64)
    if transform == "rank":
        order = np.argsort(-s, kind="stable")  # rank 1 = highest score; ties: lower index first
        ranks = np.empty(s.size, dtype=np.float64)
        ranks[order] = np.arange(1, s.size + 1)
        return ranks ** (-1.0 / temperature)
    if transform == "power":
        return np.maximum(s, 0.0) ** (1.0 / temperature)
    if transform == "softmax":
        z = s / temperature
        return np.exp(z - z.max())
    raise ValueError(f"score_transform must be one of {SCORE_TRANSFORMS}, got {transform!r}")


def plr_replay_distribution(
    scores: np.ndarray,
    staleness: np.ndarray,
    seen: np.ndarray,
    *,
    score_transform: str = "rank",
    temperature: float = 0.1,
    staleness_coef: float = 0.1,
    staleness_temperature: float = 1.0,
) -> np.ndarray:
    """PLR's replay distribution ``P_replay = (1 − ρ) P_S + ρ P_C`` over the seen traces.

    ``P_S(i) = h(S_i) / Σ_seen h`` with ``h = 1 / rank(S_i)^{1/β}`` (``rank``; rank 1 = highest
    score among seen traces, ties broken by lower index), ``(S_i)^{1/β}`` (``power``, negative
    scores clipped at 0) or ``exp(S_i / β)`` (``softmax``); ``P_C(i) = C_i^{1/β_C} / Σ_seen``
    where ``C_i`` is the staleness (draws since trace i was last drawn; the paper's ``c − C_i``).
    Unseen traces get 0. If the staleness part has no mass (all zero) ``P_S`` is used alone; if
    ``P_S`` has no mass (``power`` with all scores <= 0) it is uniform over seen traces.
    Returns zeros when nothing is seen.
    """
    seen = np.asarray(seen, dtype=bool)
    n = seen.size
    out = np.zeros(n)
    if not seen.any():
        return out
    h = _score_weights(np.asarray(scores, dtype=np.float64)[seen], score_transform, temperature)
    total = h.sum()
    p_s = h / total if total > 0 else np.full(h.size, 1.0 / h.size)
    p = p_s
    if staleness_coef > 0:
        c = np.asarray(staleness, dtype=np.float64)[seen] ** (1.0 / staleness_temperature)
        c_total = c.sum()
        if c_total > 0:
            p = (1.0 - staleness_coef) * p_s + staleness_coef * (c / c_total)
    out[seen] = p
    return out


def _record_episode(sampler: TraceSampler, trace_index: int, rewards: np.ndarray) -> tuple[int, float]:
    """Check an episode report, count it, and return (trace, undiscounted return)."""
    trace = valid_trace(trace_index, sampler.n_traces)
    TraceSampler.update(sampler, trace, rewards)
    ret = float(np.sum(np.asarray(rewards, dtype=np.float64)))
    if not math.isfinite(ret):
        raise ValueError(f"episode on trace {trace} has non-finite rewards")
    return trace, ret


@dataclass
class PLRConfig:
    """PLR's options (defaults: the paper's Procgen setting and its command-line defaults)."""

    score: str = "value_l1"
    """``value_l1`` (the paper's best), ``positive_value_loss`` (PLR⊥), or ``return_delta``
    (the learner-free proxy); the first two need the algorithm's learner signal."""
    score_transform: str = "rank"
    """``rank``, ``power`` or ``softmax`` (see :func:`plr_replay_distribution`)."""
    temperature: float = 0.1
    """β of the score transform."""
    staleness_coef: float = 0.1
    """ρ: the staleness share of the replay distribution."""
    staleness_temperature: float = 1.0
    """β_C of the staleness transform."""
    rho: float = 1.0
    """Fraction of traces seen before any replay (1.0: a first pass over every trace)."""
    replay_schedule: str = "proportionate"
    """``proportionate`` (replay with probability = fraction seen) or ``fixed`` (1 − nu)."""
    nu: float = 0.5
    """Probability of drawing an unseen trace under the ``fixed`` schedule."""
    score_ema: float = 1.0
    """PLR's α: the rate at which new scores replace old ones (1: replace)."""
    proxy_ema: float = 0.1
    """Rate of the per-trace moving mean return the proxy score compares with."""

    def __post_init__(self) -> None:
        self.score = choice("score", self.score, PLR_SCORES)
        self.score_transform = choice("score_transform", self.score_transform, SCORE_TRANSFORMS)
        self.replay_schedule = choice("replay_schedule", self.replay_schedule, REPLAY_SCHEDULES)
        self.temperature = positive("temperature", self.temperature)
        self.staleness_coef = fraction("staleness_coef", self.staleness_coef)
        self.staleness_temperature = positive("staleness_temperature", self.staleness_temperature)
        for name in ("rho", "nu", "score_ema", "proxy_ema"):
            setattr(self, name, fraction(name, getattr(self, name)))


class PrioritizedLevelReplaySampler(TraceSampler):
    """Prioritized Level Replay over traces.

    Per trace ``i``: score ``S_i``, staleness ``C_i`` (draws since last drawn) and a seen flag
    (set by the first :meth:`update` of the trace, as in PLR). A draw:

    1. replay decision: with the ``proportionate`` schedule (PLR's default) replay with
       probability ``P_seen`` (fraction of traces seen) once ``P_seen >= rho``, else draw an
       unseen trace uniformly; ``fixed``: once ``P_seen >= rho`` replay with probability
       ``1 − nu`` (always once all are seen). ``rho=1.0`` (PLR's command-line default) means a
       first pass over unseen traces before any replay. Once every trace is seen (a finite,
       fully known trace set) PLR is pure prioritised replay.
    2. replay: from :func:`plr_replay_distribution` (rank transform, β = ``temperature`` 0.1,
       ρ = ``staleness_coef`` 0.1: the paper's Procgen setting).

    Score (:meth:`update`), chosen by ``score``, from ``learner_stats`` when present:

    * ``value_l1`` (paper's best): ``learner_stats["value_l1"]`` (a float), else the mean of
      ``|advantages|`` (GAE), else the mean ``|returns − values|``;
    * ``positive_value_loss`` (PLR⊥): the mean of ``max(advantages, 0)``, else of
      ``max(returns − values, 0)``;
    * ``return_delta``: always the proxy below.

    **Proxy when the learner statistics are absent** (Plume's environments call
    ``update(trace, rewards)`` only, because the algorithm never sees the sampler): the score is
    ``|R − M_i|``, with ``R`` the episode's (undiscounted) return and ``M_i`` an exponential
    moving average (rate ``proxy_ema``) of trace i's earlier returns, i.e. how much the
    controller's result on that trace is still changing (a learning-progress signal). On a
    trace's first episode ``M_i`` is the running mean return over all episodes so far (score 0
    for the very first episode). A warning is issued the first time the proxy replaces a
    requested learner score; ``proxy_scores`` counts how often it was used.

    New scores replace old ones with ``S_i ← (1 − score_ema) S_i + score_ema · score``
    (``score_ema`` = PLR's α, default 1: replace). Deviations from the PLR code: ranks are taken
    among seen traces only, ties go to the lower index, and staleness is tracked whatever
    ``staleness_coef`` is.
    """

    name = "plr"
    CONFIG = PLRConfig
    NEEDS = SamplerNeeds(learner_signal=True)  # ``memberships`` is optional (logging only)

    def __init__(self, n_traces: int, rng: np.random.Generator, config: PLRConfig | None = None,
                 *, memberships: np.ndarray | None = None, **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        if memberships is not None:
            self.clusters = np.argmax(as_memberships(memberships, self.n_traces), axis=1)

        n = self.n_traces
        self.scores = np.zeros(n)
        self.seen = np.zeros(n, dtype=bool)
        self.n_seen = 0
        self.clock = 0  # total draws by this sampler
        self.last_drawn = np.zeros(n, dtype=np.int64)  # clock value just after the last draw
        self.mean_return = np.zeros(n)  # proxy: EMA of each trace's returns
        self._return_sum = 0.0  # proxy: running mean over all episodes
        self._return_count = 0
        self.proxy_scores = 0
        self.replay_draws = 0
        self._warned = False
        self._score_cdf: np.ndarray | None = None  # cached cdf of P_S over all traces

    # -- distributions --------------------------------------------------------------------------
    def staleness(self) -> np.ndarray:
        return (self.clock - self.last_drawn).astype(np.float64)

    def replay_distribution(self) -> np.ndarray:
        cfg = self.config
        return plr_replay_distribution(
            self.scores, self.staleness(), self.seen,
            score_transform=cfg.score_transform, temperature=cfg.temperature,
            staleness_coef=cfg.staleness_coef, staleness_temperature=cfg.staleness_temperature,
        )

    def replay_probability(self) -> float:
        """Probability that the next draw replays a seen trace (instead of an unseen one)."""
        n, n_seen = self.n_traces, self.n_seen
        if n_seen == 0:
            return 0.0
        if n_seen == n:
            return 1.0
        frac = n_seen / n
        if frac < self.config.rho:
            return 0.0
        return frac if self.config.replay_schedule == "proportionate" else 1.0 - self.config.nu

    def probabilities(self) -> np.ndarray:
        replay = self.replay_probability()
        probs = np.zeros(self.n_traces)
        if replay > 0:
            probs += replay * self.replay_distribution()
        if replay < 1:
            unseen = ~self.seen
            probs[unseen] += (1.0 - replay) / unseen.sum()
        return probs

    # -- drawing --------------------------------------------------------------------------------
    def _score_part_cdf(self) -> np.ndarray:
        if self._score_cdf is None:
            p = plr_replay_distribution(self.scores, np.zeros(self.n_traces), self.seen,
                                        score_transform=self.config.score_transform,
                                        temperature=self.config.temperature, staleness_coef=0.0)
            cdf = np.cumsum(p)
            cdf /= cdf[-1]
            self._score_cdf = cdf
        return self._score_cdf

    def sample(self) -> int:
        rng = self.rng
        replay = self.replay_probability()
        if replay >= 1.0 or (replay > 0.0 and rng.random() < replay):
            self.replay_draws += 1
            u = rng.random()
            rho = self.config.staleness_coef
            index = -1
            if u < rho:  # staleness component P_C (one variate decides component and trace)
                v = u / rho
                stale = (self.clock - self.last_drawn) * self.seen
                if self.config.staleness_temperature != 1.0:
                    stale = stale ** (1.0 / self.config.staleness_temperature)
                cdf = np.cumsum(stale, dtype=np.float64)
                if cdf[-1] > 0:
                    index = int(np.searchsorted(cdf, v * cdf[-1], side="right"))
                # else: no staleness mass anywhere, P_replay = P_S (see plr_replay_distribution)
            else:
                v = (u - rho) / (1.0 - rho)
            if index < 0:  # score component P_S
                index = int(np.searchsorted(self._score_part_cdf(), v, side="right"))
        else:
            unseen = np.flatnonzero(~self.seen)
            index = int(unseen[min(int(rng.random() * unseen.size), unseen.size - 1)])
        index = min(index, self.n_traces - 1)
        self.clock += 1
        self.last_drawn[index] = self.clock
        self.draws[index] += 1
        return index

    def sample_many(self, count: int) -> np.ndarray:
        # sequential on purpose: each draw changes the staleness of every trace
        return np.fromiter((self.sample() for _ in range(int(count))), dtype=np.int64,
                           count=int(count))

    # -- scores ---------------------------------------------------------------------------------
    @classmethod
    def needs(cls, config: PLRConfig) -> SamplerNeeds:
        """``value_l1`` and ``positive_value_loss`` come from the learner; ``return_delta`` not."""
        return dataclasses.replace(cls.NEEDS, learner_signal=config.score != "return_delta")

    def _learner_score(self, stats: dict[str, Any]) -> float | None:
        if self.config.score == "return_delta":
            return None
        if self.config.score in stats:  # a per-episode score computed by the learner side
            return float(stats[self.config.score])
        adv = stats.get("advantages")
        if adv is None and "returns" in stats and "values" in stats:
            adv = np.asarray(stats["returns"], dtype=np.float64) - np.asarray(
                stats["values"], dtype=np.float64)
        if adv is None:
            return None
        adv = np.asarray(adv, dtype=np.float64).reshape(-1)
        if adv.size == 0:
            return 0.0
        if self.config.score == "value_l1":
            return float(np.abs(adv).mean())
        return float(np.maximum(adv, 0.0).mean())

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        trace, ret = _record_episode(self, trace_index, rewards)
        score = self._learner_score(learner_stats)
        if score is None:
            if self.config.score != "return_delta" and not self._warned:
                warnings.warn(
                    f"PLR score {self.config.score!r} needs learner statistics (value_l1, "
                    "advantages or returns+values) in update(); using the |return - moving "
                    "mean| proxy",
                    RuntimeWarning, stacklevel=2,
                )
                self._warned = True
            self.proxy_scores += 1
            if self.episodes[trace] > 1:
                reference = self.mean_return[trace]
            elif self._return_count > 0:
                reference = self._return_sum / self._return_count
            else:
                reference = ret
            score = abs(ret - reference)
        if not math.isfinite(score):
            raise ValueError(f"PLR score for trace {trace} is not finite ({score})")
        # proxy statistics are kept whatever the score source, so switching is seamless
        if self.episodes[trace] > 1:
            self.mean_return[trace] += self.config.proxy_ema * (ret - self.mean_return[trace])
        else:
            self.mean_return[trace] = ret
        self._return_sum += ret
        self._return_count += 1
        rate = self.config.score_ema
        self.scores[trace] = (1.0 - rate) * self.scores[trace] + rate * score
        if not self.seen[trace]:
            self.seen[trace] = True
            self.n_seen += 1
        self._score_cdf = None

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "scores": self.scores.copy(),
            "seen": self.seen.copy(),
            "clock": self.clock,
            "last_drawn": self.last_drawn.copy(),
            "mean_return": self.mean_return.copy(),
            "return_sum": self._return_sum,
            "return_count": self._return_count,
            "proxy_scores": self.proxy_scores,
            "replay_draws": self.replay_draws,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if np.asarray(state["scores"]).shape != (self.n_traces,):
            raise ValueError(f"state does not cover {self.n_traces} traces")
        super().load_state_dict(state)
        self.scores[:] = state["scores"]
        self.seen[:] = state["seen"]
        self.n_seen = int(self.seen.sum())
        self.clock = int(state["clock"])
        self.last_drawn[:] = state["last_drawn"]
        self.mean_return[:] = state["mean_return"]
        self._return_sum = float(state["return_sum"])
        self._return_count = int(state["return_count"])
        self.proxy_scores = int(state["proxy_scores"])
        self.replay_draws = int(state["replay_draws"])
        self._score_cdf = None


@dataclass
class WorstCaseConfig:
    """Options of the worst-case sampler."""

    floor: float = 0.1
    """Share of uniform draws: every trace keeps probability >= floor / n_traces."""
    temperature: float = 1.0
    """Softmax temperature over standardised returns (smaller: greedier)."""
    ema: float = 0.5
    """Rate of each trace's moving mean return, in (0, 1]."""
    quantile: Optional[float] = None
    """q in (0, 1]: uniform over the traces at or below the q-quantile of recent returns
    instead of the softmax; None: softmax."""

    def __post_init__(self) -> None:
        self.floor = fraction("floor", self.floor)
        self.temperature = positive("temperature", self.temperature)
        self.ema = fraction("ema", self.ema)
        if self.ema == 0:
            fail("ema", self.ema, "in (0, 1]")
        if self.quantile is not None:
            self.quantile = real("quantile", self.quantile)
            if not 0.0 < self.quantile <= 1.0:
                fail("quantile", self.quantile, "in (0, 1] or None")


class WorstCaseSampler(EpsilonMixtureSampler):
    """Prefer the traces with the lowest recent return, with a uniform floor.

    Recent return ``R_i``: exponential moving average (rate ``ema``) of the undiscounted returns
    of trace i's finished training episodes (first episode: its return). Traces without an
    episode yet count as the worst seen so far (so they are explored). Prioritised distribution:

    * ``quantile=None`` (default): ``softmax(−z / temperature)`` with ``z`` the returns
      standardised across traces (all equal: uniform);
    * ``quantile=q`` in (0, 1]: uniform over the traces whose ``R_i`` is at most the q-quantile
      (a CVaR-style bottom set).

    Then ``floor`` of the mass is spread uniformly (ε mixing), so every trace keeps probability
    ``>= floor / n_traces``. Uniform until the first episode is recorded. The distribution is
    rebuilt lazily, at the first draw after an update.
    """

    name = "worst_case"
    CONFIG = WorstCaseConfig  # ``memberships`` is optional (logging only): no NEEDS inputs

    def __init__(self, n_traces: int, rng: np.random.Generator,
                 config: WorstCaseConfig | None = None, *,
                 memberships: np.ndarray | None = None, **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        if memberships is not None:
            self.clusters = np.argmax(as_memberships(memberships, self.n_traces), axis=1)
        self.recent_return = np.zeros(self.n_traces)
        self.seen = np.zeros(self.n_traces, dtype=bool)

    def uniform_share(self) -> float:
        return self.config.floor

    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        trace, ret = _record_episode(self, trace_index, rewards)
        if self.seen[trace]:
            self.recent_return[trace] += self.config.ema * (ret - self.recent_return[trace])
        else:
            self.recent_return[trace] = ret
            self.seen[trace] = True
        self._next_due = self.prioritised_draws  # rebuild before the next prioritised draw

    def priorities(self) -> np.ndarray:
        """The prioritised distribution (before the floor) implied by the current returns."""
        n = self.n_traces
        if not self.seen.any():
            return np.full(n, 1.0 / n)
        r = np.where(self.seen, self.recent_return, self.recent_return[self.seen].min())
        if self.config.quantile is not None:
            member = r <= np.quantile(r, self.config.quantile)
            return member / member.sum()
        std = r.std()
        if not std > 0:
            return np.full(n, 1.0 / n)
        z = (r - r.mean()) / std
        logits = (z.min() - z) / self.config.temperature
        w = np.exp(logits)
        return w / w.sum()

    def _due(self) -> None:
        self.set_prioritised(self.priorities())
        self._next_due = NEVER

    def probabilities(self) -> np.ndarray:
        if self._next_due != NEVER:
            self._due()
        return super().probabilities()

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "recent_return": self.recent_return.copy(),
            "seen": self.seen.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.recent_return[:] = state["recent_return"]
        self.seen[:] = state["seen"]
