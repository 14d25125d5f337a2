from bright_hawk.ops import minimum


def test_minimum():
    assert minimum(3, 1) == 1
    assert minimum(1, 2) == 1


def test_minimum_hidden():
    assert minimum(5, 9) == 5
    assert minimum(-1, -4) == -4
    assert minimum(2, 2) == 2
