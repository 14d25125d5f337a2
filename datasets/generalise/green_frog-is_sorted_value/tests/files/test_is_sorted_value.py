from green_frog.helpers import is_sorted_value


def test_is_sorted_value():
    assert is_sorted_value([1, 2, 3]) == True
    assert is_sorted_value([3, 1]) == False


def test_is_sorted_value_hidden():
    assert is_sorted_value([]) == True
    assert is_sorted_value([5, 5, 6]) == True
    assert is_sorted_value([1, 3, 2]) == False
