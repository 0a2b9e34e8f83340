"""``plume.checks``: one dialect of argument checks for environments, algorithms and samplers,
and the declarations samplers build on (``plume.sampling.inputs``, ``ConfigField``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from plume import checks
from plume.checks import FieldError, FieldTypeError


@pytest.mark.parametrize("check, args, value, normalised", [
    (checks.real, (), 2, 2.0), (checks.real, (), math.inf, math.inf),
    (checks.finite, (), np.float32(-1.5), -1.5), (checks.positive, (), 3, 3.0),
    (checks.fraction, (), 1, 1.0), (checks.integer, (0,), 3.0, 3),
    (checks.integer, (1,), np.int64(4), 4), (checks.boolean, (), np.True_, True),
    (checks.choice, (("a", "b"),), "b", "b"), (checks.sizes, (), [64, 64], (64, 64)),
])
def test_a_check_returns_the_value_normalised(check, args, value, normalised):
    out = check("x", value, *args)
    assert out == normalised and type(out) is type(normalised)


@pytest.mark.parametrize("check, args, value, message", [
    (checks.real, (), math.nan, "x must be a real number, got nan"),
    (checks.finite, (), math.inf, "x must be a finite number, got inf"),
    (checks.positive, (), 0, "x must be a positive number, got 0"),
    (checks.fraction, (), 1.5, "x must be in [0, 1], got 1.5"),
    (checks.fraction, (), np.float64(-0.1), "x must be in [0, 1], got -0.1"),
    (checks.integer, (1,), 2.5, "x must be an integer >= 1, got 2.5"),
    (checks.integer, (2,), 1, "x must be an integer >= 2, got 1"),
    (checks.choice, (("a", "b"),), "c", "x must be one of ('a', 'b'), got 'c'"),
    (checks.choice, (["a", "b"],), "c", "x must be one of ['a', 'b'], got 'c'"),
    (checks.sizes, (), (64, 0), "x must be a sequence of positive integers, got (64, 0)"),
])
def test_a_failed_check_names_the_field_and_what_was_expected(check, args, value, message):
    with pytest.raises(FieldError) as caught:
        check("x", value, *args)
    assert str(caught.value) == message and caught.value.field == "x"
    assert not isinstance(caught.value, TypeError)


@pytest.mark.parametrize("check, args, value", [
    (checks.real, (), "1"), (checks.positive, (), None), (checks.integer, (0,), True),
    (checks.fraction, (), False), (checks.boolean, (), 1), (checks.sizes, (), 3),
])
def test_a_value_of_the_wrong_kind_is_a_type_error_too(check, args, value):
    with pytest.raises(FieldTypeError) as caught:
        check("x", value, *args)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


def test_algorithm_configs_report_their_own_names_as_plain_value_errors():
    """The schema reports an algo error as it stands (``algo: PPOConfig.gamma ...``): the
    agents' checks say ``<Config>.<field>`` and are not FieldErrors."""
    from plume.agents.ppo import PPOConfig

    with pytest.raises(ValueError, match=r"^PPOConfig\.n_epochs must be an integer >= 1, got 0$"
                       ) as caught:
        PPOConfig(n_epochs=0)
    assert type(caught.value) is ValueError
    assert PPOConfig(n_epochs=2.0).n_epochs == 2  # a whole float is a count, stored as an int


def test_a_sampler_input_kind_is_declared_once_with_its_source():
    from plume.harness.config.scored_controllers import CONTROLLER_ROLES
    from plume.sampling import INPUT_KINDS, SAMPLER_INPUTS, SAMPLERS, SamplerNeeds
    from plume.sampling.inputs import INPUT_SOURCES, InputKind

    assert SAMPLER_INPUTS == tuple(INPUT_KINDS)
    assert {k.source for k in INPUT_KINDS.values()} <= set(INPUT_SOURCES)
    assert {k.role for k in INPUT_KINDS.values() if k.source == "controllers"} <= set(
        CONTROLLER_ROLES)
    assert all(set(cls.NEEDS.inputs) <= set(INPUT_KINDS) for cls in SAMPLERS.values())
    with pytest.raises(ValueError, match=r"unknown sampler input\(s\) \['nope'\]; known: "):
        SamplerNeeds(inputs=("nope",))
    with pytest.raises(ValueError, match="takes read, not role"):
        InputKind("x", "(n,) a thing", "traces", role="baseline")


def test_a_sampler_reads_its_options_from_its_config():
    from plume.sampling import PlumeDynamicSampler, TraceErrorSampler

    rng = np.random.default_rng(0)
    sampler = PlumeDynamicSampler(4, rng, np.arange(4) % 2, np.arange(4.0)[:, None], alpha=0.3)
    assert sampler.alpha == sampler.config.alpha == 0.3
    assert "warmup" not in vars(sampler)  # read from the config, not copied
    with pytest.raises(AttributeError, match="alpha is read from its config"):
        sampler.alpha = 0.5
    assert TraceErrorSampler(4, rng, np.arange(4) % 2, np.arange(4.0)[:, None]).alpha == 1.0
