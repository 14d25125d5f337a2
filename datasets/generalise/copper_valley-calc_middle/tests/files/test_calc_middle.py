from copper_valley.shared import calc_middle


def test_calc_middle():
    assert calc_middle([1, 2, 3]) == 2
    assert calc_middle([7]) == 7


def test_calc_middle_hidden():
    assert calc_middle([4, 5, 6, 7, 8]) == 6
    assert calc_middle(['a', 'b', 'c']) == 'b'
    assert calc_middle([9, 1]) == 1
