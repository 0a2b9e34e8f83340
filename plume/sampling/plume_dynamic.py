"""Plume-Dynamic (``plume_dynamic``), Plume's stage 3, and its Trace-Error ablation
(``trace_error``, α = 1: the prediction-error term only).

Takes plain arrays (``memberships``: ``(n_traces, K)`` soft or one-hot, or 1-D integer labels;
``features``: ``(n_traces, F)``), so it works without ``plume.analysis`` and without the
harness.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Optional

import numpy as np

from plume.checks import boolean, fail, fraction, integer, positive, real, sizes
from plume.sampling.base import ConfigField, SamplerNeeds
from plume.sampling.checks import valid_trace
from plume.sampling.mixture import EpsilonMixtureSampler
from plume.sampling.weights import (
    as_labels,
    as_memberships,
    cluster_weights_hard,
    cluster_weights_soft,
    minmax_scale,
)

__all__ = ["PlumeDynamicConfig", "PlumeDynamicSampler", "TraceErrorConfig",
           "TraceErrorSampler", "standardise_features"]


def standardise_features(features: np.ndarray, n_traces: int | None = None) -> np.ndarray:
    """Column-wise ``(x − mean) / std`` with the population std (ddof 0), as sklearn ``scale``.

    Constant columns (std below ~10 machine epsilons of the column scale) become 0 instead of
    dividing by zero. Raises ValueError for a wrong shape or a NaN/inf entry (naming it).
    Returns a new float64 array; a 1-D input is treated as one feature.
    """
    x = np.array(features, dtype=np.float64, copy=True)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"features must be (n_traces, n_features), got shape {x.shape}")
    if n_traces is not None and x.shape[0] != n_traces:
        raise ValueError(f"features has {x.shape[0]} rows but the sampler covers {n_traces} traces")
    if not np.all(np.isfinite(x)):
        row, col = np.argwhere(~np.isfinite(x))[0]
        raise ValueError(
            f"features has a non-finite value ({x[row, col]}) at trace {row}, feature {col}; "
            "impute or drop that feature first"
        )
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    constant = std <= 10 * np.finfo(np.float64).eps * np.maximum(1.0, np.abs(mean))
    out = np.zeros_like(x)
    keep = ~constant
    out[:, keep] = (x[:, keep] - mean[keep]) / std[keep]
    return out


@dataclass
class PlumeDynamicConfig:
    """Plume-Dynamic's options; the defaults are the reference's TraceBench constants
    (reference-code §3.2). Schedules count prioritised draws (see the sampler's docstring)."""

    alpha: float = 0.5
    """Weight of the normalised return-prediction error; 1 - alpha weighs the low-return term."""
    epsilon: float = 0.1
    """Probability that a draw is uniform over all traces instead."""
    hard: bool = False
    """Spread cluster weights over argmax labels (the reference's Puffer code) instead of the
    soft memberships (its TraceBench code)."""
    gamma: float = 0.999
    """Discount of the truncated return G, in (0, 1]."""
    n_step: int = 85
    """Rewards per episode G uses (MIN_TRACE_LEN - 5); shorter episodes are skipped."""
    train_every: int = 250
    """Train the return predictor after this many recorded episodes (MAX_HISTORY_LEN)."""
    cluster_history: int = 500
    """Per-cluster FIFO of (trace, G) used to score clusters."""
    recompute_every: int = 1125
    """Prioritised draws between weight recomputes."""
    warmup: int = 2250
    """Prioritised draws before the first recompute (uniform until then)."""
    batch_size: int = 64
    """Mini-batch size of the predictor's training passes."""
    epochs: int = 1
    """Passes over the buffer per training round."""
    learning_rate: float = 1.0e-3
    """Adam's learning rate for the predictor."""
    hidden_sizes: tuple[int, ...] = (32, 32)
    """Hidden layers of the predictor's MLP."""
    huber_delta: float = 1.0
    """Huber loss threshold (training and cluster errors)."""
    single_step_per_round: bool = False
    """Reproduce the reference's slip: one full-batch Adam step per training round."""
    torch_seed: Optional[int] = None
    """Seed of the predictor's initialisation; None: drawn from a child of the sampler's rng."""

    def __post_init__(self) -> None:
        self.alpha = fraction("alpha", self.alpha)
        self.epsilon = fraction("epsilon", self.epsilon)
        self.hard = boolean("hard", self.hard)
        self.gamma = real("gamma", self.gamma)
        if not 0.0 < self.gamma <= 1.0:
            fail("gamma", self.gamma, "in (0, 1]")
        for name, minimum in (("n_step", 1), ("train_every", 1), ("cluster_history", 1),
                              ("recompute_every", 1), ("warmup", 0), ("batch_size", 1),
                              ("epochs", 1)):
            setattr(self, name, integer(name, getattr(self, name), minimum))
        self.learning_rate = positive("learning_rate", self.learning_rate)
        self.huber_delta = positive("huber_delta", self.huber_delta)
        self.hidden_sizes = sizes("hidden_sizes", self.hidden_sizes)
        self.single_step_per_round = boolean("single_step_per_round", self.single_step_per_round)
        if self.torch_seed is not None:
            self.torch_seed = integer("torch_seed", self.torch_seed, 0)


@dataclass
class TraceErrorConfig(PlumeDynamicConfig):
    """Plume-Dynamic's options without ``alpha``, which is pinned to 1 (error term only)."""

    alpha: float = field(default=1.0, init=False)


class PlumeDynamicSampler(EpsilonMixtureSampler):
    """Plume-Dynamic: cluster weights from a return predictor's error and a low-return term.

    Per finished training episode (:meth:`update`) with at least ``n_step`` rewards, the
    truncated discounted return ``G = sum_{t < n_step} gamma^t r_t`` of its first state is stored
    with the trace: in the cluster's FIFO history (cap ``cluster_history``; cluster = argmax
    membership, as the reference) and in the predictor's training buffer. **Shorter episodes are
    skipped** (counted in ``skipped_episodes``), as in the reference; rewards after ``n_step``
    are ignored. Rewards are used as given (the environment passes them already transformed).

    Every ``train_every`` recorded episodes (the reference's MAX_HISTORY_LEN) the return
    predictor (MLP ``F → hidden_sizes → 1``, ReLU, Xavier-uniform weights, biases 0.001, Adam,
    Huber(δ) loss), whose inputs are the *standardised* trace features, trains for ``epochs``
    passes over that buffer, which is then cleared. Each pass is a random permutation split
    into ``max(n // batch_size, 1)`` mini-batches (``np.array_split``: the ``max`` the authors
    intended). ``single_step_per_round=True`` reproduces the reference as published (its
    ``min(int(n/64), 1)`` slip): one full-batch step per pass, in buffer order.

    Schedule, in *prioritised draws* (draws not taken by the ε branch: the reference's
    ``get_probs`` calls, its ``samples_trained_on`` counter): the prioritised distribution is
    uniform until the first recompute, which runs once ``warmup`` prioritised draws have been
    made, just before the next one; then a recompute every ``recompute_every`` prioritised
    draws (the draw that triggers a recompute already uses the new weights, as the reference's
    ``get_probs`` after ``calculate_class_weights``). Episodes (``update`` calls) never trigger
    a recompute; they only fill the histories and train the predictor. (The reference also needs
    ``recompute_every`` draws before the first one; with its constants, warmup 2,250 ≥ 1,125,
    that is the same.) If no episode has been recorded yet when a recompute is due, it is
    retried at every following prioritised draw.

    Recompute (reference ``calculate_class_weights``), per cluster ``k``:
    ``e_k`` = mean Huber loss of the predictor on the cluster's stored (features, G);
    ``m_k`` = mean stored G; ``e ← e / Σe`` (uniform if Σe = 0);
    ``q = minmax_scale(−m, [1, 10])`` (all-equal m gives uniform q), ``q ← q / Σq``;
    ``w = α e + (1 − α) q`` normalised; trace probabilities = ``cluster_weights_soft(memberships,
    w)`` (``hard=True``: ``cluster_weights_hard(argmax labels, w)``); then ε mixing.
    **Deviation:** the reference raises when a cluster has no stored samples; here such a
    cluster gets the largest ``e`` and the largest ``q`` among the clusters that have samples
    (before normalisation), i.e. it is treated as the most in need of training until it is
    seen. ``alpha=1`` is the paper's Trace-Error ablation.

    Exposes :meth:`cluster_weights` (current ``w``; before the first recompute, the cluster
    proportions of the memberships, which is what uniform trace sampling gives), ``history``
    (a list of ``(total draws, w)`` per recompute, for logging) and ``last_terms`` (the
    ``error``, ``low_return``, ``mean_return`` and ``history_len`` vectors of the last
    recompute).

    The model is small and runs on CPU; all torch randomness (initialisation) comes from
    ``torch_seed`` (default: drawn from a child of ``rng``), mini-batch shuffling from a child
    generator, never from global RNGs. Options are read from ``config``, never copied (``alpha``
    is also readable here); ``torch_seed`` is the seed actually used.
    """

    name = "plume_dynamic"
    CONFIG = PlumeDynamicConfig
    NEEDS = SamplerNeeds(inputs=("memberships", "features"), weight_updates=True)
    alpha = ConfigField()

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray,
                 features: np.ndarray, config: PlumeDynamicConfig | None = None,
                 **options: Any) -> None:
        super().__init__(n_traces, rng, config, **options)
        self.memberships = as_memberships(memberships, self.n_traces)
        self.n_clusters = self.memberships.shape[1]
        self.clusters = np.argmax(self.memberships, axis=1)
        if self.config.hard:
            as_labels(self.clusters, self.n_clusters)  # every cluster must win some argmax
        self.features = standardise_features(features, self.n_traces)
        self.n_features = self.features.shape[1]
        col = self.memberships.sum(axis=0)
        self._weights = col / col.sum() if not self.config.hard else (
            np.bincount(self.clusters, minlength=self.n_clusters) / self.n_traces
        )
        self._discounts = self.config.gamma ** np.arange(self.config.n_step, dtype=np.float64)
        self._start_records()
        self._next_due = self.config.warmup
        self._start_predictor(rng, self.config.torch_seed)

    def _start_records(self) -> None:
        """Empty histories, training buffer, counters and logs."""
        # histories: per-cluster ring buffers of (trace index, G)
        cap, k = self.config.cluster_history, self.n_clusters
        self._hist_trace = np.zeros((k, cap), dtype=np.int64)
        self._hist_return = np.zeros((k, cap), dtype=np.float64)
        self._hist_len = np.zeros(k, dtype=np.int64)
        self._hist_head = np.zeros(k, dtype=np.int64)
        # predictor training buffer
        self._buf_trace = np.zeros(self.config.train_every, dtype=np.int64)
        self._buf_return = np.zeros(self.config.train_every, dtype=np.float64)
        self._buf_len = 0
        # counters and logs
        self.recorded_episodes = 0
        self.skipped_episodes = 0
        self.train_rounds = 0
        self.train_steps = 0
        self.last_train_loss = float("nan")
        self.history: list[tuple[int, np.ndarray]] = []
        self.last_terms: dict[str, np.ndarray] = {}

    def _start_predictor(self, rng: np.random.Generator, torch_seed: int | None) -> None:
        """The return predictor and its optimiser, seeded from a child of ``rng``."""
        import torch

        # torch is imported where used, not stored: a module attribute would make the sampler
        # unpicklable, and SubprocVecEnv / deepcopy need to copy it
        child = rng.spawn(1)[0]
        if torch_seed is None:
            torch_seed = int(child.integers(2**62))
        self.torch_seed = int(torch_seed)
        self._train_rng = child
        gen = torch.Generator().manual_seed(self.torch_seed)
        self._model = self._build_model(gen)
        self._optimizer = torch.optim.Adam(self._model.parameters(),
                                           lr=self.config.learning_rate)
        self._x = torch.as_tensor(self.features, dtype=torch.float32)

    def _build_model(self, gen: Any) -> Any:
        import torch

        nn = torch.nn
        widths = [self.n_features, *self.config.hidden_sizes, 1]
        layers: list[Any] = []
        for fan_in, fan_out in pairwise(widths):
            lin = nn.utils.skip_init(nn.Linear, fan_in, fan_out)  # no global-RNG default init
            with torch.no_grad():
                nn.init.xavier_uniform_(lin.weight, generator=gen)
                lin.bias.fill_(0.001)
            layers += [lin, nn.ReLU()]
        return nn.Sequential(*layers[:-1])

    # -- public views ---------------------------------------------------------------------------
    def cluster_weights(self) -> np.ndarray:
        """Current cluster weights ``w`` (shape ``(K,)``, sum 1), before ε mixing."""
        return self._weights.copy()

    def predict_returns(self) -> np.ndarray:
        """The return predictor's current estimate of G for every trace, shape ``(n_traces,)``."""
        import torch

        with torch.no_grad():
            return self._model(self._x).squeeze(-1).double().numpy()

    # -- episodes and training ------------------------------------------------------------------
    def update(self, trace_index: int, rewards: np.ndarray, **learner_stats: Any) -> None:
        """Record a finished training episode (only its first ``n_step`` rewards matter)."""
        trace = valid_trace(trace_index, self.n_traces)
        super().update(trace, rewards)
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if r.shape[0] < self.config.n_step:
            self.skipped_episodes += 1
            return
        g = float(r[: self.config.n_step] @ self._discounts)
        if not math.isfinite(g):
            raise ValueError(f"episode on trace {trace} has non-finite rewards")
        k = self.clusters[trace]
        slot = self._hist_head[k]
        self._hist_trace[k, slot] = trace
        self._hist_return[k, slot] = g
        self._hist_head[k] = (slot + 1) % self.config.cluster_history
        if self._hist_len[k] < self.config.cluster_history:
            self._hist_len[k] += 1
        self._buf_trace[self._buf_len] = trace
        self._buf_return[self._buf_len] = g
        self._buf_len += 1
        self.recorded_episodes += 1
        if self._buf_len >= self.config.train_every:
            self._train_round()

    def _train_round(self) -> None:
        import torch

        n = self._buf_len
        x = self._x[torch.as_tensor(self._buf_trace[:n])]
        y = torch.as_tensor(self._buf_return[:n], dtype=torch.float32)
        self._buf_len = 0
        loss_fn = torch.nn.HuberLoss(delta=self.config.huber_delta)
        model, opt = self._model, self._optimizer
        model.train()
        loss = None
        # update() may run inside an agent's no-grad rollout: gradients are needed here.
        with torch.enable_grad():
            for _ in range(self.config.epochs):
                if self.config.single_step_per_round:
                    batches = [np.arange(n)]
                else:
                    perm = self._train_rng.permutation(n)
                    batches = np.array_split(perm, max(n // self.config.batch_size, 1))
                for batch in batches:
                    idx = torch.as_tensor(batch)
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(model(x[idx]).squeeze(-1), y[idx])
                    loss.backward()
                    opt.step()
                    self.train_steps += 1
        self.train_rounds += 1
        if loss is not None:
            self.last_train_loss = float(loss.detach())

    # -- recompute ------------------------------------------------------------------------------
    def _due(self) -> None:
        if self._hist_len.sum() == 0:
            return  # nothing recorded yet: stay uniform, retry at the next prioritised draw
        self._recompute()
        self._next_due = self.prioritised_draws + self.config.recompute_every

    def _recompute(self) -> None:
        import torch

        k, cap = self.n_clusters, self.config.cluster_history
        lens = self._hist_len
        valid = np.arange(cap)[None, :] < lens[:, None]
        traces = self._hist_trace[valid]
        returns = self._hist_return[valid]
        cluster_of = np.repeat(np.arange(k), lens)
        with torch.no_grad():
            pred = self._model(self._x[torch.as_tensor(traces)]).squeeze(-1).double().numpy()
        diff = np.abs(pred - returns)
        delta = self.config.huber_delta
        loss = np.where(diff <= delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta))
        seen = lens > 0
        safe = np.maximum(lens, 1)
        err = np.bincount(cluster_of, weights=loss, minlength=k) / safe
        mean_ret = np.bincount(cluster_of, weights=returns, minlength=k) / safe
        low = np.empty(k)
        low[seen] = minmax_scale(-mean_ret[seen], 1.0, 10.0)
        if not seen.all():  # unseen clusters: treated as the neediest (see class docstring)
            err[~seen] = err[seen].max()
            low[~seen] = low[seen].max()
            mean_ret[~seen] = np.nan
        e_sum = err.sum()
        e = err / e_sum if e_sum > 0 else np.full(k, 1.0 / k)
        q = low / low.sum()
        w = self.config.alpha * e + (1.0 - self.config.alpha) * q
        w = w / w.sum()
        if self.config.hard:
            probs = cluster_weights_hard(self.clusters, w)
        else:
            probs = cluster_weights_soft(self.memberships, w)
        self.set_prioritised(probs)
        self._weights = w
        self.last_terms = {
            "error": err, "low_return": q, "mean_return": mean_ret, "history_len": lens.copy(),
        }
        self.history.append((self.uniform_draws + self.prioritised_draws, w.copy()))

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "n_clusters": self.n_clusters,
            "n_features": self.n_features,
            "weights": self._weights.copy(),
            "hist_trace": self._hist_trace.copy(),
            "hist_return": self._hist_return.copy(),
            "hist_len": self._hist_len.copy(),
            "hist_head": self._hist_head.copy(),
            "buf_trace": self._buf_trace[: self._buf_len].copy(),
            "buf_return": self._buf_return[: self._buf_len].copy(),
            "recorded_episodes": self.recorded_episodes,
            "skipped_episodes": self.skipped_episodes,
            "train_rounds": self.train_rounds,
            "train_steps": self.train_steps,
            "last_train_loss": self.last_train_loss,
            "history": [(d, w.copy()) for d, w in self.history],
            "last_terms": {key: v.copy() for key, v in self.last_terms.items()},
            "model": {key: v.detach().clone() for key, v in self._model.state_dict().items()},
            "optimizer": copy.deepcopy(self._optimizer.state_dict()),
            "train_rng": copy.deepcopy(self._train_rng.bit_generator.state),
            "torch_seed": self.torch_seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of sampler {state.get('name')!r} given to {self.name!r}")
        if (int(state["n_clusters"]), int(state["n_features"])) != (self.n_clusters, self.n_features):
            raise ValueError(
                f"state is for {state['n_clusters']} clusters x {state['n_features']} features, "
                f"this sampler has {self.n_clusters} x {self.n_features}"
            )
        hist_trace = np.asarray(state["hist_trace"])
        if hist_trace.shape != self._hist_trace.shape:
            raise ValueError(
                f"state has cluster histories of shape {hist_trace.shape}, "
                f"this sampler {self._hist_trace.shape} (cluster_history differs)"
            )
        buf_len = len(state["buf_trace"])
        if buf_len >= self.config.train_every:
            raise ValueError(f"state buffer holds {buf_len} episodes, "
                             f"train_every={self.config.train_every}")
        super().load_state_dict(state)
        self._weights = np.array(state["weights"], dtype=np.float64)
        self._hist_trace[:] = hist_trace
        self._hist_return[:] = state["hist_return"]
        self._hist_len[:] = state["hist_len"]
        self._hist_head[:] = state["hist_head"]
        self._buf_len = buf_len
        self._buf_trace[:buf_len] = state["buf_trace"]
        self._buf_return[:buf_len] = state["buf_return"]
        self.recorded_episodes = int(state["recorded_episodes"])
        self.skipped_episodes = int(state["skipped_episodes"])
        self.train_rounds = int(state["train_rounds"])
        self.train_steps = int(state["train_steps"])
        self.last_train_loss = float(state["last_train_loss"])
        self.history = [(int(d), np.array(w, dtype=np.float64)) for d, w in state["history"]]
        self.last_terms = {key: np.array(v) for key, v in state["last_terms"].items()}
        self._model.load_state_dict(state["model"])
        self._optimizer.load_state_dict(state["optimizer"])
        self._train_rng.bit_generator.state = copy.deepcopy(state["train_rng"])
        self.torch_seed = int(state["torch_seed"])

    def weight_updates(self) -> list[tuple[int, np.ndarray]]:
        """``history``: ``(total draws, w)`` per recompute."""
        return self.history


class TraceErrorSampler(PlumeDynamicSampler):
    """The paper's Trace-Error ablation: Plume-Dynamic with the prediction-error term only
    (α = 1, no low-return compensation). Same options as :class:`PlumeDynamicSampler`
    except ``alpha`` (:class:`TraceErrorConfig`)."""

    name = "trace_error"
    CONFIG = TraceErrorConfig
