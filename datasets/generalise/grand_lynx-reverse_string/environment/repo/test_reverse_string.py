from grand_lynx.core import reverse_string


def test_reverse_string():
    assert reverse_string('abc') == 'cba'
    assert reverse_string('') == ''
