from volumes.cubed import cubed


def test_cubed():
    assert cubed(2) == 8
    assert cubed(1) == 1


def test_cubed_hidden():
    assert cubed(3) == 27
    assert cubed(-2) == -8
    assert cubed(0) == 0
