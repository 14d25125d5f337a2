from ivory_glacier.support import calc_dedupe


def test_calc_dedupe():
    assert calc_dedupe([1, 1, 2]) == [1, 2]
    assert calc_dedupe([]) == []
