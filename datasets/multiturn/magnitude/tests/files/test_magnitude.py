from magnitudes.magnitude import magnitude


def test_magnitude():
    assert magnitude(-3) == 3
    assert magnitude(2) == 2


def test_magnitude_hidden():
    assert magnitude(0) == 0
    assert magnitude(-7) == 7
    assert magnitude(5) == 5
