from violet_river.base import repeat_value


def test_repeat_value():
    assert repeat_value('ab', 3) == 'ababab'
    assert repeat_value('x', 0) == ''
