from silver_summit.shared import double_all_value


def test_double_all_value():
    assert double_all_value([1, 3]) == [2, 6]
    assert double_all_value([]) == []


def test_double_all_value_hidden():
    assert double_all_value([5]) == [10]
    assert double_all_value([0, -1]) == [0, -2]
    assert double_all_value([4, 2]) == [8, 4]
