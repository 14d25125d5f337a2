from green_owl.misc import get_count_char


def test_get_count_char():
    assert get_count_char('hello', 'l') == 2
    assert get_count_char('', 'x') == 0
