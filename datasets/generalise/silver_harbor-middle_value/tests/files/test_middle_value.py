from silver_harbor.procs import middle_value


def test_middle_value():
    assert middle_value([1, 2, 3]) == 2
    assert middle_value([7]) == 7


def test_middle_value_hidden():
    assert middle_value([4, 5, 6, 7, 8]) == 6
    assert middle_value(['a', 'b', 'c']) == 'b'
    assert middle_value([9, 1]) == 1
