from coral_lagoon.shared import calc_last


def test_calc_last():
    assert calc_last([1, 2, 3]) == 3
    assert calc_last([7]) == 7


def test_calc_last_hidden():
    assert calc_last([4, 5]) == 5
    assert calc_last(['a', 'b', 'c']) == 'c'
    assert calc_last([9, 8, 1]) == 1
