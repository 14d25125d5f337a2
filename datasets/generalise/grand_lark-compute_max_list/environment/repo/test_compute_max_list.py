from grand_lark.misc import compute_max_list


def test_compute_max_list():
    assert compute_max_list([3, 9, 2]) == 9
    assert compute_max_list([5]) == 5
