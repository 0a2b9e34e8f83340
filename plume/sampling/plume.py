"""Plume's stage 3 (prioritisation) and its static relatives, as :class:`TraceSampler` objects.

All samplers here take plain arrays (``memberships``: ``(n_traces, K)`` soft or one-hot, or 1-D
integer labels; ``features``: ``(n_traces, F)``), so they work without ``plume.analysis`` and
without the harness.

* :class:`PlumeStaticSampler` (``plume_static``): equal total mass per cluster (Eq. 2), mixed
  with ε-uniform draws.
* :class:`PlumeDynamicSampler` (``plume_dynamic``): cluster weights from a return predictor's
  error and a low-return term (Eq. 3, reference ``SharedPtsData``), mixed with ε-uniform draws.
* :class:`TraceErrorSampler` (``trace_error``): Plume-Dynamic with the error term only (α = 1).
* :class:`ClusterUniformSampler` (``cluster_uniform``): a cluster uniformly, then a trace
  uniformly inside it (ecosystem §4.2); no ε.
* :class:`TwoClassSampler` (``two_class``): the paper's naive "2-Class Equal Weighted" split on
  mean throughput.

Drawing (all of them): one ``rng.random()`` variate ``u`` per draw decides both the ε branch
and the trace. If ``u < ε`` the draw is uniform (trace ``floor(u / ε · n)``); otherwise
``v = (u − ε) / (1 − ε)`` is looked up in the cumulative distribution of the prioritised
probabilities, which is rebuilt only when they change. This is exactly the reference's
``weighted_sample`` (uniform with probability ε, else ``choice(n, p)``) at O(log n) per draw;
:meth:`~EpsilonMixtureSampler.sample` and :meth:`~EpsilonMixtureSampler.sample_many` consume the
generator identically, so ``k`` scalar draws equal one ``sample_many(k)``.

``inputs`` (a class attribute) names the per-trace arrays a sampler needs after ``rng``
(``memberships``, ``features``, ``mean_throughput``): what a harness must supply besides its
config parameters.

Counters: ``draws`` (per trace, every draw), ``uniform_draws`` (draws decided by the ε branch),
``prioritised_draws`` (the rest: the reference's ``get_probs`` calls, the unit of Plume-Dynamic's
warm-up and recompute schedule) and ``episodes`` (per trace, finished training episodes passed to
``update``).
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from plume.sampling.base import TraceSampler
from plume.sampling.weights import (
    as_labels,
    as_memberships,
    cluster_weights_hard,
    cluster_weights_soft,
    minmax_scale,
    normalise_pools,
)

__all__ = [
    "ClusterUniformSampler",
    "EpsilonMixtureSampler",
    "PlumeDynamicSampler",
    "PlumeStaticSampler",
    "TraceErrorSampler",
    "TwoClassSampler",
    "standardise_features",
]

_NEVER = 1 << 62  # "no refresh scheduled" for the draw-count trigger


def _fraction(name: str, value: float) -> float:
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return v


def _integer(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return v


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


class EpsilonMixtureSampler(TraceSampler):
    """Draws from ``(1 − ε)·p + ε·uniform``, where ``p`` (the prioritised distribution) is set
    by subclasses with :meth:`_set_prioritised`.

    Subclasses that change ``p`` during training schedule a refresh by setting ``_next_due`` to
    a value of ``prioritised_draws``: just before the prioritised draw that reaches it,
    :meth:`_due` runs (it must either move ``_next_due`` forward or leave it, in which case it is
    retried at the next prioritised draw).
    """

    name = "epsilon_mixture"

    def __init__(self, n_traces: int, rng: np.random.Generator, *, epsilon: float) -> None:
        super().__init__(n_traces, rng)
        self.epsilon = _fraction("epsilon", epsilon)
        self.uniform_draws = 0
        self.prioritised_draws = 0
        self._next_due = _NEVER
        self._uscale = self.n_traces / self.epsilon if self.epsilon > 0 else 0.0
        self._vscale = 1.0 / (1.0 - self.epsilon) if self.epsilon < 1 else 0.0
        self._set_prioritised(np.full(self.n_traces, 1.0 / self.n_traces))

    # -- distribution ---------------------------------------------------------------------------
    def _set_prioritised(self, probs: np.ndarray) -> None:
        p = np.array(probs, dtype=np.float64, copy=True).reshape(-1)
        if p.shape != (self.n_traces,) or not np.all(np.isfinite(p)) or np.any(p < 0):
            raise ValueError(f"prioritised probabilities must be {self.n_traces} finite values >= 0")
        total = p.sum()
        if not total > 0:
            raise ValueError("prioritised probabilities sum to zero")
        p /= total
        cdf = np.cumsum(p)
        cdf /= cdf[-1]  # exact 1.0 at the end: v < 1 never falls off the table
        self._prio = p
        self._cdf = cdf
        self._cdf_list = cdf.tolist()  # bisect on a list is ~10x faster than np.searchsorted

    def _due(self) -> None:
        """Refresh ``p`` (subclasses); the default just cancels the trigger."""
        self._next_due = _NEVER

    def prioritised_probabilities(self) -> np.ndarray:
        """The prioritised distribution ``p`` before ε mixing (a copy)."""
        return self._prio.copy()

    def probabilities(self) -> np.ndarray:
        return (1.0 - self.epsilon) * self._prio + self.epsilon / self.n_traces

    # -- drawing --------------------------------------------------------------------------------
    def sample(self) -> int:
        u = self.rng.random()
        n = self.n_traces
        if u < self.epsilon:
            index = int(u * self._uscale)
            self.uniform_draws += 1
        else:
            if self.prioritised_draws >= self._next_due:
                self._due()
            self.prioritised_draws += 1
            index = bisect_right(self._cdf_list, (u - self.epsilon) * self._vscale)
        if index >= n:
            index = n - 1
        self.draws[index] += 1
        return index

    def sample_many(self, count: int) -> np.ndarray:
        count = int(count)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        n = self.n_traces
        u = self.rng.random(count)
        out = np.empty(count, dtype=np.int64)
        uniform = u < self.epsilon
        n_uniform = int(np.count_nonzero(uniform))
        if n_uniform:
            out[uniform] = (u[uniform] * self._uscale).astype(np.int64)
        positions = np.flatnonzero(~uniform)
        done, total = 0, positions.size
        base_uniform = self.uniform_draws
        while done < total:  # one segment per refresh of p (usually exactly one)
            if self.prioritised_draws >= self._next_due:
                # counters as the scalar path would have them just before this draw
                self.uniform_draws = base_uniform + int(positions[done]) - done
                self._due()
            take = total - done
            if self.prioritised_draws < self._next_due:
                take = min(take, self._next_due - self.prioritised_draws)
            seg = positions[done:done + take]
            v = (u[seg] - self.epsilon) * self._vscale
            out[seg] = np.searchsorted(self._cdf, v, side="right")
            self.prioritised_draws += take
            done += take
        np.minimum(out, n - 1, out=out)
        self.uniform_draws = base_uniform + n_uniform
        np.add.at(self.draws, out, 1)
        return out

    # -- persistence ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "uniform_draws": self.uniform_draws,
            "prioritised_draws": self.prioritised_draws,
            "next_due": self._next_due,
            "prioritised": self._prio.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        prio = np.asarray(state["prioritised"], dtype=np.float64)
        if prio.shape != (self.n_traces,):
            raise ValueError(
                f"state covers {prio.shape[0]} traces but this sampler covers {self.n_traces}"
            )
        super().load_state_dict(state)
        self.uniform_draws = int(state["uniform_draws"])
        self.prioritised_draws = int(state["prioritised_draws"])
        self._next_due = int(state["next_due"])
        self._set_prioritised(prio)


class PlumeStaticSampler(EpsilonMixtureSampler):
    """Plume-Static: every cluster gets the same total probability (Eq. 2), ε-uniform mixed.

    Args:
        memberships: ``(n_traces, K)`` soft memberships (GMM posteriors) or one-hot rows, or 1-D
            integer labels.
        hard: False (default; the reference's TraceBench ``get_dist_weights``) redistributes the
            cluster masses through the soft memberships; True (the reference's Puffer
            ``get_cluster_weights``) uses the argmax label of each trace and spreads each
            cluster's mass uniformly over its traces.
        epsilon: probability that a draw is uniform over all traces instead (reference 0.10).
        pools: optional ``(K,)`` cluster masses instead of equal ones (a static prior, e.g.
            ecosystem §4.3); normalised.

    ``clusters`` is the argmax label of each trace; :meth:`cluster_weights` the pools.
    """

    name = "plume_static"
    inputs = ("memberships",)

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray, *,
                 hard: bool = False, epsilon: float = 0.1,
                 pools: Sequence[float] | None = None) -> None:
        super().__init__(n_traces, rng, epsilon=epsilon)
        self.memberships = as_memberships(memberships, self.n_traces)
        self.n_clusters = self.memberships.shape[1]
        self.hard = bool(hard)
        self.clusters = np.argmax(self.memberships, axis=1)
        self._pools = normalise_pools(pools, self.n_clusters)
        if self.hard:
            as_labels(self.clusters, self.n_clusters)  # every cluster must win some argmax
            self._set_prioritised(cluster_weights_hard(self.clusters, self._pools))
        else:
            self._set_prioritised(cluster_weights_soft(self.memberships, self._pools))

    def cluster_weights(self) -> np.ndarray:
        """Target mass per cluster of the prioritised distribution, shape ``(K,)``."""
        return self._pools.copy()


class ClusterUniformSampler(EpsilonMixtureSampler):
    """A cluster uniformly at random, then a trace uniformly inside it (no ε).

    The "balance the skew, do not prioritise" ablation of Plume's stage 3 (ecosystem §4.2).
    Hard labels: a soft ``memberships`` matrix is reduced to its argmax; 1-D labels are accepted.
    Every cluster must own at least one trace.
    """

    name = "cluster_uniform"
    inputs = ("memberships",)

    def __init__(self, n_traces: int, rng: np.random.Generator, memberships: np.ndarray) -> None:
        super().__init__(n_traces, rng, epsilon=0.0)
        dist = as_memberships(memberships, self.n_traces)
        self.n_clusters = dist.shape[1]
        self.clusters = np.argmax(dist, axis=1)
        as_labels(self.clusters, self.n_clusters)
        self._set_prioritised(cluster_weights_hard(self.clusters))

    def cluster_weights(self) -> np.ndarray:
        return np.full(self.n_clusters, 1.0 / self.n_clusters)


class TwoClassSampler(EpsilonMixtureSampler):
    """The paper's "2-Class Equal Weighted" baseline (reference ``naive_weighted``, Puffer only).

    Traces whose mean throughput is ``<= threshold`` form group 0, the others group 1; each
    group gets half the prioritised mass, uniform inside it; then ε-uniform mixing.

    ``threshold`` defaults to the **median** of ``mean_throughput``, so the split is about even
    whatever the units. The reference's constant 0.9822872859924906 is in Puffer delivery-rate
    units and means nothing elsewhere; pass it explicitly to reproduce Puffer. Raises
    ValueError when a group would be empty (e.g. more than half the traces tie at the maximum).
    """

    name = "two_class"
    inputs = ("mean_throughput",)

    def __init__(self, n_traces: int, rng: np.random.Generator, mean_throughput: np.ndarray, *,
                 threshold: float | None = None, epsilon: float = 0.1) -> None:
        super().__init__(n_traces, rng, epsilon=epsilon)
        tput = np.array(mean_throughput, dtype=np.float64, copy=True).reshape(-1)
        if tput.shape != (self.n_traces,):
            raise ValueError(
                f"mean_throughput has {tput.size} values but the sampler covers {self.n_traces} traces"
            )
        if not np.all(np.isfinite(tput)):
            raise ValueError(f"mean_throughput has a non-finite value at trace "
                             f"{int(np.flatnonzero(~np.isfinite(tput))[0])}")
        self.threshold = float(np.median(tput)) if threshold is None else float(threshold)
        self.clusters = (tput > self.threshold).astype(np.int64)
        sizes = np.bincount(self.clusters, minlength=2)
        if np.any(sizes == 0):
            raise ValueError(
                f"threshold {self.threshold} leaves a group empty "
                f"({int(sizes[0])} traces <= threshold, {int(sizes[1])} above)"
            )
        self.n_clusters = 2
        self._set_prioritised(cluster_weights_hard(self.clusters))

    def cluster_weights(self) -> np.ndarray:
        return np.array([0.5, 0.5])


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
    generator, never from global RNGs.
    """

    name = "plume_dynamic"
    inputs = ("memberships", "features")

    def __init__(
        self,
        n_traces: int,
        rng: np.random.Generator,
        memberships: np.ndarray,
        features: np.ndarray,
        *,
        alpha: float = 0.5,
        epsilon: float = 0.1,
        hard: bool = False,
        gamma: float = 0.999,
        n_step: int = 85,
        train_every: int = 250,
        cluster_history: int = 500,
        recompute_every: int = 1125,
        warmup: int = 2250,
        batch_size: int = 64,
        epochs: int = 1,
        learning_rate: float = 1e-3,
        hidden_sizes: Sequence[int] = (32, 32),
        huber_delta: float = 1.0,
        single_step_per_round: bool = False,
        torch_seed: int | None = None,
    ) -> None:
        import torch

        super().__init__(n_traces, rng, epsilon=epsilon)
        self.alpha = _fraction("alpha", alpha)
        gamma = float(gamma)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        self.gamma = gamma
        self.n_step = _integer("n_step", n_step, 1)
        self.train_every = _integer("train_every", train_every, 1)
        self.cluster_history = _integer("cluster_history", cluster_history, 1)
        self.recompute_every = _integer("recompute_every", recompute_every, 1)
        self.warmup = _integer("warmup", warmup, 0)
        self.batch_size = _integer("batch_size", batch_size, 1)
        self.epochs = _integer("epochs", epochs, 1)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.huber_delta = _positive("huber_delta", huber_delta)
        self.hidden_sizes = tuple(_integer("hidden_sizes[]", h, 1) for h in hidden_sizes)
        self.single_step_per_round = bool(single_step_per_round)
        self.hard = bool(hard)

        self.memberships = as_memberships(memberships, self.n_traces)
        self.n_clusters = self.memberships.shape[1]
        self.clusters = np.argmax(self.memberships, axis=1)
        if self.hard:
            as_labels(self.clusters, self.n_clusters)  # every cluster must win some argmax
        self.features = standardise_features(features, self.n_traces)
        self.n_features = self.features.shape[1]
        col = self.memberships.sum(axis=0)
        self._weights = col / col.sum() if not self.hard else (
            np.bincount(self.clusters, minlength=self.n_clusters) / self.n_traces
        )
        self._discounts = self.gamma ** np.arange(self.n_step, dtype=np.float64)

        # histories: per-cluster ring buffers of (trace index, G)
        cap, k = self.cluster_history, self.n_clusters
        self._hist_trace = np.zeros((k, cap), dtype=np.int64)
        self._hist_return = np.zeros((k, cap), dtype=np.float64)
        self._hist_len = np.zeros(k, dtype=np.int64)
        self._hist_head = np.zeros(k, dtype=np.int64)
        # predictor training buffer
        self._buf_trace = np.zeros(self.train_every, dtype=np.int64)
        self._buf_return = np.zeros(self.train_every, dtype=np.float64)
        self._buf_len = 0
        # counters and logs
        self.recorded_episodes = 0
        self.skipped_episodes = 0
        self.train_rounds = 0
        self.train_steps = 0
        self.last_train_loss = float("nan")
        self.history: list[tuple[int, np.ndarray]] = []
        self.last_terms: dict[str, np.ndarray] = {}
        self._next_due = self.warmup

        # the return predictor (torch is imported where used, not stored: a module attribute
        # would make the sampler unpicklable, and SubprocVecEnv / deepcopy need to copy it)
        child = rng.spawn(1)[0]
        if torch_seed is None:
            torch_seed = int(child.integers(2**62))
        self.torch_seed = int(torch_seed)
        self._train_rng = child
        gen = torch.Generator().manual_seed(self.torch_seed)
        self._model = self._build_model(gen)
        self._optimizer = torch.optim.Adam(self._model.parameters(), lr=self.learning_rate)
        self._x = torch.as_tensor(self.features, dtype=torch.float32)

    def _build_model(self, gen: Any) -> Any:
        import torch

        nn = torch.nn
        sizes = [self.n_features, *self.hidden_sizes, 1]
        layers: list[Any] = []
        for fan_in, fan_out in pairwise(sizes):
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
        trace = int(trace_index)
        if not 0 <= trace < self.n_traces:
            raise IndexError(f"trace index {trace_index} out of range [0, {self.n_traces})")
        super().update(trace, rewards)
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if r.shape[0] < self.n_step:
            self.skipped_episodes += 1
            return
        g = float(r[: self.n_step] @ self._discounts)
        if not math.isfinite(g):
            raise ValueError(f"episode on trace {trace} has non-finite rewards")
        k = self.clusters[trace]
        slot = self._hist_head[k]
        self._hist_trace[k, slot] = trace
        self._hist_return[k, slot] = g
        self._hist_head[k] = (slot + 1) % self.cluster_history
        if self._hist_len[k] < self.cluster_history:
            self._hist_len[k] += 1
        self._buf_trace[self._buf_len] = trace
        self._buf_return[self._buf_len] = g
        self._buf_len += 1
        self.recorded_episodes += 1
        if self._buf_len >= self.train_every:
            self._train_round()

    def _train_round(self) -> None:
        import torch

        n = self._buf_len
        x = self._x[torch.as_tensor(self._buf_trace[:n])]
        y = torch.as_tensor(self._buf_return[:n], dtype=torch.float32)
        self._buf_len = 0
        loss_fn = torch.nn.HuberLoss(delta=self.huber_delta)
        model, opt = self._model, self._optimizer
        model.train()
        loss = None
        # update() may run inside an agent's no-grad rollout: gradients are needed here.
        with torch.enable_grad():
            for _ in range(self.epochs):
                if self.single_step_per_round:
                    batches = [np.arange(n)]
                else:
                    perm = self._train_rng.permutation(n)
                    batches = np.array_split(perm, max(n // self.batch_size, 1))
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
        self._next_due = self.prioritised_draws + self.recompute_every

    def _recompute(self) -> None:
        import torch

        k, cap = self.n_clusters, self.cluster_history
        lens = self._hist_len
        valid = np.arange(cap)[None, :] < lens[:, None]
        traces = self._hist_trace[valid]
        returns = self._hist_return[valid]
        cluster_of = np.repeat(np.arange(k), lens)
        with torch.no_grad():
            pred = self._model(self._x[torch.as_tensor(traces)]).squeeze(-1).double().numpy()
        diff = np.abs(pred - returns)
        delta = self.huber_delta
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
        w = self.alpha * e + (1.0 - self.alpha) * q
        w = w / w.sum()
        if self.hard:
            probs = cluster_weights_hard(self.clusters, w)
        else:
            probs = cluster_weights_soft(self.memberships, w)
        self._set_prioritised(probs)
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
        if buf_len >= self.train_every:
            raise ValueError(f"state buffer holds {buf_len} episodes, train_every={self.train_every}")
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


class TraceErrorSampler(PlumeDynamicSampler):
    """The paper's Trace-Error ablation: Plume-Dynamic with the prediction-error term only
    (α = 1, no low-return compensation). Same parameters as :class:`PlumeDynamicSampler`
    except ``alpha``."""

    name = "trace_error"

    def __init__(
        self,
        n_traces: int,
        rng: np.random.Generator,
        memberships: np.ndarray,
        features: np.ndarray,
        *,
        epsilon: float = 0.1,
        hard: bool = False,
        gamma: float = 0.999,
        n_step: int = 85,
        train_every: int = 250,
        cluster_history: int = 500,
        recompute_every: int = 1125,
        warmup: int = 2250,
        batch_size: int = 64,
        epochs: int = 1,
        learning_rate: float = 1e-3,
        hidden_sizes: Sequence[int] = (32, 32),
        huber_delta: float = 1.0,
        single_step_per_round: bool = False,
        torch_seed: int | None = None,
    ) -> None:
        super().__init__(
            n_traces, rng, memberships, features, alpha=1.0, epsilon=epsilon, hard=hard,
            gamma=gamma, n_step=n_step, train_every=train_every, cluster_history=cluster_history,
            recompute_every=recompute_every, warmup=warmup, batch_size=batch_size, epochs=epochs,
            learning_rate=learning_rate, hidden_sizes=hidden_sizes, huber_delta=huber_delta,
            single_step_per_round=single_step_per_round, torch_seed=torch_seed,
        )
