from magnitudes.magnitude import magnitude


def test_magnitude():
    assert magnitude(-3) == 3
    assert magnitude(2) == 2
