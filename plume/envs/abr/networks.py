"""The paper's ABR feature extractors: Gelato's ``SmallCNN`` and the original Pensieve network,
ABR's networks slice (``SPEC.networks``: ``algo.network=gelato`` / ``pensieve``).

Imported only by the agents layer, through the spec's lazy loaders: it imports torch, which
importing an environment (and the torch-free deployment runtime) must not.

Both map flat observations ``(..., obs_dim)`` float32 (what ``plume.envs.abr`` returns, see the
``plume.envs.abr.sim`` docstring for the layouts) to features ``(..., out_dim)``; the policy
and value MLP heads go on top (``plume.agents.networks.ActorCritic(network=...)``: one
extractor shared by actor and critic; the paper's heads are ``hidden_sizes=[256]`` for Gelato,
``[128]`` for Pensieve, ReLU). Every layer is followed by a ReLU; the features are the
flattened, concatenated branch outputs, with no final linear layer (the reference's
``features_dim`` is exactly this concatenation).

GelatoExtractor (paper App. C; ``SmallCNN`` in sagar-pa/plume's puffer_abr/network_heads.py)
--------------------------------------------------------------------------------------------
Input: the 10 x 26 Gelato observation (``obs_dim`` 260), reshaped row-major to (10, 26).

* History branch, rows 0-9 x cols 0-5: the 5 client-history columns *and* the long-term stall
  column. As in the reference, **the 10 time steps are the channels** and the convolution runs
  along the 6 feature columns: ``Conv1d(10 -> 64, k=3)`` (length 6 -> 4) -> ReLU ->
  ``Conv1d(64 -> 64, k=3)`` (4 -> 2) -> ReLU -> flatten = 64 x 2 = 128.
* Chunk-size branch, rows 0-4 x cols 6-15: the 5 look-ahead chunks are the channels, the
  convolution runs along the 10 encodings: ``Conv1d(5 -> 32, k=5)`` (10 -> 6) -> ReLU ->
  ``Conv1d(32 -> 32, k=5)`` (6 -> 2) -> ReLU -> flatten = 32 x 2 = 64.
* SSIM branch, rows 0-4 x cols 16-25: the same layout and layer sizes (own weights) -> 64.
* Features: concatenation [history, sizes, SSIM] = ``out_dim`` 256.

All convolutions have stride 1 and no padding. The digest gives no strides, but its output
sizes (64 x 2 = 128, 32 x 2 = 64, 256 in all) are those of stride 1 (stride 2 on the second
layers would give 64 x 1 and 32 x 1); the paper's "the second conv layer downsamples" is the
valid convolution shrinking the length (6 -> 4 -> 2, 10 -> 6 -> 2). Rows 5-9 x cols 6-25
(always zero in the observation) are not read. Each flatten is channel-major (torch's
``(B, C, L) -> (B, C * L)``, as a torch ``SmallCNN`` does).

PensieveExtractor (the original Pensieve actor body; reference ``PensieveExtractorOriginal``)
--------------------------------------------------------------------------------------------
Input: Pensieve's 6 x 8 state (``obs_dim`` 48), newest value in column 7.

* ``Linear(1 -> 128)`` on the last bitrate (row 0, col 7) and on the buffer (row 1, col 7);
* ``Conv1d(1 -> 128, k=4)`` on the 8 past throughputs (row 2; length 8 -> 5, 640 features)
  and, with own weights, on the 8 past delays (row 3; 640);
* ``Conv1d(1 -> 128, k=4)`` on the next chunk's 6 sizes (row 4, cols 0-5; 6 -> 3, 384);
* ``Linear(1 -> 128)`` on the chunks left (row 5, col 7);
* a ReLU after each; features = [bitrate, buffer, throughput, delay, sizes, chunks left]
  (Pensieve's merge order) = ``out_dim`` 128 + 128 + 640 + 640 + 384 + 128 = 2048.

The older values of rows 0, 1 and 5 and row 4's cols 6-7 are not read. Two differences from
Pensieve's tflearn code, both deliberate: (1) Pensieve reads "chunks left" from
``inputs[:, 4:5, -1]`` (row 4, a slip: row 5 holds it), here row 5; (2) tflearn's ``conv_1d``
takes ``[batch, steps, channels]``, so Pensieve's ``inputs[:, 2:3, :]`` is one step of 8
channels ('same' padding) and its "convolution" acts as a dense layer over the 8 values; here,
as the paper and the reference's torch ``PensieveExtractorOriginal`` describe it, a real
convolution over the sequence. The reference's own Pensieve wrapper has 10 past values and 10
sizes (3072 features); this is the original 6 x 8 state of ``env.variant=pensieve``.

Initialisation (``init``)
-------------------------
``"orthogonal"`` (default): every ``Conv1d`` and ``Linear`` weight orthogonal with gain
sqrt(2), biases zero, as :func:`plume.agents.networks.mlp`'s hidden layers. ``"sb3"``: what
the reference's Stable-Baselines3 ``ActorCriticPolicy`` ends up with: its ``init_weights``
touches only ``nn.Linear`` / ``nn.Conv2d``, so the ``Conv1d`` layers keep PyTorch's default
initialisation and only the ``Linear`` layers (Pensieve's three) get orthogonal sqrt(2).
"""

from __future__ import annotations

import math

import torch
from torch import nn

INITS = ("orthogonal", "sb3")
GELATO_LAYOUT = (10, 26)
PENSIEVE_LAYOUT = (6, 8)


def _conv_branch(in_channels: int, channels: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv1d(in_channels, channels, kernel), nn.ReLU(),
        nn.Conv1d(channels, channels, kernel), nn.ReLU(),
        nn.Flatten(),
    )


def _initialise(module: nn.Module, init: str) -> None:
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    kinds = (nn.Linear, nn.Conv1d) if init == "orthogonal" else (nn.Linear,)
    for layer in module.modules():
        if isinstance(layer, kinds):
            nn.init.orthogonal_(layer.weight, gain=math.sqrt(2.0))
            nn.init.zeros_(layer.bias)


def _check_obs_dim(name: str, layout: tuple[int, int], obs_dim: int) -> None:
    expected = layout[0] * layout[1]
    if int(obs_dim) == expected:
        return
    other = {"gelato": "pensieve", "pensieve": "gelato"}[name]
    other_dim = math.prod(PENSIEVE_LAYOUT if other == "pensieve" else GELATO_LAYOUT)
    hint = (f"use network={other} (algo=a2c_{other}) or mlp for env.variant={other}"
            if int(obs_dim) == other_dim
            else "use network=mlp for other observations")
    raise ValueError(
        f"the {name} network needs the {layout[0]} x {layout[1]} {name} observation of env=abr "
        f"env.variant={name} (obs_dim {expected}), got {obs_dim}: {hint}")


class GelatoExtractor(nn.Module):
    """Gelato's ``SmallCNN`` over the 10 x 26 observation -> 256 features (module docstring)."""

    def __init__(self, obs_dim: int, init: str = "orthogonal") -> None:
        super().__init__()
        _check_obs_dim("gelato", GELATO_LAYOUT, obs_dim)
        self.obs_dim = int(obs_dim)
        self.history = _conv_branch(GELATO_LAYOUT[0], 64, 3)   # 10 steps x 6 columns -> 128
        self.sizes = _conv_branch(5, 32, 5)                     # 5 chunks x 10 encodings -> 64
        self.ssim = _conv_branch(5, 32, 5)                      # 5 chunks x 10 encodings -> 64
        self.out_dim = 64 * 2 + 32 * 2 + 32 * 2
        _initialise(self, init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-1]
        x = obs.reshape(-1, *GELATO_LAYOUT)
        features = torch.cat(
            (self.history(x[:, :, 0:6]), self.sizes(x[:, 0:5, 6:16]), self.ssim(x[:, 0:5, 16:26])),
            dim=-1,
        )
        return features.reshape(*lead, self.out_dim)


class PensieveExtractor(nn.Module):
    """The original Pensieve body over the 6 x 8 state -> 2048 features (module docstring)."""

    def __init__(self, obs_dim: int, init: str = "orthogonal") -> None:
        super().__init__()
        _check_obs_dim("pensieve", PENSIEVE_LAYOUT, obs_dim)
        self.obs_dim = int(obs_dim)
        self.bitrate = nn.Linear(1, 128)
        self.buffer = nn.Linear(1, 128)
        self.throughput = nn.Conv1d(1, 128, 4)   # 8 values -> 5 x 128
        self.delay = nn.Conv1d(1, 128, 4)        # 8 values -> 5 x 128
        self.sizes = nn.Conv1d(1, 128, 4)        # 6 values -> 3 x 128
        self.chunks_left = nn.Linear(1, 128)
        self.out_dim = 128 + 128 + 5 * 128 + 5 * 128 + 3 * 128 + 128
        _initialise(self, init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-1]
        x = obs.reshape(-1, *PENSIEVE_LAYOUT)
        relu = torch.relu
        features = torch.cat(
            (
                relu(self.bitrate(x[:, 0, 7:8])),
                relu(self.buffer(x[:, 1, 7:8])),
                relu(self.throughput(x[:, 2:3, :])).flatten(1),
                relu(self.delay(x[:, 3:4, :])).flatten(1),
                relu(self.sizes(x[:, 4:5, 0:6])).flatten(1),
                relu(self.chunks_left(x[:, 5, 7:8])),
            ),
            dim=-1,
        )
        return features.reshape(*lead, self.out_dim)


EXTRACTORS: dict[str, type[nn.Module]] = {
    "gelato": GelatoExtractor,
    "pensieve": PensieveExtractor,
}
"""``network`` name -> extractor class, called as ``EXTRACTORS[name](obs_dim)``."""
