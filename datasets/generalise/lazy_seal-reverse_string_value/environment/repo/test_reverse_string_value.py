from lazy_seal.tools import reverse_string_value


def test_reverse_string_value():
    assert reverse_string_value('abc') == 'cba'
    assert reverse_string_value('') == ''
