"""``train.seeds_in_process``: the K training loops of one job's seeds, each an ordinary loop
in its own thread and run directory, whose learners train together.

Each seed's loop runs unchanged (resume, evaluation, checkpoints, the sampler session): its
agent is a :class:`SeedLearner`, which hands ``learn`` to the :class:`SeedGroup`. The group
waits until every seed still training has asked, then trains those that stand furthest
behind (the fewest env steps; the nearest target among them) with
:func:`plume.agents.lockstep.learn_together`, each in its own slot, and lets them go on; the
others wait for their turn. So seeds resumed from checkpoints taken at different evaluations
catch up one stretch at a time, in the same slots, and end as the uninterrupted run did. A
seed whose training fails (diverged) gets its error alone; a seed whose loop ends (completed,
paused, failed) leaves the group, and the rest go on without it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from plume.agents.base import Algorithm

__all__ = ["GroupSeat", "SeedGroup", "SeedLearner"]


class SeedGroup:
    """The meeting point of ``width`` seeds' learners (slots 0 .. width-1)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._changed = threading.Condition()
        self._training = set(range(width))  # slots whose loop has not ended
        self._asking: dict[int, tuple[Algorithm, int]] = {}
        self._answers: dict[int, Any] = {}

    def seat(self, slot: int, seed: int) -> GroupSeat:
        """Where seed ``seed``'s loop sits: slot ``slot`` of this group."""
        return GroupSeat(self, slot, f"seed={seed}")

    def learn(self, slot: int, agent: Algorithm, until: int) -> list[dict[str, Any]]:
        """``agent.learn(until)``, trained together with the other seeds' turns."""
        with self._changed:
            self._asking[slot] = (agent, until)
            while slot not in self._answers:
                if not self._train_if_all_asked():
                    self._changed.wait()
            answer = self._answers.pop(slot)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def leave(self, slot: int) -> None:
        """Slot ``slot``'s loop has ended: the others no longer wait for it."""
        with self._changed:
            self._training.discard(slot)
            self._asking.pop(slot, None)
            self._train_if_all_asked()
            self._changed.notify_all()

    def _train_if_all_asked(self) -> bool:
        """With the lock held: when every training seed is asking, train the turn of those
        furthest behind and wake everyone; False while some seed is still evaluating."""
        from plume.agents.lockstep import learn_together  # deferred: torch loads with a learner

        if not self._asking or set(self._asking) != self._training:
            return False
        behind = min((agent.env_steps, until) for agent, until in self._asking.values())
        turn = {slot: agent for slot, (agent, until) in self._asking.items()
                if (agent.env_steps, until) == behind}
        try:
            results = learn_together([turn.get(slot) for slot in range(self.width)], behind[1])
        except BaseException as err:  # noqa: BLE001 (an env's error, or the process dying,
            # ends every seed of the turn, each in its own thread)
            results = [err if slot in turn else None for slot in range(self.width)]
        for slot in turn:
            del self._asking[slot]
            self._answers[slot] = results[slot]
        self._changed.notify_all()
        return True


@dataclass(frozen=True)
class GroupSeat:
    """A loop's seat in a group (``runtime.Alone``'s counterpart): its agent trains as a
    :class:`SeedLearner` of the group, its progress lines say which seed they are."""

    group: SeedGroup
    slot: int
    label: str

    def __call__(self, agent: Algorithm) -> SeedLearner:
        return SeedLearner(self.group, self.slot, agent)


class SeedLearner:
    """One seed's agent as its training loop sees it: every call is the agent's own, except
    ``learn``, which the seed's group trains together with the others."""

    def __init__(self, group: SeedGroup, slot: int, agent: Algorithm) -> None:
        self.group, self.slot, self.agent = group, slot, agent

    def learn(self, until_env_steps: int) -> list[dict[str, Any]]:
        return self.group.learn(self.slot, self.agent, until_env_steps)

    @property
    def env_steps(self) -> int:
        return self.agent.env_steps

    @property
    def track_learner_signal(self) -> bool:
        return self.agent.track_learner_signal

    @track_learner_signal.setter
    def track_learner_signal(self, value: bool) -> None:
        self.agent.track_learner_signal = value

    def act(self, obs, deterministic: bool = True):
        return self.agent.act(obs, deterministic)

    def learner_signal(self):
        return self.agent.learner_signal()

    def greedy_policy(self):
        return self.agent.greedy_policy()

    def state_dict(self) -> dict[str, Any]:
        return self.agent.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state)

    def episode_state(self) -> dict[str, Any]:
        return self.agent.episode_state()

    def load_episode_state(self, state: dict[str, Any]) -> None:
        self.agent.load_episode_state(state)
