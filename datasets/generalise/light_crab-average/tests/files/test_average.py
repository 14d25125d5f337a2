from light_crab.funcs import average


def test_average():
    assert average([2, 4]) == 3
    assert average([5]) == 5


def test_average_hidden():
    assert average([1, 2, 3]) == 2
    assert average([10, 20, 30, 40]) == 25
    assert average([-2, 2]) == 0
