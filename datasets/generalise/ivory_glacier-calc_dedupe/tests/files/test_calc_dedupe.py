from ivory_glacier.support import calc_dedupe


def test_calc_dedupe():
    assert calc_dedupe([1, 1, 2]) == [1, 2]
    assert calc_dedupe([]) == []


def test_calc_dedupe_hidden():
    assert calc_dedupe([3]) == [3]
    assert calc_dedupe([2, 2, 2]) == [2]
    assert calc_dedupe([1, 2, 1, 3]) == [1, 2, 3]
