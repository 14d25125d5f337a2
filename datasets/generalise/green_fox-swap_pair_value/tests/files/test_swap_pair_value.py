from green_fox.lib import swap_pair_value


def test_swap_pair_value():
    assert swap_pair_value((1, 2)) == (2, 1)
    assert swap_pair_value((3, 3)) == (3, 3)


def test_swap_pair_value_hidden():
    assert swap_pair_value(('a', 'b')) == ('b', 'a')
    assert swap_pair_value((0, 9)) == (9, 0)
    assert swap_pair_value((5, 4)) == (4, 5)
