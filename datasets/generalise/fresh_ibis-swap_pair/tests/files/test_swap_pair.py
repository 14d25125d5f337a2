from fresh_ibis.tools import swap_pair


def test_swap_pair():
    assert swap_pair((1, 2)) == (2, 1)
    assert swap_pair((3, 3)) == (3, 3)


def test_swap_pair_hidden():
    assert swap_pair(('a', 'b')) == ('b', 'a')
    assert swap_pair((0, 9)) == (9, 0)
    assert swap_pair((5, 4)) == (4, 5)
