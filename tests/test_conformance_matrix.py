"""docs/conformance-matrix.md's generator: the page names the commands it ran and nests each
run's report under its title."""

from __future__ import annotations

import pytest

matrix = pytest.importorskip(
    "turnout_conformance.matrix", reason="the generator ships with turnout-conformance"
)


def test_page_names_the_runs_and_nests_their_headings() -> None:
    reports = ["# run one\n\n## Summary\n\n| a |\n", "# run two\n\ntext # not a heading\n"]
    commands = [["turnout", "conformance", "--mode", "isolated"], ["turnout", "conformance"]]
    page = matrix.render(reports, commands, "a test machine", ", at commit abc1234")
    lines = page.splitlines()
    assert lines[0] == "# Conformance matrices"
    assert "a test machine" in page and "at commit abc1234" in page
    assert "    turnout conformance --mode isolated --markdown ..." in lines
    assert "### run one" in lines and "#### Summary" in lines and "### run two" in lines
    assert "text # not a heading" in lines
    assert page.index("### run one") < page.index("### run two")
