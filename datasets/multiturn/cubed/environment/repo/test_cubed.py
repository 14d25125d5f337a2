from volumes.cubed import cubed


def test_cubed():
    assert cubed(2) == 8
    assert cubed(1) == 1
