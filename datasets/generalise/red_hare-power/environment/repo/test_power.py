from red_hare.tools import power


def test_power():
    assert power(2, 3) == 8
    assert power(5, 0) == 1
