from dark_owl.lib import max_list


def test_max_list():
    assert max_list([3, 9, 2]) == 9
    assert max_list([5]) == 5
