from indigo_summit.calc import calc_repeat


def test_calc_repeat():
    assert calc_repeat('ab', 3) == 'ababab'
    assert calc_repeat('x', 0) == ''


def test_calc_repeat_hidden():
    assert calc_repeat('z', 1) == 'z'
    assert calc_repeat('hi', 2) == 'hihi'
    assert calc_repeat('q', 4) == 'qqqq'
