"""The TwoStacks baseline gives the same windows as the oracle (it is benchmarked against MTA)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from mtawindows.server.engine.baselines import TwoStacks
from mtawindows.server.engine.laws import approx_equal
from mtawindows.server.engine.naive import NaiveWindow
from tests.support.cases import CASES


@given(
    case=st.sampled_from(sorted(CASES)),
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([0, 1, 2, 40]), st.booleans()), max_size=120
    ),
)
def test_two_stacks_matches_the_oracle(case: str, steps: list[tuple[int, int, bool]]) -> None:
    c = CASES[case]
    a, b = TwoStacks(c.monoid, c.policy), NaiveWindow(c.monoid, c.policy)
    t = 0
    for v, dt, batch in steps:
        t += dt
        x = {"v": (1 if v == 5 else 0) if c.values == "zeros" else v, "t": t, "p": v + 1}
        if batch:
            assert a.extend([x, x]) == b.extend([x, x])
        else:
            assert approx_equal(a.push(x), b.push(x))
        assert len(a) == len(b)
