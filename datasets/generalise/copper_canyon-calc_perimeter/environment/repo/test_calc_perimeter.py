from copper_canyon.base import calc_perimeter


def test_calc_perimeter():
    assert calc_perimeter(3, 4) == 14
    assert calc_perimeter(0, 0) == 0
