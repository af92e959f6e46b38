"""The main job of this milestone: the demo streams, prints, and checks itself."""

from __future__ import annotations

import pytest

from mtawindows.server import demo


@pytest.mark.parametrize(
    "args",
    [
        ["--items", "6000", "--every", "2000", "--check-every", "3000"],
        [
            "--items",
            "4000",
            "--every",
            "2000",
            "--check-every",
            "2000",
            "--algorithm",
            "lmta",
            "--store",
            "tiered",
        ],
    ],
)
def test_demo_prints_results_and_checks_itself(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.main(args) == 0
    out = capsys.readouterr().out
    assert "over the last 600 s of memory usage" in out
    lines = [ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]
    assert len(lines) >= 2  # a result line every --every items
    assert "checks against a recomputation passed" in out
    assert "0 checks" not in out
    if "--store" not in args:  # the default: the embedded Redis, reopened at the end
        assert "reopened from Redis: same result" in out


def test_demo_refuses_bad_arguments() -> None:
    with pytest.raises(SystemExit):
        demo.main(["--items", "0"])
