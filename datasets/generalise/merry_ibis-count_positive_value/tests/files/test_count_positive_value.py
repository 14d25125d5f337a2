from merry_ibis.utils import count_positive_value


def test_count_positive_value():
    assert count_positive_value([0, 1, -2, 3]) == 2


def test_count_positive_value_hidden():
    assert count_positive_value([]) == 0
    assert count_positive_value([5, 6]) == 2
    assert count_positive_value([0, 0, 1]) == 1
