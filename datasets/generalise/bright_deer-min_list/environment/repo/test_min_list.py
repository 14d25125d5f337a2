from bright_deer.misc import min_list


def test_min_list():
    assert min_list([3, 9, 2]) == 2
    assert min_list([5]) == 5
