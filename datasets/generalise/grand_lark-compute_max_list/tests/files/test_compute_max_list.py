from grand_lark.misc import compute_max_list


def test_compute_max_list():
    assert compute_max_list([3, 9, 2]) == 9
    assert compute_max_list([5]) == 5


def test_compute_max_list_hidden():
    assert compute_max_list([1, 2, 3]) == 3
    assert compute_max_list([-5, -2]) == -2
    assert compute_max_list([7, 7, 1]) == 7
