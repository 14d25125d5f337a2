from coral_prairie.routines import get_repeat


def test_get_repeat():
    assert get_repeat('ab', 3) == 'ababab'
    assert get_repeat('x', 0) == ''
