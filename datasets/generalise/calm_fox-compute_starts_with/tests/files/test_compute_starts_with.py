from calm_fox.core import compute_starts_with


def test_compute_starts_with():
    assert compute_starts_with('hello', 'he') == True
    assert compute_starts_with('abc', 'b') == False


def test_compute_starts_with_hidden():
    assert compute_starts_with('abc', 'abc') == True
    assert compute_starts_with('xy', 'xyz') == False
    assert compute_starts_with('cat', 'c') == True
