from noble_mole.tools import sign


def test_sign():
    assert sign(-5) == -1
    assert sign(4) == 1
