from dark_ibis.lib import count_positive


def test_count_positive():
    assert count_positive([0, 1, -2, 3]) == 2


def test_count_positive_hidden():
    assert count_positive([]) == 0
    assert count_positive([5, 6]) == 2
    assert count_positive([0, 0, 1]) == 1
