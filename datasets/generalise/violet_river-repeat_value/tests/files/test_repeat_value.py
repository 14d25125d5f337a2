from violet_river.base import repeat_value


def test_repeat_value():
    assert repeat_value('ab', 3) == 'ababab'
    assert repeat_value('x', 0) == ''


def test_repeat_value_hidden():
    assert repeat_value('z', 1) == 'z'
    assert repeat_value('hi', 2) == 'hihi'
    assert repeat_value('q', 4) == 'qqqq'
