from red_ibis.funcs import get_reverse_string


def test_get_reverse_string():
    assert get_reverse_string('abc') == 'cba'
    assert get_reverse_string('') == ''
