from copper_river.kernel import get_double_all


def test_get_double_all():
    assert get_double_all([1, 3]) == [2, 6]
    assert get_double_all([]) == []
