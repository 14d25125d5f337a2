from keen_lark.tools import count_char


def test_count_char():
    assert count_char('hello', 'l') == 2
    assert count_char('', 'x') == 0


def test_count_char_hidden():
    assert count_char('abc', 'z') == 0
    assert count_char('aaaa', 'a') == 4
    assert count_char('banana', 'n') == 2
