from indigo_summit.calc import calc_repeat


def test_calc_repeat():
    assert calc_repeat('ab', 3) == 'ababab'
    assert calc_repeat('x', 0) == ''
