from copper_canyon.base import calc_perimeter


def test_calc_perimeter():
    assert calc_perimeter(3, 4) == 14
    assert calc_perimeter(0, 0) == 0


def test_calc_perimeter_hidden():
    assert calc_perimeter(1, 1) == 4
    assert calc_perimeter(5, 2) == 14
    assert calc_perimeter(10, 0) == 20
