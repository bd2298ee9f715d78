"""The README's examples run as written, and its error table covers every exception."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

import polylb
from conftest import PYTHON_DIR

README = (PYTHON_DIR / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, flags=re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_quick_start_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", section("Quick start"), flags=re.S)
    assert blocks, "no python block in the quick start"
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(blocks[0], "README.md:quick-start", "exec"), {"__name__": "readme"})
    assert "'id': 1" in output.getvalue()


def test_error_table_lists_every_exception() -> None:
    errors = section("Errors")
    exported = [
        name
        for name in polylb.__all__
        if isinstance(getattr(polylb, name), type) and issubclass(getattr(polylb, name), polylb.PolylbError)
    ]
    failure_statuses = len(polylb.Status) - 1  # all but OK
    assert len(exported) == failure_statuses + 2  # plus PolylbError and BalancerClosedError
    for name in exported:
        if name != "PolylbError":
            assert f"| `{name}` |" in errors, f"{name} missing from the README error table"
    for status in polylb.Status:
        if status is not polylb.Status.OK:
            assert f"{int(status)} `{status.name}`" in errors, f"{status.name} missing from the table"


def test_every_exception_is_exported_under_its_status() -> None:
    for status, cls in polylb._errors.ERROR_CLASSES.items():
        assert getattr(polylb, cls.__name__) is cls, status


def test_configuration_lists_every_key_the_library_knows() -> None:
    # The library's message for an unknown key lists every key it accepts.
    with pytest.raises(polylb.ConfigError) as info:
        polylb.Balancer(config="no.such.key=1")
    listed = re.search(r"known keys: ([^)]*)\)", info.value.message)
    assert listed, "the library's message no longer lists its keys"
    keys = [key.strip() for key in listed.group(1).split(",")]
    assert "loadbalance" in keys and "hash.nodes" in keys
    configuration = section("Configuration")
    missing = [key for key in keys if f"`{key}`" not in configuration]
    assert not missing, f"README's Configuration section does not name: {missing}"


def test_subsetting_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", section("Configuration"), flags=re.S)
    subsetting = [block for block in blocks if "subset_size" in block]
    assert len(subsetting) == 1, "the Configuration section has one subsetting example"
    exec(compile(subsetting[0], "README.md:subsetting", "exec"), {"__name__": "readme"})


def test_load_report_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", section("Load reports (`orca`)"), flags=re.S)
    assert len(blocks) == 1, "the Load reports section has one example"
    assert "report_load(" in blocks[0]
    exec(compile(blocks[0], "README.md:load-reports", "exec"), {"__name__": "readme"})
