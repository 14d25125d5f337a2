from fresh_hawk.utils import get_average


def test_get_average():
    assert get_average([2, 4]) == 3
    assert get_average([5]) == 5
