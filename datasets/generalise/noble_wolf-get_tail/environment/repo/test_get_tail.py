from noble_wolf.utils import get_tail


def test_get_tail():
    assert get_tail([1, 2, 3, 4], 1) == [4]
    assert get_tail([5, 6], 2) == [5, 6]
