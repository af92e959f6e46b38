"""Bad input and failing user code: a clear error, and the window is left exactly as it was;
and the errors the server sends name only reasons of the contract (``mtawindows.v1.reasons``).

Policies and monoids are user code. Whatever raises during ``insert``, ``push``, ``extend`` or
``enforce`` (a lift refusing an item, a combine refusing an operand, a policy raising on its
k-th call) must propagate and leave the window unchanged; the stream then goes on exactly as if
the failed call had never been made. A monoid that breaks closure while the window restructures
itself makes the window refuse further use (never a wrong answer).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import hypothesis.strategies as st
import pytest
from hypothesis import given, note
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mtawindows.server.engine.amta import AmortizedMTA
from mtawindows.server.engine.laws import approx_equal
from mtawindows.server.engine.lmta import LogMTA
from mtawindows.server.engine.monoids import Count, Max, MonoidBase, Record, Sum
from mtawindows.server.engine.mta_window import WindowCorruptedError
from mtawindows.server.engine.naive import NaiveWindow
from mtawindows.server.engine.policies import CountPolicy, bind_policy
from mtawindows.v1.reasons import DOMAIN, REMEDY, Reason
from tests.support.cases import ALGORITHMS, CASES, STORES


class Boom(Exception):
    pass


class FlakyPolicy:
    """Wraps a policy; raises Boom on the k-th call after ``arm(k)``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.countdown = -1

    def arm(self, k: int) -> None:
        self.countdown = k

    def bind(self, monoid: Any) -> Any:
        fn = bind_policy(self.inner, monoid)

        def policy(total: Any, old: Any) -> bool:
            if self.countdown == 0:
                self.countdown = -1
                raise Boom("policy failed")
            if self.countdown > 0:
                self.countdown -= 1
            return bool(fn(total, old))

        return policy


class FailingPolicyMachine(RuleBasedStateMachine):
    @initialize(
        algorithm=st.sampled_from(sorted(ALGORITHMS)),
        store=st.sampled_from(sorted(STORES)),
        case=st.sampled_from(
            ["count-7", "time-10", "bounded-sum-12", "max-subwindow-or-count", "stats-time"]
        ),
    )
    def setup(self, algorithm: str, store: str, case: str) -> None:
        c = CASES[case]
        self.flaky = FlakyPolicy(c.policy)
        self.window = ALGORITHMS[algorithm](c.monoid, self.flaky, store=STORES[store](), debug=True)
        self.oracle = NaiveWindow(c.monoid, c.policy)
        self.t = 0
        note(f"{algorithm} {store} {case}")

    def item(self, v: int, dt: int) -> dict[str, int]:
        self.t += dt
        return {"v": v, "t": self.t, "p": v + 1}

    @rule(k=st.integers(0, 40))
    def arm(self, k: int) -> None:
        self.flaky.arm(k)

    @rule(v=st.integers(0, 5), dt=st.sampled_from([0, 1, 2, 30]))
    def push(self, v: int, dt: int) -> None:
        x = self.item(v, dt)
        try:
            got = self.window.push(x)
        except Boom:
            return  # the oracle never saw x
        assert approx_equal(got, self.oracle.push(x))

    @rule(vs=st.lists(st.integers(0, 5), max_size=60), dt=st.sampled_from([0, 1, 40]))
    def extend(self, vs: list[int], dt: int) -> None:
        xs = [self.item(v, dt if i == 0 else 1) for i, v in enumerate(vs)]
        try:
            got = self.window.extend(xs)
        except Boom:
            return
        assert got == self.oracle.extend(xs)

    @rule(v=st.integers(0, 5), dt=st.sampled_from([0, 1, 50]))
    def insert_then_enforce(self, v: int, dt: int) -> None:
        x = self.item(v, dt)
        self.window.insert(x)
        self.oracle.insert(x)
        try:
            got = self.window.enforce()
        except Boom:
            return
        assert got == self.oracle.enforce()

    @invariant()
    def unchanged_or_equal(self) -> None:
        if not hasattr(self, "window"):
            return
        assert len(self.window) == len(self.oracle)
        assert approx_equal(self.window.query(), self.oracle.query())
        self.window.check_invariants()


TestFailingPolicy = FailingPolicyMachine.TestCase


POISON = object()


class Poison(MonoidBase):
    """A sum whose combine refuses the marker POISON (its lift lets anything through)."""

    identity = 0
    commutative = True

    def combine(self, older: Any, newer: Any) -> Any:
        if older is POISON or newer is POISON:
            msg = "Poison: POISON is refused"
            raise ValueError(msg)
        return older + newer


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("store", ["memory", "tiered-1", "tiered-3"])
def test_item_refused_by_combine_leaves_window_unchanged(algorithm: str, store: str) -> None:
    policy = lambda total, old: total - old >= 50  # noqa: E731 - a plain callable policy
    w = ALGORITHMS[algorithm](Poison(), policy, store=STORES[store](), debug=True)
    o = NaiveWindow(Poison(), policy)
    for i in range(200):
        v = [1, 2, 3, POISON][i % 7 % 4]
        try:
            got = w.push(v)
        except ValueError as ex:
            assert "POISON is refused" in str(ex)
            with pytest.raises(ValueError, match="POISON is refused"):
                o.push(v)
            continue
        assert got == o.push(v)
        assert len(w) == len(o)
    # a batch with one refused item is refused whole
    before = (len(w), w.query())
    with pytest.raises(ValueError, match="POISON is refused"):
        w.extend([1, 2, 3, POISON, 4])
    assert (len(w), w.query()) == before
    w.check_invariants()


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_bad_item_in_a_batch_is_named_and_nothing_is_applied(algorithm: str) -> None:
    rec = Record(n=Count(), s=Sum("v"))
    w = ALGORITHMS[algorithm](rec, CountPolicy(5), debug=True)
    w.extend([{"v": 1}, {"v": 2}])
    with pytest.raises(
        TypeError, match="Sum: expected a real number \\(int or float\\), got str 'x'"
    ):
        w.extend([{"v": 3}, {"v": "x"}, {"v": 4}])
    with pytest.raises(TypeError, match="expected a row with field 'v'"):
        w.push({"value": 3})
    assert len(w) == 2
    assert w.query() == {"n": 2, "s": 3}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_policy_raising_on_the_whole_window_check_keeps_everything(algorithm: str) -> None:
    """LMTA tests the whole window last; AMTA tests whole trees in bulk mode."""
    armed = []

    def policy(total: Any, old: Any) -> bool:
        if armed and old == total:
            raise Boom("whole window")
        return True  # everything may leave

    w = ALGORITHMS[algorithm](Sum(), policy, debug=True)
    w.extend(range(1, 6))
    assert len(w) == 0
    w.insert(1)
    w.insert(2)
    armed.append(True)
    with pytest.raises(Boom):
        w.extend(range(3, 100))
    assert len(w) == 2
    assert w.query() == 3
    with pytest.raises(Boom):
        w.enforce()
    assert len(w) == 2


class CountdownCombine(MonoidBase):
    """A max whose combine raises on its n-th call: a monoid breaking its contract anywhere."""

    identity = float("-inf")  # the same as Max(), the oracle's monoid

    def __init__(self) -> None:
        super().__init__()
        self.countdown = -1

    def combine(self, older: Any, newer: Any) -> Any:
        if self.countdown == 0:
            self.countdown = -1
            raise Boom("combine failed")
        if self.countdown > 0:
            self.countdown -= 1
        return newer if newer > older else older


def countdown_window(algorithm: str, store: str, rnd: Any, items: int) -> tuple[Any, Any, Any, int]:
    """A window over a CountdownCombine (a time range over the max) and its oracle, both fed
    ``items`` random timestamps; returns (monoid, window, oracle, last timestamp)."""
    m = CountdownCombine()
    pol = lambda total, old: total - old >= 20  # noqa: E731 - a time range over the max
    w = ALGORITHMS[algorithm](m, pol, store=STORES[store]())
    o = NaiveWindow(Max(), pol)
    t = 0
    for _ in range(items):
        t += rnd.choice([0, 1, 1, 2])
        w.push(t)
        o.push(t)
    return m, w, o, t


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@given(fail_at=st.integers(0, 60), seed=st.integers(0, 2**16))
def test_combine_failing_anywhere_never_gives_a_wrong_answer(
    algorithm: str, fail_at: int, seed: int
) -> None:
    """Either the window is unchanged and right, or it refuses every later call."""
    import random

    rnd = random.Random(seed)
    m, w, o, t = countdown_window(algorithm, "memory", rnd, rnd.randint(0, 200))
    m.countdown = fail_at
    t += rnd.choice([1, 30, 100])
    batch = [t + i for i in range(rnd.randint(1, 80))]
    try:
        w.extend(batch) if rnd.random() < 0.5 else w.push(batch[0])
    except Boom:
        pass  # failed while planning or inserting: must be unchanged
    except WindowCorruptedError as ex:
        assert isinstance(ex.__cause__, Boom)  # failed while restructuring: must refuse use
    else:
        return  # the countdown did not fire within this operation
    m.countdown = -1
    try:
        got = (len(w), w.query())
    except WindowCorruptedError as ex:
        assert isinstance(ex.__cause__, Boom)
        with pytest.raises(WindowCorruptedError):
            w.push(t + 1000)
        return
    assert got == (len(o), o.query())
    w.check_invariants()


def test_corrupted_window_refuses_use_with_the_cause() -> None:
    m = CountdownCombine()
    w = AmortizedMTA(m, lambda total, old: total - old >= 10)
    w.extend(range(1, 50))
    # find a failure point inside the commit: the plan's combines pass, the recompute's fail
    for fail_at in range(2000):
        w = AmortizedMTA(m, lambda total, old: total - old >= 10)
        m.countdown = -1
        w.extend(range(1, 500))
        m.countdown = fail_at
        try:
            w.extend(range(2000, 2100))
        except WindowCorruptedError as ex:
            assert isinstance(ex.__cause__, Boom)
            break
        except Boom:
            continue
    else:
        pytest.fail("no failure point hit the commit phase")
    m.countdown = -1
    with pytest.raises(WindowCorruptedError, match="rebuild the window"):
        w.query()
    with pytest.raises(WindowCorruptedError):
        w.push(5000)


def test_monoid_without_the_protocol_is_refused() -> None:
    with pytest.raises(TypeError, match="object has no 'identity'"):
        LogMTA(object(), CountPolicy(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bulk_factor must be an int >= 1, got 0"):
        AmortizedMTA(Sum(), lambda t, o: False, bulk_factor=0)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("store", ["memory", "tiered-2"])
@pytest.mark.parametrize("op", ["push", "extend", "insert+enforce", "push-gap"])
def test_combine_failing_at_every_call_of_an_operation(algorithm: str, store: str, op: str) -> None:
    """Exhaustive over the failure point: the n-th combine of one operation raises, for every n
    until the operation completes. Each time the window is either exactly as before (the
    monoid's own exception) or refuses further use (WindowCorruptedError), never wrong."""
    import random

    for seed in range(4):
        fail_at = 0
        while True:
            rnd = random.Random(seed)
            m, w, o, t = countdown_window(algorithm, store, rnd, rnd.randint(5, 120))
            before = (len(o), o.query())
            t += 60 if op == "push-gap" else 1
            batch = [t + i for i in range(rnd.randint(2, 60))]
            m.countdown = fail_at
            try:
                if op in ("push", "push-gap"):
                    w.push(batch[0])
                elif op == "extend":
                    w.extend(batch)
                else:
                    w.insert(batch[0])
                    w.enforce()
            except Boom:
                m.countdown = -1
                if op == "insert+enforce" and len(w) == before[0] + 1:
                    o.insert(batch[0])  # the insert succeeded; the enforce failed unchanged
                    assert (len(w), w.query()) == (len(o), o.query())
                else:
                    assert (len(w), w.query()) == before, (seed, fail_at)
                w.check_invariants()
            except WindowCorruptedError as ex:
                assert isinstance(ex.__cause__, Boom)
                m.countdown = -1
                with pytest.raises(WindowCorruptedError):
                    w.query()
            else:
                if m.countdown > 0:
                    break  # the operation finished before the n-th combine: all points covered
            fail_at += 1
            assert fail_at < 5000


# --------------------------------------------------------------------------- the reasons contract

ROOT = Path(__file__).resolve().parents[2]
# where the reasons the server sends are written: the server, the contract's own refusals
# (SpecError reasons travel as they are) and the client, which matches them
REASON_SOURCES = [
    *sorted((ROOT / "server").rglob("*.py")),
    ROOT / "proto" / "mtawindows" / "v1" / "types.py",
    ROOT / "proto" / "mtawindows" / "v1" / "convert.py",
    ROOT / "client" / "errors.py",
]
# callables that take a reason positionally, and where: (code, reason, ...) or invalid's
# (field, message, reason)
REASON_ARG = {"ServiceError": 1, "Ending": 1, "Failure": 1, "rich_status": 1, "invalid": 2}
CODES = {c.name for c in grpc.StatusCode}


def _reason_literals(tree: ast.AST) -> Iterator[tuple[ast.expr, bool]]:
    """The expressions of ``tree`` that stand for a reason, each with whether a gRPC code
    name is also allowed there (a ``code`` that is a reason, as CelError's)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
            i = REASON_ARG.get(name)
            if i is not None and len(node.args) > i:
                yield node.args[i], False
            for k in node.keywords:
                if k.arg in ("reason", "code"):
                    yield k.value, k.arg == "code"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = a.posonlyargs + a.args
            pairs = [*zip(params[len(params) - len(a.defaults) :], a.defaults, strict=True)]
            pairs += [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d]
            for param, default in pairs:
                if param.arg in ("reason", "code"):
                    yield default, param.arg == "code"
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(x, ast.Attribute) and x.attr == "reason" for x in sides):
                yield from ((x, False) for x in sides)


def _sent_reasons() -> tuple[dict[str, list[str]], set[str]]:
    """Reason literals (value -> where) and ``Reason.X`` names used in the sources."""
    literals: dict[str, list[str]] = {}
    named: set[str] = set()
    for path in REASON_SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(ROOT)
        for expr, code_ok in _reason_literals(tree):
            value = expr.value if isinstance(expr, ast.Constant) else None
            if isinstance(value, str) and value and not (code_ok and value in CODES):
                literals.setdefault(value, []).append(f"{where}:{expr.lineno}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "Reason":
                named.add(node.attr)
    return literals, named


def test_every_reason_the_server_sends_is_in_the_contract() -> None:
    literals, named = _sent_reasons()
    unknown = {r: where for r, where in literals.items() if r not in Reason.__members__}
    assert not unknown, f"reasons missing from mtawindows.v1.reasons.Reason: {unknown}"
    assert named <= set(Reason.__members__), named - set(Reason.__members__)
    # the walk sees the reasons (as literals or as Reason members), and each member is sent
    assert set(literals) | named == set(Reason.__members__)


def test_the_walk_finds_reasons_where_they_are_written() -> None:
    tree = ast.parse(
        "raise ServiceError('NOT_FOUND', 'NEW_ONE', 'm')\n"
        "raise invalid('f', 'm', 'OTHER_ONE')\n"
        "x = CelError('m', code='CODED')\n"
        "def f(reason='DEFAULTED', code='INVALID_ARGUMENT'): pass\n"
        "ok = e.reason == 'COMPARED'\n"
    )
    found = {e.value for e, _ in _reason_literals(tree) if isinstance(e, ast.Constant)}
    assert {"NEW_ONE", "OTHER_ONE", "CODED", "DEFAULTED", "COMPARED"} <= found


def test_reasons_equal_their_names_and_say_what_they_mean() -> None:
    assert DOMAIN == "mtawindows.dev"
    for name, member in Reason.__members__.items():
        assert member == name and member.value == name and str(member) == name
        assert member.meaning and "\n" not in member.meaning, name
        assert Reason(name) is member
        # what to do about it (the troubleshooting column of docs/reference/errors.md)
        assert REMEDY.get(member) and "\n" not in REMEDY[member], f"{name}: no remedy"
