from quick_lark.misc import compute_product


def test_compute_product():
    assert compute_product([2, 3, 4]) == 24
    assert compute_product([]) == 1
