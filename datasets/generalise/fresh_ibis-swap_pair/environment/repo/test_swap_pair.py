from fresh_ibis.tools import swap_pair


def test_swap_pair():
    assert swap_pair((1, 2)) == (2, 1)
    assert swap_pair((3, 3)) == (3, 3)
