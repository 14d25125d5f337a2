from bright_deer.misc import min_list


def test_min_list():
    assert min_list([3, 9, 2]) == 2
    assert min_list([5]) == 5


def test_min_list_hidden():
    assert min_list([4, 6, 8]) == 4
    assert min_list([-5, -2]) == -5
    assert min_list([7, 1, 9]) == 1
