from teal_meadow.routines import calc_index_of


def test_calc_index_of():
    assert calc_index_of([4, 5, 6], 6) == 2
    assert calc_index_of([1, 2], 9) == -1


def test_calc_index_of_hidden():
    assert calc_index_of([], 1) == -1
    assert calc_index_of([7, 8], 7) == 0
    assert calc_index_of([3, 3, 4], 4) == 2
