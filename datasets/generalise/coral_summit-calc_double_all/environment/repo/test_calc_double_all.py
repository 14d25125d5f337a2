from coral_summit.common import calc_double_all


def test_calc_double_all():
    assert calc_double_all([1, 3]) == [2, 6]
    assert calc_double_all([]) == []
