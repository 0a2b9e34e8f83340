"""Classic ABR controllers (plume/envs/abr/controllers.py): each rule on hand-built
observations with exact expected actions, RobustMPC against brute-force ports of its
references, batch invariance, and whole episodes through AbrVecEnv on constant links."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from plume.envs.abr import SPEC, AbrParams, CONTROLLER_NAMES
from plume.envs.abr.controllers import (
    CONTROLLERS,
    AbrSetting,
    Controller,
    _GelatoPlanner,
    controller_names,
    harmonic_mean,
    make_controller,
    parse_obs,
    robust_throughput,
)
from plume.envs.abr.sim import AbrVecEnv
from plume.envs.abr.video import BITRATES_KBPS, VIDEO_SIZES
from plume.traces.traceset import TraceSet

BR = np.asarray(BITRATES_KBPS, dtype=float)
LADDER_MB = np.linspace(0.1, 1.0, 10)  # gelato sizes: 0.1, 0.2, ..., 1.0 MB
LADDER_DB = 8.0 + 9.0 * np.log10(LADDER_MB / 0.1)  # 8 ... 17 dB, concave in the size
# Puffer's BOLA-BASIC static ladders (bola_basic.hh): bytes and SSIM index.
PUFFER_SIZES_MB = np.array([44319, 93355, 115601, 142904, 196884, 263965, 353752, 494902,
                            632193, 889893]) / 1e6
PUFFER_SSIM_DB = -10 * np.log10(1 - np.array([
    0.91050748, 0.94062527, 0.94806355, 0.95498943, 0.96214503, 0.96717277, 0.97273958,
    0.97689813, 0.98004106, 0.98332605]))


# ---------------------------------------------------------------------------- observations
def gelato_obs(buffer=0.0, thr=(), sizes=LADDER_MB, ssim=LADDER_DB, prev_ssim=12.0):
    """One flat gelato observation: history rows (newest last) whose size / delay give the
    throughputs ``thr`` (MB/s, oldest first), the buffer in the newest row, the next 5
    chunks' sizes (MB) and SSIM (dB): (10,) rows are repeated, (5, 10) given per chunk."""
    m = np.zeros((10, 26), np.float32)
    for row, c in zip(range(10 - len(thr), 10), thr):
        m[row, :4] = prev_ssim / 25, 0.6 / 3, 0.6 / c / 20, buffer / 15
    m[:5, 6:16] = np.broadcast_to(sizes, (5, 10)) / 3
    m[:5, 16:26] = np.broadcast_to(ssim, (5, 10)) / 25
    return m.reshape(-1)


def pensieve_obs(buffer=0.0, thr=(), sizes=VIDEO_SIZES[:, 1] / 1e6, prev=1, left=40):
    """One flat pensieve observation: the last ``len(thr)`` chunks at level ``prev`` with
    throughputs ``thr`` (MB/s, oldest first), the buffer (s), next sizes (MB), chunks left."""
    m = np.zeros((6, 8), np.float32)
    k = len(thr)
    if k:
        m[0, 8 - k:] = BR[prev] / 4300
        m[1, 8 - k:] = buffer / 10
        m[2, 8 - k:] = thr
        m[3, 8 - k:] = 0.3
        m[5, 8 - k:] = left / 48
    m[4, :6] = sizes
    return m.reshape(-1)


def act(name, variant, *obs, **params):
    return make_controller(name, variant, **params)(np.stack(obs))


# ---------------------------------------------------------------------------- registry
def test_registry_names_factories_and_errors():
    required = {"always_lowest", "always_highest", "bba", "rate_based", "robust_mpc",
                "bola_v1", "bola_v2"}
    assert required <= set(CONTROLLERS) == set(controller_names())
    assert set(CONTROLLER_NAMES) <= set(CONTROLLERS)
    ctl = CONTROLLERS["bba"]("pensieve", {"rebuf_penalty": 4.3})
    assert isinstance(ctl, Controller) and (ctl.name, ctl.variant) == ("bba", "pensieve")
    assert ctl.__call__ == ctl.act
    with pytest.raises(ValueError, match="unknown ABR controller 'mcp'.*bba.*robust_mpc"):
        make_controller("mcp", "gelato")
    with pytest.raises(TypeError, match="unknown parameter.*rebuf_wieght.*valid:.*rebuf_weight"):
        make_controller("bba", "gelato", rebuf_wieght=10)
    with pytest.raises(ValueError, match="variant"):
        make_controller("bba", "dash")
    with pytest.raises(ValueError, match=r"shape \(N, 48\)"):
        make_controller("bba", "pensieve")(np.zeros((2, 260), np.float32))


@pytest.mark.parametrize("variant", ["gelato", "pensieve"])
def test_every_spec_controller_builds_from_env_params_and_returns_int64(variant):
    obs = np.stack([gelato_obs(8.0, [0.3] * 6) if variant == "gelato"
                    else pensieve_obs(8.0, [0.3] * 6)] * 3)
    for name in CONTROLLER_NAMES:
        a = SPEC.controllers[name](AbrParams(variant=variant)).act(obs)
        assert a.dtype == np.int64 and a.shape == (3,)
        assert ((0 <= a) & (a < (10 if variant == "gelato" else 6))).all()


def test_constant_and_seeded_random_controllers():
    assert act("always_lowest", "gelato", gelato_obs()).tolist() == [0]
    assert act("always_highest", "gelato", gelato_obs()).tolist() == [9]
    assert act("always_highest", "pensieve", pensieve_obs()).tolist() == [5]
    obs = np.stack([pensieve_obs()] * 50)
    a, b = (make_controller("random", "pensieve", seed=3)(obs) for _ in range(2))
    assert (a == b).all() and set(a.tolist()) <= set(range(6)) and len(set(a.tolist())) > 3


# ---------------------------------------------------------------------------- BBA
def test_pensieve_bba_is_bb_py():
    """bb.py: < 5 s -> 0, >= 15 s -> 5, else int(5 (b - 5) / 10); 7.0 s survives float32."""
    buffers = [0.0, 4.0, 4.99, 5.0, 7.0, 9.9, 14.9, 15.0, 40.0]
    got = act("bba", "pensieve", *[pensieve_obs(b, [0.5]) for b in buffers])
    assert got.tolist() == [0, 0, 0, 0, 1, 2, 4, 5, 5]  # 14.9 s: int(4.95) = 4


def test_gelato_linear_bba_thresholds_and_size_cap():
    """Puffer linear_bba.cc: <= 3 s smallest, >= 13.5 s largest, else the highest-SSIM
    encoding with size <= s_min + (s_max - s_min)(b - 3) / 10.5."""
    buffers = [0.0, 2.9, 3.0, 5.625, 8.25, 13.4, 13.5, 15.0]
    # cap at 5.625 s: 0.1 + 0.9 * 0.25 = 0.325 MB -> 0.3 (2); at 8.25 s: 0.55 -> 0.5 (4);
    # at 13.4 s: 0.1 + 0.9 * 10.4 / 10.5 = 0.991 -> 0.9 (8)
    got = act("bba", "gelato", *[gelato_obs(b, [0.3]) for b in buffers])
    assert got.tolist() == [0, 0, 0, 2, 4, 8, 9, 9]


def test_gelato_bba_uses_ssim_and_sizes_not_the_index():
    """Highest SSIM within the cap even when SSIM does not grow with the index; the largest
    chunk (not index 9) above the upper reservoir (fix of the masked-argmax assumption)."""
    ssim = LADDER_DB.copy()
    ssim[1] = 24.0  # encoding 1 has the best SSIM of all (obs clip: 25 dB)
    sizes = LADDER_MB.copy()
    sizes[[7, 9]] = sizes[[9, 7]]  # encoding 7 is now the largest
    got = act("bba", "gelato", gelato_obs(8.25, [0.3], sizes, ssim),
              gelato_obs(14.0, [0.3], sizes, ssim))
    assert got.tolist() == [1, 7]


# ---------------------------------------------------------------------------- RB
def test_harmonic_mean_skips_padding_and_old_samples():
    thr = np.array([[0, 0, 0, 0, 0, 0, 0, 0.5], [9, 9, 9, 1, 1, 1, 0.1, 0.4]])
    assert np.allclose(harmonic_mean(thr), [0.5, 5 / (1 + 1 + 1 + 10 + 2.5)])
    assert harmonic_mean(np.zeros((1, 8))).tolist() == [0.0]


def test_rate_based_picks_the_highest_sustainable_level():
    # pensieve: 0.2 MB/s = 1600 kbit/s -> 1200 (2); HM 5/15.5 MB/s = 2581 kbit/s -> 1850 (3);
    # old samples beyond the last 5 are ignored; nothing sustainable or no sample -> 0
    got = act("rate_based", "pensieve", pensieve_obs(5, [0.2] * 5),
              pensieve_obs(5, [1, 1, 1, 0.1, 0.4]), pensieve_obs(5, [0.01] * 3 + [1.0] * 5),
              pensieve_obs(5, [0.01] * 4), pensieve_obs())
    assert got.tolist() == [2, 3, 5, 0, 0]
    # gelato: 0.2 MB/s x 2.002 s = 0.4004 MB -> 0.4 MB (3); 0.01 MB/s: none -> smallest
    ssim = LADDER_DB.copy()
    ssim[1] = 24.0
    got = act("rate_based", "gelato", gelato_obs(5, [0.2] * 5), gelato_obs(5, [0.01] * 5),
              gelato_obs(5, [0.2] * 5, ssim=ssim), gelato_obs())
    assert got.tolist() == [3, 0, 1, 0]


# ---------------------------------------------------------------------------- BOLA
@pytest.mark.parametrize("version", [1, 2])
def test_gelato_bola_bounds_on_puffer_ladder(version):
    """Puffer's calibration: the two smallest encodings tie at 3 s (smallest below), the
    top utility's score is 0 at 15 s (v1: the top encoding; v2: every score < 0 there, so
    the max-utility fallback). With the reference's unit bug both would always pick 0."""
    buffers = [0.0, 2.9, 3.1, 6.0, 8.0, 10.0, 12.0, 14.0, 15.0]
    got = act(f"bola_v{version}", "gelato",
              *[gelato_obs(b, [0.3], PUFFER_SIZES_MB, PUFFER_SSIM_DB) for b in buffers])
    expected = {1: [0, 0, 1, 3, 6, 7, 9, 9, 9], 2: [0, 0, 1, 2, 3, 6, 8, 9, 9]}[version]
    assert got.tolist() == expected


def test_gelato_bola_v2_falls_back_to_max_utility_when_every_score_is_negative():
    """Above 15 s no score is >= 0: v2 takes the best SSIM (here encoding 4), v1 the argmax."""
    ssim = PUFFER_SSIM_DB.copy()
    ssim[4] = 19.0
    obs = gelato_obs(15.0, [0.3], PUFFER_SIZES_MB, ssim)
    assert act("bola_v2", "gelato", obs).tolist() == [4]
    assert act("bola_v1", "gelato", obs).tolist() == [4]  # v1: top utility scores 0 at 15 s


def test_pensieve_bola_basic_bounds():
    """u = ln(S/S_1), (Q_min, Q_target) = (10, 30) s: lowest up to Q_min, top from Q_target."""
    buffers = [0.0, 9.9, 10.0, 15.0, 20.0, 25.0, 30.0, 60.0]
    for version in (1, 2):
        got = act(f"bola_v{version}", "pensieve", *[pensieve_obs(b, [0.3]) for b in buffers])
        assert got.tolist() == [0, 0, 0, 1, 2, 3, 5, 5]


# ---------------------------------------------------------------------------- RobustMPC
def _mpc_py_estimate(samples):
    """Pensieve mpc.py's future_bandwidth after each sample of an episode, sequentially."""
    ests, errors = [], []
    for i in range(len(samples)):
        errors.append(abs(ests[-1] - samples[i]) / samples[i] if ests else 0.0)
        window = samples[max(0, i - 4):i + 1]
        harmonic = len(window) / sum(1 / x for x in window)
        ests.append(harmonic)
    return harmonic / (1 + max(errors[-5:]))


def test_robust_throughput_matches_mpc_py_sequence():
    hand = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 1, 0.5]])  # HM 5/6, last prediction 1 vs 0.5
    assert np.allclose(robust_throughput(hand), (5 / 6) / 2.0)
    rng = np.random.default_rng(0)
    for length in (1, 2, 5, 7, 10):
        samples = rng.uniform(0.1, 2.0, length)
        thr = np.zeros((1, 10))
        thr[0, 10 - length:] = samples
        assert np.isclose(robust_throughput(thr)[0], _mpc_py_estimate(list(samples)))


def _pensieve_mpc_py(b0, c, sizes, prev, h):
    """Brute-force port of mpc.py's search (its sizes: the next chunk's for all h)."""
    best, combo_best = -1e18, None
    for combo in itertools.product(range(6), repeat=h):
        buf, rebuf, bitrate_sum, smooth, last = b0, 0.0, 0.0, 0.0, prev
        for q in combo:
            dt = sizes[q] / c
            rebuf, buf = (rebuf + dt - buf, 0.0) if buf < dt else (rebuf, buf - dt)
            buf += 4
            bitrate_sum += BR[q]
            smooth += abs(BR[q] - BR[last])
            last = q
        reward = round(bitrate_sum / 1000 - 4.3 * rebuf - smooth / 1000, 9)  # exact ties
        if reward >= best:
            best, combo_best = reward, combo
    return combo_best[0]


def test_pensieve_mpc_is_mpc_py_search():
    rng = np.random.default_rng(1)
    obs, expected = [], []
    for i in range(14):
        b0 = float(rng.choice([0.5, 4.0, 12.0, 30.0]))
        thr = list(np.exp(rng.uniform(np.log(0.05), np.log(1.2), 8)))
        sizes = (VIDEO_SIZES[:, rng.integers(48)] / 1e6 if i % 2
                 else rng.uniform(0.05, 2.5, 6)).astype(np.float32)  # non-monotone too
        prev, left = int(rng.integers(6)), int(rng.choice([1, 2, 3, 30]))
        o = pensieve_obs(b0, thr, sizes, prev, left)
        p = parse_obs(o, AbrSetting.of("pensieve"))
        c = robust_throughput(p.throughput)[0]
        obs.append(o)
        expected.append(_pensieve_mpc_py(p.buffer[0], c, p.sizes[0, 0], prev, min(5, left)))
    assert act("robust_mpc", "pensieve", *obs).tolist() == expected


def test_mpc_on_flat_high_and_low_throughput():
    assert act("robust_mpc", "pensieve", pensieve_obs(10, [2.0] * 8),
               pensieve_obs(0.5, [0.02] * 8), pensieve_obs()).tolist() == [5, 0, 0]
    assert act("robust_mpc", "gelato", gelato_obs(15, [2.0] * 10),
               gelato_obs(2.0, [0.03] * 10), gelato_obs()).tolist() == [9, 0, 0]
    # 0.2 MB/s sustains 0.4 MB per 2.002 s chunk: from 2 s of buffer after encoding 3,
    # staying at 3 never stalls, 4 (0.5 MB, 2.5 s) stalls 0.5 s at once (-50)
    after_3 = gelato_obs(2.0, [0.2] * 10, prev_ssim=LADDER_DB[3])
    assert act("robust_mpc", "gelato", after_3).tolist() == [3]


def _gelato_exhaustive(obs):
    """Every one of the 10^5 plans from the exact buffer: the env's reward, buffer model and
    stall clip; returns the best value per first encoding."""
    s = AbrSetting.of("gelato")
    p = parse_obs(obs[None], s)
    c = robust_throughput(p.throughput)[0]
    plans = np.array(list(itertools.product(range(10), repeat=5)))
    buf, value, last = np.full(len(plans), p.buffer[0]), np.zeros(len(plans)), p.prev_quality[0]
    for k in range(5):
        d, x = p.sizes[0, k, plans[:, k]] / c, p.quality[0, k, plans[:, k]]
        value += x - 100 * np.clip(d - buf, 0, 20) - np.abs(x - last)
        buf, last = np.minimum(np.maximum(buf - d, 0) + 2.002, 15.0), x
    return value.reshape(10, -1).max(axis=1)


def test_gelato_mpc_dynamic_program_against_exhaustive_search():
    """The DP's first encoding starts a plan within 1 (SSIM dB units) of the best of all
    10^5 plans on the default <= 0.1 s grid, and is the exact argmax on a 0.02 s grid."""
    rng = np.random.default_rng(2)
    obs = []
    for _ in range(12):
        sizes = LADDER_MB * rng.uniform(0.5, 1.5, (5, 1)) * rng.uniform(0.9, 1.1, (5, 10))
        ssim = np.sort(rng.uniform(8, 20, (5, 10)), axis=1)
        thr = np.exp(rng.uniform(np.log(0.05), np.log(1.0), 10))
        obs.append(gelato_obs(rng.uniform(0, 15), thr, sizes, ssim, rng.uniform(8, 20)))
    obs = np.stack(obs)
    best = np.stack([_gelato_exhaustive(o) for o in obs])
    default = make_controller("robust_mpc", "gelato")(obs)
    assert (best.max(axis=1) - best[np.arange(len(obs)), default] <= 1.0).all()
    fine = make_controller("robust_mpc", "gelato")
    fine.planner = _GelatoPlanner(fine.setting, 0.02)
    assert fine(obs).tolist() == best.argmax(axis=1).tolist()


# ---------------------------------------------------------------------------- batches
@pytest.mark.parametrize("variant", ["gelato", "pensieve"])
def test_acting_on_a_batch_equals_acting_row_by_row(variant):
    rng = np.random.default_rng(3)
    rows = []
    for i in range(40):
        k = int(rng.integers(0, 9))  # k = 0: an episode start
        thr = list(np.exp(rng.uniform(np.log(0.03), np.log(2.0), k)))
        b = float(rng.uniform(0, 15 if variant == "gelato" else 40)) if k else 0.0
        if variant == "gelato":
            rows.append(gelato_obs(b, thr, LADDER_MB * rng.uniform(0.5, 2.0, (5, 1)),
                                   np.sort(rng.uniform(8, 20, (5, 10)), axis=1)))
        else:
            rows.append(pensieve_obs(b, thr, VIDEO_SIZES[:, rng.integers(48)] / 1e6,
                                     int(rng.integers(6)), int(rng.integers(1, 48))))
    batch = np.stack(rows)
    for name in CONTROLLER_NAMES:
        ctl = make_controller(name, variant)
        together = ctl(batch)
        assert together.shape == (len(rows),) and together.dtype == np.int64
        assert together.tolist() == [int(ctl(row)[0]) for row in rows], name


# ---------------------------------------------------------------------------- episodes
def _constant_traces(variant, rates):
    """Constant links (Mbit/s); gelato chunks: LADDER_MB at every chunk (0.4 ... 4 Mbit/s)."""
    n = len(rates)
    length = 120 if variant == "gelato" else 200
    series = {"time": np.tile(np.arange(length) * 2.0, (n, 1)),
              "bandwidth": np.repeat(np.asarray(rates, float)[:, None], length, axis=1)}
    chunks = {}
    if variant == "gelato":
        chunks = {"chunk_sizes": np.broadcast_to(LADDER_MB, (n, length, 10)).copy(),
                  "ssim_db": np.broadcast_to(LADDER_DB, (n, length, 10)).copy()}
    return TraceSet(f"constant/{variant}", series=series, chunks=chunks)


def _play(variant, name, rates):
    """(n, steps) actions of one test episode per trace, and the stalls after chunk 0."""
    env = AbrVecEnv(_constant_traces(variant, rates), mode="test", variant=variant)
    ctl = make_controller(name, variant, **{k: v for k, v in env.params.items()
                                            if k != "max_steps"})
    obs, _ = env.reset()
    actions, stall = [], np.zeros(len(rates))
    done = np.zeros(len(rates), bool)
    for step in range(1000):
        a = ctl(obs)
        actions.append(a)
        obs, _, terminated, truncated, _ = env.step(a)
        if step:
            stall += np.where(done, 0.0, env.last_step()["stall"])
        done |= terminated | truncated
        if done.all():
            return np.array(actions).T, stall
    raise AssertionError("episodes did not end")


# Highest level whose bitrate is below the link rate: gelato levels are 0.1 ... 1.0 MB
# x 8 / 2.002 s = 0.4, 0.8, ..., 4.0 Mbit/s; pensieve 0.3 ... 4.3 Mbit/s.
FAST = {"gelato": ([5.0, 8.0], 9), "pensieve": ([6.0, 10.0], 5)}
STARTUP = {"gelato": {"bba": 12, "robust_mpc": 2, "bola_v1": 10, "bola_v2": 10},
           "pensieve": {"bba": 6, "robust_mpc": 2, "bola_v1": 10, "bola_v2": 10}}
"""Chunks of start-up before the controller plays the top level on a fast constant link
(measured, first chunk index at the top: gelato 11, 1, 8, 9; pensieve 5, 1, 9, 9)."""


@pytest.mark.parametrize("variant", ["gelato", "pensieve"])
@pytest.mark.parametrize("name", ["bba", "robust_mpc", "bola_v1", "bola_v2"])
def test_controllers_settle_on_the_top_level_when_the_link_sustains_it(variant, name):
    rates, top = FAST[variant]
    actions, stall = _play(variant, name, rates)
    assert (actions[:, STARTUP[variant][name]:] == top).all()
    assert (actions[:, :STARTUP[variant][name] - 1] < top).any()  # there is a start-up
    assert (stall == 0).all()


MID = {"gelato": ([1.0, 1.8, 3.0], [1, 3, 6]), "pensieve": ([1.0, 1.6, 2.5], [1, 2, 3])}


@pytest.mark.parametrize("variant", ["gelato", "pensieve"])
def test_on_a_mid_ladder_link_rb_settles_and_bba_mpc_stay_next_to_it(variant):
    """RB settles on the highest sustainable level. Buffer-driven BBA and MPC (no terminal
    value on the buffer) climb one level above it while the buffer is high and come back:
    after start-up they only play those two levels (pensieve MPC spends its buffer on the
    last horizon, where it plans fewer chunks)."""
    rates, hs = MID[variant]
    hs = np.asarray(hs)[:, None]
    actions, _ = _play(variant, "rate_based", rates)
    assert (actions[:, 2:] == hs).all()
    for name in ("bba", "robust_mpc"):
        actions, _ = _play(variant, name, rates)
        tail = actions[:, 10:-5]
        assert ((tail == hs) | (tail == hs + 1)).all(), name
        assert ((tail == hs).mean(axis=1) > 0.2).all(), name
