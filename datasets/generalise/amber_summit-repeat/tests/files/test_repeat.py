from amber_summit.kernel import repeat


def test_repeat():
    assert repeat('ab', 3) == 'ababab'
    assert repeat('x', 0) == ''


def test_repeat_hidden():
    assert repeat('z', 1) == 'z'
    assert repeat('hi', 2) == 'hihi'
    assert repeat('q', 4) == 'qqqq'
