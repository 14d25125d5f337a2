from silver_island.calc import dedupe_value


def test_dedupe_value():
    assert dedupe_value([1, 1, 2]) == [1, 2]
    assert dedupe_value([]) == []


def test_dedupe_value_hidden():
    assert dedupe_value([3]) == [3]
    assert dedupe_value([2, 2, 2]) == [2]
    assert dedupe_value([1, 2, 1, 3]) == [1, 2, 3]
