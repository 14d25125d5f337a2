from calm_hare.utils import clamp


def test_clamp():
    assert clamp(2, 0, 3) == 2
    assert clamp(5, 0, 3) == 3


def test_clamp_hidden():
    assert clamp(-1, 0, 3) == 0
    assert clamp(9, 1, 4) == 4
    assert clamp(1, 0, 3) == 1
