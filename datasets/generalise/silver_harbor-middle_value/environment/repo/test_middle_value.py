from silver_harbor.procs import middle_value


def test_middle_value():
    assert middle_value([1, 2, 3]) == 2
    assert middle_value([7]) == 7
