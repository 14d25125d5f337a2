from copper_river.kernel import get_double_all


def test_get_double_all():
    assert get_double_all([1, 3]) == [2, 6]
    assert get_double_all([]) == []


def test_get_double_all_hidden():
    assert get_double_all([5]) == [10]
    assert get_double_all([0, -1]) == [0, -2]
    assert get_double_all([4, 2]) == [8, 4]
