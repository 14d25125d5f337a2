from grand_lynx.core import reverse_string


def test_reverse_string():
    assert reverse_string('abc') == 'cba'
    assert reverse_string('') == ''


def test_reverse_string_hidden():
    assert reverse_string('ab') == 'ba'
    assert reverse_string('level') == 'level'
    assert reverse_string('xyz') == 'zyx'
