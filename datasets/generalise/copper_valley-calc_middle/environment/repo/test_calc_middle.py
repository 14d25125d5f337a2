from copper_valley.shared import calc_middle


def test_calc_middle():
    assert calc_middle([1, 2, 3]) == 2
    assert calc_middle([7]) == 7
