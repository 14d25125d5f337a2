from teal_glacier.routines import compute_dedupe


def test_compute_dedupe():
    assert compute_dedupe([1, 1, 2]) == [1, 2]
    assert compute_dedupe([]) == []


def test_compute_dedupe_hidden():
    assert compute_dedupe([3]) == [3]
    assert compute_dedupe([2, 2, 2]) == [2]
    assert compute_dedupe([1, 2, 1, 3]) == [1, 2, 3]
