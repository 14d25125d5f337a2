from dark_mole.funcs import compute_swap_pair


def test_compute_swap_pair():
    assert compute_swap_pair((1, 2)) == (2, 1)
    assert compute_swap_pair((3, 3)) == (3, 3)


def test_compute_swap_pair_hidden():
    assert compute_swap_pair(('a', 'b')) == ('b', 'a')
    assert compute_swap_pair((0, 9)) == (9, 0)
    assert compute_swap_pair((5, 4)) == (4, 5)
