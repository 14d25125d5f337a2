from silver_island.calc import dedupe_value


def test_dedupe_value():
    assert dedupe_value([1, 1, 2]) == [1, 2]
    assert dedupe_value([]) == []
