from bright_fox.helpers import get_count_positive


def test_get_count_positive():
    assert get_count_positive([0, 1, -2, 3]) == 2
