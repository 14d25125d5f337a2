"""The SWE-bench-style grader: log parsing and the FAIL_TO_PASS / PASS_TO_PASS rule."""

from services.tasks.grading.grade import grade, parse_pytest_log

LOG = """\
============================= test session starts ==============================
collected 5 items

tests/test_a.py ..F.E                                                    [100%]
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a b-1]
PASSED tests/test_a.py::test_teardown_breaks
FAILED tests/test_a.py::test_two - AssertionError: assert 1 == 2
ERROR tests/test_a.py::test_teardown_breaks - RuntimeError: boom
XFAIL tests/test_a.py::test_xf - reason
SKIPPED [1] tests/test_a.py:40: not here
ERROR tests/test_b.py
"""


def test_parse_pytest_summary():
    st = parse_pytest_log(LOG)
    assert st["tests/test_a.py::test_one"] == "PASSED"
    assert st["tests/test_a.py::test_param[a b-1]"] == "PASSED"
    assert st["tests/test_a.py::test_two"] == "FAILED"
    assert st["tests/test_a.py::test_teardown_breaks"] == "ERROR"  # worst status wins
    assert st["tests/test_a.py::test_xf"] == "XFAIL"
    assert st["tests/test_b.py"] == "ERROR"
    assert not any(k.startswith("[") for k in st)


def test_parse_verbose_lines_and_colors():
    st = parse_pytest_log("tests/t.py::test_x PASSED   [ 50%]\n\x1b[31mtests/t.py::test_y FAILED\x1b[0m [100%]\n")
    assert st == {"tests/t.py::test_x": "PASSED", "tests/t.py::test_y": "FAILED"}


def test_grade_requires_every_f2p_and_p2p():
    st = {"a": "PASSED", "b": "PASSED", "c": "FAILED", "x": "XFAIL", "s": "SKIPPED"}
    assert grade(st, ["a"], ["b", "x"])["resolved"] is True
    r = grade(st, ["a", "c"], ["b"])
    assert r["resolved"] is False and r["failed_tests"] == {"c": "FAILED"}
    r = grade(st, ["a"], ["b", "missing"])  # a test absent from the log counts as failing
    assert r["resolved"] is False and r["failed_tests"] == {"missing": "MISSING"}
    assert grade(st, ["s"], [])["resolved"] is False  # skipped is not a pass
    assert r["tests_status"]["PASS_TO_PASS"] == {"success": ["b"], "failure": ["missing"]}
