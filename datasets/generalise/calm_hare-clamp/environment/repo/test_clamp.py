from calm_hare.utils import clamp


def test_clamp():
    assert clamp(2, 0, 3) == 2
    assert clamp(5, 0, 3) == 3
