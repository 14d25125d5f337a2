from green_fox.lib import swap_pair_value


def test_swap_pair_value():
    assert swap_pair_value((1, 2)) == (2, 1)
    assert swap_pair_value((3, 3)) == (3, 3)
