"""CEL policies past the limits (issue 13): a new expression's size and nesting are checked
before anything parses it, integer literals must fit in 64 bits, and nothing in parse or
compile can blow the stack. Each refusal is INVALID_ARGUMENT with its reason and what was
measured, changes no definition, keeps no memory, and the server serves others meanwhile."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
from celpy.celparser import CELParser
from hypothesis import given, settings

from mtawindows.client import (
    Aggregation,
    Field,
    InvalidArgumentError,
    Policy,
    StreamSpec,
    WindowClient,
    WindowSpec,
)
from mtawindows.server.service.cel.compiler import CelPolicy, compile_expression
from mtawindows.server.service.cel.expression_errors import CelError
from mtawindows.server.service.cel.expression_limits import CelLimits, check_limits, measure
from mtawindows.server.service.cel.values import CelField
from mtawindows.testing import LocalServer
from tests.service.test_cel import RECORD, _bool_expr

pytestmark = [pytest.mark.server, pytest.mark.redis]

AGGS = (Aggregation("n", "count"), Aggregation("s", "sum", "x"), Aggregation("m", "max", "x"))
FIELD = "spec.policy.expression.cel"
LIMITS = CelLimits()  # the server's defaults: 4096 bytes, nesting 64
_ts = itertools.count(1000)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")  # pragma: no cover


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalServer(tmp_path_factory.mktemp("cel_limits")) as srv:  # default limits
        yield srv


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Any:
    with WindowClient(server.target, timeout=120) as c:
        c.create_stream(StreamSpec("s", (Field("x", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("s", "w", AGGS, Policy.count(100)))
        c.create_stream(StreamSpec("other", (Field("x", "DOUBLE"),), wall_clock=False))
        c.create_window(WindowSpec("other", "w", AGGS, Policy.count(100)))
        c.append("s", {"ts": [1, 2, 3], "x": [1.0, 5.0, 2.0]})
        yield c


def definitions(c: WindowClient) -> list[Any]:
    return sorted(
        (
            (s.spec.name, repr(s.spec), [repr(w.spec) for w in c.list_windows(s.spec.name)])
            for s in c.list_streams()
        ),
    )


def refused(server: LocalServer, client: WindowClient, text: str) -> InvalidArgumentError:
    """CreateWindow with ``text`` as its policy is refused; nothing changed; others served."""
    before, result = definitions(client), client.query("s", "w")
    with pytest.raises(InvalidArgumentError) as info:
        client.create_window(WindowSpec("s", "p", AGGS, Policy.expression(text)))
    assert definitions(client) == before
    assert client.query("s", "w") == result
    assert server.health() == "SERVING"
    with WindowClient(server.target, timeout=60) as other:  # another client is served
        assert other.append("other", {"ts": [next(_ts)], "x": [1.0]}).rows_applied == 1
    e = info.value
    assert [v.field for v in e.violations] == [FIELD]
    return e


def accepted(client: WindowClient, text: str) -> None:
    """CreateWindow with ``text`` works, and so does the window; then it goes."""
    client.create_window(WindowSpec("s", "p", AGGS, Policy.expression(text)))
    try:
        assert client.append("s", {"ts": [next(_ts)], "x": [1.0]}).rows_applied == 1
        result = client.query("s", "p")  # the policy ran on that batch
        assert result.sequence == client.get_stream("s").batches_appended
        assert result.values["n"] == result.size
    finally:
        client.delete_window("s", "p")


# --------------------------------------------------------------------------- size


def test_a_megabyte_expression_is_refused_before_parsing(
    server: LocalServer, client: WindowClient
) -> None:
    text = "total.n > 1 && " * (1024 * 1024 // 15) + "true"
    e = refused(server, client, text)
    assert e.reason == "CEL_TOO_LARGE"
    assert e.metadata["limit"] == "4096"
    assert e.metadata["bytes"] == str(len(text.encode()))


def test_size_is_counted_in_utf8_bytes_up_to_the_limit(
    server: LocalServer, client: WindowClient
) -> None:
    base = "total.n >= 0"
    accepted(client, base + " " * (4096 - len(base)))  # exactly the limit
    e = refused(server, client, base + " " * (4097 - len(base)))
    assert (e.reason, e.metadata["bytes"]) == ("CEL_TOO_LARGE", "4097")
    wide = base + ' || "' + "é" * 2100 + '" == ""'  # under 4096 characters, over in bytes
    assert len(wide) < 4096 < len(wide.encode())
    e = refused(server, client, wide)
    assert (e.reason, e.metadata["bytes"]) == ("CEL_TOO_LARGE", str(len(wide.encode())))


def test_refused_expressions_keep_no_memory_and_others_keep_appending(
    server: LocalServer, client: WindowClient
) -> None:
    pid = server.pid
    text = "total.n > 1 && " * (1024 * 1024 // 15) + "true"
    refused(server, client, text)  # warm: the first large message grows gRPC's buffers
    rss0 = rss_mb(pid)
    stop = threading.Event()
    appended: list[int] = []
    failures: list[BaseException] = []

    def appender() -> None:
        with WindowClient(server.target, timeout=60) as other:
            for _ in range(2000):  # bounded; stops when the refusals are done
                if stop.is_set():
                    return
                try:
                    appended.append(
                        other.append("other", {"ts": [next(_ts)], "x": [1.0]}).rows_applied
                    )
                except Exception as ex:  # pragma: no cover - reported below
                    failures.append(ex)
                    return

    th = threading.Thread(target=appender)
    th.start()
    try:
        for _ in range(5):
            with pytest.raises(InvalidArgumentError) as info:
                client.create_window(WindowSpec("s", "p", AGGS, Policy.expression(text)))
            assert info.value.reason == "CEL_TOO_LARGE"
    finally:
        stop.set()
        th.join(60)
    assert not failures and appended and set(appended) == {1}
    # before the limits, each of these kept ~1 GB (and 20+ s of CPU)
    assert rss_mb(pid) - rss0 < 64
    assert server.health() == "SERVING"


# --------------------------------------------------------------------------- nesting

DEEP = {
    "parentheses": "(" * 100 + "total.n > 1" + ")" * 100,
    "or_chain": " || ".join(["total.n > 1"] * 200),
    "and_chain": " && ".join(["true"] * 100),
    "plus_chain": " + ".join(["total.n"] * 100) + " > 1",
    "negations": "!" * 100 + "true",
    "minus_signs": "-" * 100 + "total.n > 1",
    "member_chain": "total" + ".n" * 100 + " > 1",
    "calls": "int(" * 70 + "total.n" + ")" * 70 + " > 1",
    "lists": "1 in " + "[" * 70 + "1" + "]" * 70,
    "ternaries": "total.n > 1 ? true : " * 70 + "false",
    "relations": " == ".join(["true"] * 100),
}


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_deep_expressions_are_refused_before_parsing(
    server: LocalServer, client: WindowClient, shape: str
) -> None:
    e = refused(server, client, DEEP[shape])
    assert e.reason == "CEL_TOO_DEEP"
    assert e.metadata["limit"] == "64"
    assert int(e.metadata["depth"]) > 64
    if shape == "parentheses":
        assert e.metadata["brackets"] == "100"


@pytest.mark.parametrize(
    "text",
    [
        "(" * 50 + "total.n > 1" + ")" * 50,  # INTERNAL (RecursionError) before
        " || ".join(["total.n > 1"] * 20),
        " || ".join(["true"] * 60),
        "!" * 60 + "true",
        "int(" * 60 + "total.n" + ")" * 60 + " > 1",
        "total.n - old.n > 1000 || total.m > 2.0 * double(old.n)",
    ],
)
def test_expressions_within_the_limits_work(client: WindowClient, text: str) -> None:
    assert measure(text)[1] <= 64
    accepted(client, text)


# --------------------------------------------------------------------------- literals


@pytest.mark.parametrize(
    "literal",
    [
        "9223372036854775808",
        "-9223372036854775809",
        "0x8000000000000000",
        "18446744073709551616u",
        "0x10000000000000000u",
        "1" + "0" * 40,
    ],
)
def test_integer_literals_past_64_bits_are_refused(
    server: LocalServer, client: WindowClient, literal: str
) -> None:
    e = refused(server, client, f"total.n > {literal}")
    assert e.reason == "INVALID_EXPRESSION"
    assert (e.metadata["line"], e.metadata["column"]) == ("1", "11")


@pytest.mark.parametrize(
    "literal", ["9223372036854775807", "-9223372036854775808", "18446744073709551615u", "0u"]
)
def test_integer_literals_at_the_64_bit_bounds_work(client: WindowClient, literal: str) -> None:
    accepted(client, f"total.n > {literal} || true")


# --------------------------------------------------------------------------- in process


def _tree_depth(tree: Any) -> int:
    """Depth of a parse tree in the nodes the compiler recurses into (operators, calls,
    member access, lists), walked without recursion."""
    through = {"expr", "conditionalor", "conditionaland", "relation", "addition"}
    through |= {"multiplication", "unary", "member", "primary", "paren_expr"}
    transparent = {"exprlist", "fieldinits", "mapinits"}
    deepest = 0
    stack: list[tuple[Any, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        children = getattr(node, "children", None)
        if children is None:
            continue
        kind = node.data
        if kind.startswith(("relation_", "addition_", "multiplication_")):
            kind = "exprlist"  # the node that holds an operator's left operand
        counts = not (kind in through and len(children) == 1) and kind not in transparent
        if counts and kind not in ("literal", "ident", "unary_not", "unary_neg"):
            depth += 1
        deepest = max(deepest, depth)
        stack.extend((c, depth) for c in children)
    return deepest


@settings(max_examples=300, deadline=None)
@given(_bool_expr())
def test_the_measured_nesting_bounds_the_parsed_depth(expr: str) -> None:
    assert measure(expr)[1] >= _tree_depth(CELParser().parse(expr))


@pytest.mark.parametrize("text", [*DEEP.values(), "total.a.b.c", "[1, [2, [3]]]", "a ? b : c"])
def test_the_measured_nesting_bounds_deep_shapes(text: str) -> None:
    assert measure(text)[1] >= _tree_depth(CELParser().parse(text))


def test_brackets_and_operators_inside_strings_and_comments_do_not_count() -> None:
    assert measure("total.n > 1 || \"((((||||))))\" == r'[[[[' // (((( ||||\n")[0] == 0
    assert measure('"""((((\n||||"""')[1] == 0
    assert measure("1.5e-3 + 0x1F - .5")[1] == 2
    assert measure("(((x)))") == (3, 3)


@pytest.mark.parametrize(
    "text",
    [
        "!" * 63 + "true",
        "(" * 63 + "true" + ")" * 63,
        "int(" * 61 + "total.a" + ")" * 61 + " > 1",
        "total.a" + " + total.a" * 62 + " > 1",
        " == ".join(["true"] * 64),
    ],
)
def test_expressions_at_the_limit_compile_without_recursion_errors(text: str) -> None:
    assert measure(text)[1] <= 64
    try:
        compile_expression(text, RECORD, [0], LIMITS)
    except CelError as ex:  # a type error is fine; running out of stack is not
        assert ex.code == "INVALID_EXPRESSION", ex


@pytest.mark.parametrize(
    "text",
    ["!" * 3000 + "true", " == ".join(["true"] * 250), "int(" * 700 + "1" + ")" * 700 + " > 0"],
)
def test_without_limits_a_stack_overflow_is_still_an_invalid_expression(text: str) -> None:
    with pytest.raises(CelError) as info:
        compile_expression(text, RECORD, [0])  # no limits: the restore path
    assert info.value.code == "CEL_TOO_DEEP"
    # raised outside the except clause: no chained traceback keeps the parse tree alive
    assert info.value.__context__ is None and info.value.__cause__ is None


def test_check_limits_names_what_it_measured() -> None:
    with pytest.raises(CelError) as info:
        check_limits("x" * 10, CelLimits(max_bytes=9))
    assert (info.value.code, info.value.metadata) == (
        "CEL_TOO_LARGE",
        {"limit": "9", "bytes": "10"},
    )
    with pytest.raises(CelError) as info:
        check_limits("((a))", CelLimits(max_depth=1))
    assert info.value.code == "CEL_TOO_DEEP"
    assert info.value.metadata == {"limit": "1", "depth": "2", "brackets": "2"}
    check_limits("((a))", CelLimits(max_depth=2))
    with pytest.raises(ValueError):
        CelLimits(max_bytes=0)


def test_policies_compiled_within_limits_still_evaluate() -> None:
    p = CelPolicy(" || ".join(["total.a > 5"] * 30) + " || old.b < 0.0", RECORD)
    rec = (10, 1.0, (1, 1.0), 0, (1.0, 1))
    assert p(rec, rec) is True
    deep = CelPolicy("!" * 62 + "(total.a > 5)", {"a": CelField("int", 0)})
    assert deep((10,), (10,)) is True


@pytest.mark.parametrize(
    "expr",
    ["total.n > " + "9" * 4000, "total." + "a" * 4000 + " > 1", "a" * 4000 + " > 1"],
    ids=["literal", "member", "identifier"],
)
def test_cel_errors_echo_at_most_64_characters_of_a_token(expr: str) -> None:
    from mtawindows.server.service.cel.compiler import CelPolicy
    from mtawindows.server.service.cel.expression_errors import CelError
    from mtawindows.server.service.cel.values import CelField

    with pytest.raises(CelError) as info:
        CelPolicy(expr, {"n": CelField("int", 0)})
    msg = str(info.value)
    assert len(msg) < 400, msg
    assert "a" * 65 not in msg and "9" * 65 not in msg
