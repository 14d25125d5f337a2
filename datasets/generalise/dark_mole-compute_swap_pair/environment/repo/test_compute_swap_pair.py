from dark_mole.funcs import compute_swap_pair


def test_compute_swap_pair():
    assert compute_swap_pair((1, 2)) == (2, 1)
    assert compute_swap_pair((3, 3)) == (3, 3)
