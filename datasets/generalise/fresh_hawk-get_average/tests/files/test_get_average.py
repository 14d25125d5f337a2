from fresh_hawk.utils import get_average


def test_get_average():
    assert get_average([2, 4]) == 3
    assert get_average([5]) == 5


def test_get_average_hidden():
    assert get_average([1, 2, 3]) == 2
    assert get_average([10, 20, 30, 40]) == 25
    assert get_average([-2, 2]) == 0
