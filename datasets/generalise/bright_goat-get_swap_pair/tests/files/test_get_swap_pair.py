from bright_goat.misc import get_swap_pair


def test_get_swap_pair():
    assert get_swap_pair((1, 2)) == (2, 1)
    assert get_swap_pair((3, 3)) == (3, 3)


def test_get_swap_pair_hidden():
    assert get_swap_pair(('a', 'b')) == ('b', 'a')
    assert get_swap_pair((0, 9)) == (9, 0)
    assert get_swap_pair((5, 4)) == (4, 5)
