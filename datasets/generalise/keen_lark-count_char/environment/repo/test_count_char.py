from keen_lark.tools import count_char


def test_count_char():
    assert count_char('hello', 'l') == 2
    assert count_char('', 'x') == 0
