from indigo_canyon.kernel import calc_square


def test_calc_square():
    assert calc_square(3) == 9
    assert calc_square(0) == 0
