from coral_prairie.routines import get_repeat


def test_get_repeat():
    assert get_repeat('ab', 3) == 'ababab'
    assert get_repeat('x', 0) == ''


def test_get_repeat_hidden():
    assert get_repeat('z', 1) == 'z'
    assert get_repeat('hi', 2) == 'hihi'
    assert get_repeat('q', 4) == 'qqqq'
