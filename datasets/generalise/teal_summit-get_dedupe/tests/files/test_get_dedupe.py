from teal_summit.procs import get_dedupe


def test_get_dedupe():
    assert get_dedupe([1, 1, 2]) == [1, 2]
    assert get_dedupe([]) == []


def test_get_dedupe_hidden():
    assert get_dedupe([3]) == [3]
    assert get_dedupe([2, 2, 2]) == [2]
    assert get_dedupe([1, 2, 1, 3]) == [1, 2, 3]
