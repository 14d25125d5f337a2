from noble_mole.tools import sign


def test_sign():
    assert sign(-5) == -1
    assert sign(4) == 1


def test_sign_hidden():
    assert sign(0) == 0
    assert sign(-1) == -1
    assert sign(9) == 1
