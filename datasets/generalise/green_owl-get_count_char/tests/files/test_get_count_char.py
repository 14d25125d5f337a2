from green_owl.misc import get_count_char


def test_get_count_char():
    assert get_count_char('hello', 'l') == 2
    assert get_count_char('', 'x') == 0


def test_get_count_char_hidden():
    assert get_count_char('abc', 'z') == 0
    assert get_count_char('aaaa', 'a') == 4
    assert get_count_char('banana', 'n') == 2
