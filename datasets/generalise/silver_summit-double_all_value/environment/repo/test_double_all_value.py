from silver_summit.shared import double_all_value


def test_double_all_value():
    assert double_all_value([1, 3]) == [2, 6]
    assert double_all_value([]) == []
