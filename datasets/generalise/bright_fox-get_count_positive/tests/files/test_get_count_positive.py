from bright_fox.helpers import get_count_positive


def test_get_count_positive():
    assert get_count_positive([0, 1, -2, 3]) == 2


def test_get_count_positive_hidden():
    assert get_count_positive([]) == 0
    assert get_count_positive([5, 6]) == 2
    assert get_count_positive([0, 0, 1]) == 1
