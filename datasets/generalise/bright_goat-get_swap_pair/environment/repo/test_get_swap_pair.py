from bright_goat.misc import get_swap_pair


def test_get_swap_pair():
    assert get_swap_pair((1, 2)) == (2, 1)
    assert get_swap_pair((3, 3)) == (3, 3)
