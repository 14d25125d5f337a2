from bright_hawk.ops import minimum


def test_minimum():
    assert minimum(3, 1) == 1
    assert minimum(1, 2) == 1
