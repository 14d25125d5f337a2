from teal_meadow.routines import calc_index_of


def test_calc_index_of():
    assert calc_index_of([4, 5, 6], 6) == 2
    assert calc_index_of([1, 2], 9) == -1
