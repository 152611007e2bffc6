"""gateway/replication/topic_configs.py: config changes cross once, never bounce back, and two
sides changing one key at once settle on one value (the side whose name sorts first)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.replication.topic_configs import STUCK_LOOKS, config_changes

KEYS = ("retention.ms", "cleanup.policy", "max.message.bytes")


def test_a_change_here_is_pushed_and_a_change_there_is_left_to_them() -> None:
    agreed = {"retention.ms": "100"}
    push, now = config_changes({"retention.ms": "200"}, agreed, {"retention.ms": "100"}, False)
    assert push == {"retention.ms": "200"} and now == {"retention.ms": "200"}
    # changed there only: nothing to push here, the remote pushes it
    assert config_changes(agreed, agreed, {"retention.ms": "300"}, True) == ({}, agreed)
    # a removal here is a removal there
    push, now = config_changes({}, agreed, {"retention.ms": "100"}, False)
    assert push == {"retention.ms": None} and now == {}
    # what came from there (here == there) is agreed, not pushed back
    assert config_changes({"retention.ms": "300"}, agreed, {"retention.ms": "300"}, True) == (
        {}, {"retention.ms": "300"})
    # both changed: only the winner pushes; the other takes the winner's value as its base
    assert config_changes({"retention.ms": "1"}, agreed, {"retention.ms": "2"}, True)[0] == {
        "retention.ms": "1"}
    assert config_changes({"retention.ms": "2"}, agreed, {"retention.ms": "1"}, False) == (
        {}, {"retention.ms": "1"})


values = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(("1", "2", "3")))


@settings(max_examples=400, deadline=None)
@given(start=values, steps=st.lists(st.tuples(st.sampled_from(("east", "west")), values),
                                    min_size=1, max_size=8))
def test_two_sides_always_converge_and_stay_put(start: dict[str, str],
                                                steps: list[tuple[str, dict[str, str]]]) -> None:
    """Both sides agreed on `start`; then, step by step, one side is edited (a key set to a
    value, or removed when the edit maps it to "3") and then that side or the other looks (the
    remote applies a push at once).  Whatever the order, a few looks later both hold the same
    configs and a further look pushes nothing."""
    def edit(configs: dict[str, str], changes: dict[str, str]) -> dict[str, str]:
        out = dict(configs)
        for key, value in changes.items():
            if value == "3":
                out.pop(key, None)
            else:
                out[key] = value
        return out

    configs = {"east": dict(start), "west": dict(start)}
    agreed = {"east": dict(start), "west": dict(start)}
    stuck: dict[str, dict[str, int]] = {"east": {}, "west": {}}

    def look(side: str) -> dict[str, str | None]:
        other = "west" if side == "east" else "east"
        push, agreed[side] = config_changes(configs[side], agreed[side], configs[other],
                                            side < other, stuck[side])
        for key, value in push.items():
            if value is None:
                configs[other].pop(key, None)
            else:
                configs[other][key] = value
        return push

    for i, (side, changes) in enumerate(steps):
        configs[side] = edit(configs[side], changes)
        look(side if i % 2 else ("west" if side == "east" else "east"))
    for side in ("east", "west") * (STUCK_LOOKS + 1):
        look(side)
    assert configs["east"] == configs["west"]
    assert look("east") == {} and look("west") == {}
    assert configs["east"] == configs["west"] == agreed["east"] == agreed["west"]


def test_a_change_made_before_the_remote_change_was_seen_is_not_lost() -> None:
    """east pushes 700 to west; a user sets 800 in west before west looked: west's 800 is
    the later change and both end with it (before, the two sides stayed apart forever)."""
    configs = {"east": {"r": "700"}, "west": {"r": "800"}}
    agreed = {"east": {"r": "700"}, "west": {"r": "600"}}
    for side in ("west", "east", "west", "east"):
        other = "east" if side == "west" else "west"
        push, agreed[side] = config_changes(configs[side], agreed[side], configs[other],
                                            side < other)
        configs[other].update({k: v for k, v in push.items() if v is not None})
    assert configs == {"east": {"r": "800"}, "west": {"r": "800"}}
