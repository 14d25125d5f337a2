from indigo_canyon.kernel import calc_square


def test_calc_square():
    assert calc_square(3) == 9
    assert calc_square(0) == 0


def test_calc_square_hidden():
    assert calc_square(4) == 16
    assert calc_square(-5) == 25
    assert calc_square(1) == 1
