from coral_lagoon.shared import calc_last


def test_calc_last():
    assert calc_last([1, 2, 3]) == 3
    assert calc_last([7]) == 7
