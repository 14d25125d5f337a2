from dark_owl.lib import max_list


def test_max_list():
    assert max_list([3, 9, 2]) == 9
    assert max_list([5]) == 5


def test_max_list_hidden():
    assert max_list([1, 2, 3]) == 3
    assert max_list([-5, -2]) == -2
    assert max_list([7, 7, 1]) == 7
