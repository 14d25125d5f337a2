from coral_summit.common import calc_double_all


def test_calc_double_all():
    assert calc_double_all([1, 3]) == [2, 6]
    assert calc_double_all([]) == []


def test_calc_double_all_hidden():
    assert calc_double_all([5]) == [10]
    assert calc_double_all([0, -1]) == [0, -2]
    assert calc_double_all([4, 2]) == [8, 4]
