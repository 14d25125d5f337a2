from red_hare.tools import power


def test_power():
    assert power(2, 3) == 8
    assert power(5, 0) == 1


def test_power_hidden():
    assert power(3, 2) == 9
    assert power(2, 5) == 32
    assert power(7, 1) == 7
