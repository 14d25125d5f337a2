from red_ibis.funcs import get_reverse_string


def test_get_reverse_string():
    assert get_reverse_string('abc') == 'cba'
    assert get_reverse_string('') == ''


def test_get_reverse_string_hidden():
    assert get_reverse_string('ab') == 'ba'
    assert get_reverse_string('level') == 'level'
    assert get_reverse_string('xyz') == 'zyx'
