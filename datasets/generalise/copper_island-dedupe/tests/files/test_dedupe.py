from copper_island.base import dedupe


def test_dedupe():
    assert dedupe([1, 1, 2]) == [1, 2]
    assert dedupe([]) == []


def test_dedupe_hidden():
    assert dedupe([3]) == [3]
    assert dedupe([2, 2, 2]) == [2]
    assert dedupe([1, 2, 1, 3]) == [1, 2, 3]
