from calm_fox.core import compute_starts_with


def test_compute_starts_with():
    assert compute_starts_with('hello', 'he') == True
    assert compute_starts_with('abc', 'b') == False
